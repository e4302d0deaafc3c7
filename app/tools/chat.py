"""Tools in a chat: the set a chat may use (from the MCP servers it enabled), under the names the model sees,
and the user's answer to each call the model makes."""

from __future__ import annotations

import enum
import json
import logging
import re
import secrets
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.errors import HearthError
from app.tools.host import ToolHost, ToolInfo, ToolServerError
from inference.protocol import ToolSpec

log = logging.getLogger("hearth.tools")

ALL_SERVERS = "all"
# What chat templates and OpenAI accept as a function name.
_FUNCTION_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_ID_CHARS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"


class Approval(enum.Enum):
    ALLOW_ONCE = "allow_once"
    ALLOW_IN_CHAT = "allow_in_chat"  # this tool, for the rest of this conversation
    DENY = "deny"


@dataclass(frozen=True)
class ToolRequest:
    """A call waiting for the user's answer: what runs where, with which arguments."""

    server: str
    tool: str
    arguments: str  # the JSON text the model wrote
    call_id: str

    def arguments_shown(self) -> str:
        """The arguments as a person reads them: indented JSON, or as written when they are not JSON."""
        try:
            return json.dumps(json.loads(self.arguments), indent=2, ensure_ascii=False)
        except ValueError:
            return self.arguments


@dataclass(frozen=True)
class ToolSet:
    """The tools offered to the model in one chat: `specs` as the model sees them, each mapped to the server
    and tool that runs it. `problems`: the servers that could not be used, and why (said to the user)."""

    host: ToolHost
    specs: tuple[ToolSpec, ...]
    targets: dict[str, tuple[str, str]]  # the model's name for a tool → (server, tool)
    problems: tuple[str, ...] = ()

    @classmethod
    def open(cls, host: ToolHost, wanted: Sequence[str]) -> ToolSet:
        """Blocking: starts the servers `wanted` names (or ALL_SERVERS, the enabled ones) and lists their
        tools. A server that fails is left out and named in `problems`; none at all is a HearthError."""
        registry = host.registry
        problems: list[str] = []
        if list(wanted) == [ALL_SERVERS]:
            servers = [s.name for s in registry.servers() if s.enabled]
            if not servers:
                raise HearthError("No tool servers are turned on; add one with `hearth tools add`.")
        else:
            servers = []
            for name in wanted:
                try:
                    servers.append(registry.get(name).name)
                except HearthError as exc:
                    # A chat keeps the names it chose: one since removed from mcp.json is said, not fatal.
                    problems.append(str(exc))
        listed: list[ToolInfo] = []
        for name in servers:
            try:
                listed += host.tools(name)
            except ToolServerError as exc:
                problems.append(str(exc))
        if not listed:
            raise HearthError(" ".join(problems) or "The tool servers offer no tools.")
        return cls.of(host, listed, tuple(problems))

    @classmethod
    def running(cls, host: ToolHost, wanted: Sequence[str]) -> ToolSet:
        """What the servers `wanted` names offer, of those running now (none is started): the tools as the
        next turn would offer them once its servers are up."""
        listed: list[ToolInfo] = []
        for name in wanted:
            try:
                listed += host.running_tools(name) or []
            except (HearthError, ToolServerError):
                continue  # removed from mcp.json, or stopping: the turn says why when it opens them
        return cls.of(host, listed)

    @classmethod
    def of(cls, host: ToolHost, tools: Sequence[ToolInfo], problems: tuple[str, ...] = ()) -> ToolSet:
        # A name two servers share is told apart by its server: the model must be able to say which.
        counts: dict[str, int] = {}
        for tool in tools:
            counts[tool.name] = counts.get(tool.name, 0) + 1
        specs: list[ToolSpec] = []
        targets: dict[str, tuple[str, str]] = {}
        for tool in tools:
            seen = tool.name if counts[tool.name] == 1 else f"{tool.server}_{tool.name}"
            seen = re.sub(r"[^A-Za-z0-9_-]", "_", seen)[:64]
            if not _FUNCTION_NAME.fullmatch(seen) or seen in targets:
                log.warning("tool %s of %s is left out: no usable name for it", tool.name, tool.server)
                continue
            targets[seen] = (tool.server, tool.name)
            specs.append(ToolSpec(seen, tool.description, json.dumps(dict(tool.input_schema))))
        return cls(host, tuple(specs), targets, problems)

    def target(self, name: str) -> tuple[str, str] | None:
        return self.targets.get(name)


class PendingApproval:
    """A call waiting for a person's answer, between the thread running the turn (`wait`) and the one
    showing the question (`answer`). Never answered, it is denied: a chat always ends."""

    def __init__(self, request: ToolRequest) -> None:
        self.request = request
        self._answered = threading.Event()
        self._answer = Approval.DENY

    def answer(self, approval: Approval) -> None:
        if not self._answered.is_set():
            self._answer = approval
            self._answered.set()

    def wait(self, given_up: Callable[[], bool], poll_s: float = 0.1) -> Approval:
        """Blocks until answered, or until `given_up()` says so (Stop was pressed, the window closes)."""
        while not self._answered.wait(poll_s):
            if given_up():
                self.answer(Approval.DENY)
        return self._answer


def local_call_id(given: str | None = None) -> str:
    """An id for a local model's call: the model's own when it gave one of the shape every template takes
    (nine letters and digits: Mistral's templates refuse any other), else a new one of that shape."""
    if given is not None and re.fullmatch(r"[A-Za-z0-9]{9}", given):
        return given
    return "".join(secrets.choice(_ID_CHARS) for _ in range(9))
