"""Chat-template rendering that a hostile model file cannot turn into code execution, a hang or a memory bomb.

A GGUF file's `tokenizer.chat_template` is Jinja written by whoever made the file, and it runs on every
message (CVE-2024-34359 was exactly this, unsandboxed). Here it runs in Jinja's ImmutableSandboxedEnvironment
(jinja2 >= 3.1.6, which closed the `|attr` and `str.format` escapes) with three extra limits:

- size: templates over MAX_TEMPLATE_CHARS are not compiled at all;
- time: a `sys.settrace` deadline interrupts templates that loop without calling anything. A trace function
  runs only between Python steps, so no single C call may take long either: the operations whose cost is
  not linear in values already checked (comparing, hashing, sorting or summing nested values, which Python
  does element by element inside one call, dividing huge integers) are checked *before* they run;
- memory: the output is streamed and capped, no single value the template builds may exceed the same cap
  (lists: MAX_ITEMS items), and the process's resident memory may grow by at most MAX_RENDER_MEMORY while
  the template runs (sampled by the same trace function). Python allocates a whole string before a trace
  function could stop it (`'x' * 10**10`, `'{:>9999999999}'.format(x)`, `big|join(big)`,
  `long_text|list`), so the operations that can multiply sizes are checked *before* they run, and
  everything else is checked after (its result is at most a small multiple of inputs that were already
  checked).

Whatever goes wrong, the caller gets a ChatML prompt and a one-line note for the user; nothing propagates.

Message text is data, never markup: text in a message that spells one of the model's control tokens
(`<|im_start|>`, pasted or in an imported file) would otherwise become that token and forge a turn. The
caller names the control tokens' texts; they are swapped for stand-in characters while the template runs, and
RenderedPrompt.literal_spans says where they ended up, for the tokenizer to read as plain text.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import re
import sys
import time
import types
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence, Set
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import psutil
from jinja2 import Template, nodes
from jinja2.compiler import CodeGenerator, Frame, operators, optimizeconst
from jinja2.exceptions import SecurityError, TemplateError
from jinja2.runtime import Context, Macro, Undefined
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import Namespace

from inference.protocol import ChatMessage, ToolSpec

FALLBACK_SOURCE: Final = "fallback:chatml"
CHATML_STOP_STRINGS: Final = ("<|im_end|>", "<|im_start|>")
MAX_TEMPLATE_CHARS: Final = 256 * 1024
COMPILE_TIME_LIMIT_S: Final = 10.0
# How much the process's resident memory may grow while one template compiles or renders. Real templates
# need a few copies of the conversation (under 16 MiB for the DeepSeek and SmolLM2 templates at the
# 4M-character output cap); a template that keeps what it builds is stopped here. The limit is noticed at
# the next trace event, and the caps below keep what one C call allocates to tens of MB, so the growth
# seen stays far under MAX_RENDER_MEMORY + 100 MB.
MAX_RENDER_MEMORY: Final = 128 * 1024 * 1024
# Most items a list, tuple or dict the template builds may hold, and most items one C call may split a
# string into: a fresh one-character string costs ~80 bytes, so 500,000 of them are ~40 MB.
MAX_ITEMS: Final = 500_000

# Widths, counts and indents this large are never needed to format a chat; they are how a template asks
# Python for gigabytes in a single call. Same bound as Jinja's own MAX_RANGE.
_MAX_CALL_INT: Final = 100_000
# 65,536 bits (~20,000 digits): no chat template needs more. Python divides integers in quadratic time inside
# one C call; at 2**20 bits a single `x % y` took over a second.
_MAX_INT_BITS: Final = 1 << 16
_MAX_JSON_INDENT: Final = 16
# Real templates use ", " and ": " or "," and ":"; the size walk already counts two characters a separator.
_MAX_JSON_SEPARATOR: Final = 4
# How often the trace function reads the process's resident memory (~10 us a reading).
_MEMORY_SAMPLE_S: Final = 0.002
# Stringifying these cannot make anything much larger than their input, so they skip the size walk.
_NON_STRINGIFYING_FILTERS: Final = frozenset(
    {
        "abs", "attr", "batch", "count", "d", "default", "dictsort", "first", "float", "groupby", "int",
        "items", "last", "length", "list", "map", "max", "min", "random", "reject", "rejectattr", "reverse",
        "round", "select", "selectattr", "slice", "sort", "sum", "unique",
    }
)  # fmt: skip
# Filters that compare, hash or add every item of their input in one C call: it gets the comparison walk.
# An iterator is made a list first, so that the walk sees the items.
_COMPARING_FILTERS: Final = frozenset({"sort", "dictsort", "unique", "min", "max", "groupby", "sum"})
# How large a value may be compared or hashed, counted as _weight() does but with a string's characters
# counted 256 to a unit (memcmp is fast; visiting an element is not). Real templates compare strings,
# numbers and single messages; walking this much takes ~50 ms.
_MAX_COMPARED: Final = 250_000
# Filters that turn a string into one object per character in one C call (list(text), sorted(text), ...).
_EXPLODING_FILTERS: Final = frozenset({"list", "sort", "slice", "groupby", "unique", "join"})
# Filters that split text into words with a regular expression in one C call: at most one word per two
# characters.
_WORD_SPLITTING_FILTERS: Final = frozenset({"wordcount", "title", "striptags", "urlize", "wordwrap"})
# The tests that compare their arguments (`x is eq y`, `select('equalto', y)`); "in" searches its second.
_COMPARING_TESTS: Final = frozenset(
    {
        "==", "eq", "equalto", "!=", "ne", "<", "lt", "lessthan", "<=", "le", ">", "gt", "greaterthan",
        ">=", "ge",
    }
)  # fmt: skip
# Values that compare and hash in time linear in their size (and None).
_SCALARS: Final = (str, int, float, bytes, range, type(None))
# What str.splitlines() splits at.
_LINE_BREAKS: Final = "\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029"
# Nothing a chat template needs, and each can grow a string by an unbounded factor in one C call (encode's
# and decode's error handlers too: namereplace writes a Unicode name for each character).
_BLOCKED_STR_METHODS: Final = frozenset({"translate", "maketrans", "expandtabs", "encode", "decode"})
# str.strip(chars) looks each character up in `chars` one by one: text and chars of 4 MB each take days.
_MAX_STRIP_CHARS: Final = 256
# How much work building one dict or set in one C call may take, as keys times their total weight (see
# _weight): integers that are equal modulo 2**61 - 1 share a hash, so each new key is compared with every
# earlier one (20,000 small such keys took 6 s). Allows a few thousand small keys.
_MAX_HASH_WORK: Final = 10_000_000
# Longer formats only make strftime longer; Python lets the output reach 256 times the format.
_MAX_STRFTIME_FORMAT: Final = 256
_DIGITS: Final = re.compile(r"\d+")
# Where stand-ins for control-token text in messages come from: Unicode's private-use areas, which no
# template treats specially (no case, not whitespace, not escaped by tojson); one is taken only if neither
# the template nor any message already contains it.
_STAND_IN_RANGES: Final = ((0xE000, 0xF8FF), (0xF0000, 0xFFFFD), (0x100000, 0x10FFFD))


@dataclass(frozen=True)
class RenderedPrompt:
    text: str
    source: str  # "gguf" or FALLBACK_SOURCE
    note: str  # "" when the model's template was used, else one line for the user
    # [start, end) ranges of `text` that a message supplied and that spell a control token (render_chat's
    # `control_texts`): the tokenizer must read them as plain text. In order, never overlapping.
    literal_spans: tuple[tuple[int, int], ...] = ()

    def pieces(self) -> Iterator[tuple[str, bool]]:
        """`text` in order as (piece, literal) pairs; a literal piece must never become a control token."""
        position = 0
        for start, end in self.literal_spans:
            if start > position:
                yield self.text[position:start], False
            yield self.text[start:end], True
            position = end
        if position < len(self.text) or not self.literal_spans:
            yield self.text[position:], False

    @property
    def stop_strings(self) -> tuple[str, ...]:
        """Strings that end a turn in the format actually used (the model's own EOS handles "gguf")."""
        return CHATML_STOP_STRINGS if self.source == FALLBACK_SOURCE else ()


def render_chat(
    template: str | None,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str = "",
    eos_token: str = "",
    add_generation_prompt: bool = True,
    time_limit_s: float = 1.0,
    max_output_chars: int = 4_000_000,
    max_memory_bytes: int = MAX_RENDER_MEMORY,
    control_texts: frozenset[str] = frozenset(),
    tools: Sequence[ToolSpec] = (),
) -> RenderedPrompt:
    """Render `messages` with the model's chat template, or with ChatML (and a note saying why).

    `control_texts`: the texts of the model's control tokens; where message content spells one, the result's
    literal_spans mark it. `tools`: given to the template as its `tools` variable, in OpenAI's shape, as
    Hugging Face's apply_chat_template does (the ChatML fallback has no way to offer them).
    """
    stand_ins: dict[str, str] = {}
    pattern = control_text_pattern(control_texts)
    if pattern is not None and any(pattern.search(m.content) for m in messages):
        messages, stand_ins = _mask_messages(messages, pattern, (template or "", bos_token, eos_token))
    rendered = _render(
        template,
        messages,
        bos_token=bos_token,
        eos_token=eos_token,
        add_generation_prompt=add_generation_prompt,
        time_limit_s=time_limit_s,
        max_output_chars=max_output_chars,
        max_memory_bytes=max_memory_bytes,
        tools=tools,
    )
    return _unmask(rendered, stand_ins) if stand_ins else rendered


def _render(
    template: str | None,
    messages: Sequence[ChatMessage],
    *,
    bos_token: str,
    eos_token: str,
    add_generation_prompt: bool,
    time_limit_s: float,
    max_output_chars: int,
    max_memory_bytes: int,
    tools: Sequence[ToolSpec] = (),
) -> RenderedPrompt:
    if template is None or not template.strip():
        return _fallback(messages, add_generation_prompt, "This model has no chat template")
    if len(template) > MAX_TEMPLATE_CHARS:
        return _fallback(
            messages,
            add_generation_prompt,
            f"The model's chat template is {-(-len(template) // 1024)} KiB, "
            f"over the {MAX_TEMPLATE_CHARS // 1024} KiB limit",
        )
    context: dict[str, object] = {
        "messages": [_template_message(m) for m in messages],
        "bos_token": bos_token,
        "eos_token": eos_token,
        "add_generation_prompt": add_generation_prompt,
    }
    if tools:
        # Only when there are some: templates test `tools is not none` as often as `tools`.
        context["tools"] = [_template_tool(t) for t in tools]
    try:
        text = _render_bounded(
            template,
            context,
            time_limit_s=time_limit_s,
            max_chars=max_output_chars,
            max_memory_bytes=max_memory_bytes,
        )
    except _RenderTimeout as exc:
        reason = str(exc)
    except _TooMuchMemory:
        reason = f"it needs too much memory: over {max_memory_bytes / 2**20:g} MiB"
    except _OutputTooLarge:
        reason = f"its output exceeded {max_output_chars:,} characters"
    except _LimitExceeded as exc:
        reason = str(exc)
    except Exception as exc:
        reason = _describe(exc)
    else:
        return RenderedPrompt(text=text, source="gguf", note="")
    return _fallback(messages, add_generation_prompt, f"The model's chat template failed ({reason})")


def _template_message(message: ChatMessage) -> dict[str, object]:
    """A message as templates read it (Hugging Face's and OpenAI's shape): an assistant's calls with their
    arguments as an object (templates apply `tojson` to them), a tool result with the call it answers."""
    entry: dict[str, object] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        entry["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": _arguments(call.arguments)},
            }
            for call in message.tool_calls
        ]
    if message.tool_call_id is not None:
        entry["tool_call_id"] = message.tool_call_id
    if message.tool_name is not None:
        entry["name"] = message.tool_name
    return entry


def _arguments(text: str) -> object:
    try:
        parsed = json.loads(text)
    except ValueError:
        return text  # shown as the model wrote it; the call was refused for it
    return parsed if isinstance(parsed, dict) else text


def _template_tool(tool: ToolSpec) -> dict[str, object]:
    try:
        parameters = json.loads(tool.parameters_json)
    except ValueError:
        parameters = {"type": "object"}
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": parameters},
    }


def _fallback(messages: Sequence[ChatMessage], add_generation_prompt: bool, why: str) -> RenderedPrompt:
    parts = [f"<|im_start|>{m.role}\n{m.content}<|im_end|>\n" for m in messages]
    if add_generation_prompt:
        parts.append("<|im_start|>assistant\n")
    return RenderedPrompt(
        text="".join(parts), source=FALLBACK_SOURCE, note=f"{why}; using the ChatML format."
    )


@functools.lru_cache(maxsize=8)
def control_text_pattern(texts: frozenset[str]) -> re.Pattern[str] | None:
    """A regex that finds any of `texts`, the longest one where several start at the same place.

    Built as a trie: vocabularies have hundreds to thousands of control tokens (reserved and unused
    slots), and a plain alternation would try every one of them at every `<` of a long prompt.
    """
    words = sorted(t for t in texts if t)
    if not words:
        return None
    try:
        return re.compile(_trie_pattern(words))
    except RecursionError:
        # Only a hostile vocabulary nests this deep ("<", "<<", "<<<", ...); slower, same matches.
        return re.compile("|".join(re.escape(w) for w in sorted(words, key=len, reverse=True)))


def _trie_pattern(words: Sequence[str]) -> str:
    root: dict[str, Any] = {}
    for word in words:
        node = root
        for char in word:
            node = node.setdefault(char, {})
        node[""] = {}

    def emit(node: dict[str, Any]) -> str:
        chain = ""
        # A run of single children is one literal, not a nested group per character.
        while len(node) == 1 and "" not in node:
            ((char, node),) = node.items()
            chain += re.escape(char)
        branches = [re.escape(char) + emit(child) for char, child in sorted(node.items()) if char]
        if not branches:
            return chain
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        # Greedy: a longer control token wins over one that is its prefix.
        return chain + (f"(?:{body})?" if "" in node else body)

    return emit(root)


def _mask_messages(
    messages: Sequence[ChatMessage], pattern: re.Pattern[str], markup: Sequence[str]
) -> tuple[list[ChatMessage], dict[str, str]]:
    """Messages with every control-token text swapped for a stand-in character, and the stand-ins used."""
    taken = {char for text in markup for char in text}
    for message in messages:
        taken.update(message.content)
    free = (
        char for low, high in _STAND_IN_RANGES for char in map(chr, range(low, high + 1)) if char not in taken
    )
    stand_ins: dict[str, str] = {}

    def stand_in(match: re.Match[str]) -> str:
        text = match.group()
        char = stand_ins.get(text)
        if char is None:
            char = next(free, None)
            if char is None:
                # Only text that already holds nearly every private-use character gets here.
                raise ValueError("the messages use every private-use character; cannot mark control tokens")
            stand_ins[text] = char
        return char

    masked = [dataclasses.replace(m, content=pattern.sub(stand_in, m.content)) for m in messages]
    return masked, stand_ins


def _unmask(rendered: RenderedPrompt, stand_ins: Mapping[str, str]) -> RenderedPrompt:
    """Puts the original text back where the template placed each stand-in, and records where that is."""
    originals = {char: text for text, char in stand_ins.items()}
    finder = re.compile("[" + "".join(re.escape(char) for char in originals) + "]")
    parts: list[str] = []
    spans: list[tuple[int, int]] = []
    position = length = 0
    for match in finder.finditer(rendered.text):
        before = rendered.text[position : match.start()]
        original = originals[match.group()]
        parts += [before, original]
        length += len(before)
        spans.append((length, length + len(original)))
        length += len(original)
        position = match.end()
    parts.append(rendered.text[position:])
    return dataclasses.replace(rendered, text="".join(parts), literal_spans=tuple(spans))


def _describe(exc: Exception) -> str:
    detail = " ".join(str(exc).split())
    if len(detail) > 160:
        detail = detail[:157] + "..."
    return f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__


class _Interrupted(BaseException):
    """Raised by the trace function. BaseException so that an `except Exception` in code the template calls
    cannot swallow it.

    That matters because CPython removes a trace function that raises, so there is exactly one shot.
    """


class _RenderTimeout(_Interrupted):
    pass


class _TooMuchMemory(_Interrupted):
    pass


class _OutputTooLarge(Exception):
    pass


class _LimitExceeded(SecurityError):
    pass


def _render_bounded(
    source: str, context: Mapping[str, object], *, time_limit_s: float, max_chars: int, max_memory_bytes: int
) -> str:
    # Compiling gets its own, larger budget: Jinja needs about a second per 100 KiB of template (more under
    # the tracer), it happens once per template (the result is cached) and usually at model load.
    deadline, overrun = (
        time.monotonic() + COMPILE_TIME_LIMIT_S,
        f"compiling it took over {COMPILE_TIME_LIMIT_S:g} s",
    )
    memory = _MemoryGauge()
    next_reading = 0.0

    def tracer(frame: types.FrameType, event: str, arg: object) -> Any:
        nonlocal next_reading
        now = time.monotonic()
        if now > deadline:
            raise _RenderTimeout(overrun)
        if now >= next_reading:
            next_reading = now + _MEMORY_SAMPLE_S
            if memory.growth() > max_memory_bytes:
                raise _TooMuchMemory
        if event == "call" and id(frame.f_code) in _UNTRACED_CODE:
            return None
        return tracer

    chunks: list[str] = []
    size = 0
    stream: Iterable[str] | None = None
    previous = sys.gettrace()
    # Only frames entered from here on are traced, so this loop itself runs at full speed; compiling is
    # traced too because Jinja's parser and Python's compiler both run on untrusted input.
    sys.settrace(tracer)
    try:
        template = _compile(max_chars, source)
        deadline, overrun = time.monotonic() + time_limit_s, f"it took longer than {time_limit_s:g} s"
        memory.restart()
        stream = template.generate(context)
        for chunk in stream:
            size += len(chunk)
            if size > max_chars:
                raise _OutputTooLarge
            chunks.append(chunk)
    finally:
        sys.settrace(previous)
        # Closed here, untraced, rather than when the frame is torn down with the tracer still installed.
        if isinstance(stream, types.GeneratorType):
            stream.close()
    return "".join(chunks)


class _MemoryGauge:
    """How much the process's resident memory has grown since the start (or the last restart()).

    Resident memory, not tracemalloc: tracing every allocation would slow every template down, and what
    must not grow is the process. Memory freed earlier and reused counts as no growth, which is right.
    """

    def __init__(self) -> None:
        self._process: psutil.Process | None
        try:
            self._process = psutil.Process()
        except (psutil.Error, OSError):
            self._process = None
        self._start = 0
        self.restart()

    def restart(self) -> None:
        self._start = self._resident()

    def growth(self) -> int:
        return self._resident() - self._start if self._process is not None else 0

    def _resident(self) -> int:
        if self._process is None:
            return 0
        try:
            return int(self._process.memory_info().rss)
        except (psutil.Error, OSError):
            # Nothing left to measure with; the per-value caps still hold.
            self._process = None
            return 0


@functools.lru_cache(maxsize=16)
def _compile(limit: int, source: str) -> Template:
    return _environment(limit).from_string(source)


@functools.lru_cache(maxsize=4)
def _environment(limit: int) -> _BoundedSandbox:
    return _BoundedSandbox(limit)


class _BoundedCodeGenerator(CodeGenerator):
    """Routes the operands of `~` through a size check before Jinja joins them, the operands of comparisons
    through a walk before Python compares them, and dict literals through a check of their keys.

    The bodies mirror CodeGenerator.visit_Concat, visit_Compare and visit_Dict (jinja2 3.1); only the
    `environment.*(...)` wrappers are new.
    """

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        if frame.eval_ctx.volatile:
            func_name = "(markup_join if context.eval_ctx.volatile else str_join)"
        elif frame.eval_ctx.autoescape:
            func_name = "markup_join"
        else:
            func_name = "str_join"
        self.write(f"{func_name}(environment.checked_parts((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write(")))")

    @optimizeconst
    def visit_Compare(self, node: nodes.Compare, frame: Frame) -> None:
        operands = [node.expr, *(operand.expr for operand in node.ops)]
        self.write("(")
        for index, operand in enumerate(operands):
            if index:
                self.write(f" {operators[node.ops[index - 1].op]} ")
            # The right side of `in` may be a dict or a string, searched without comparing its items, unless
            # a chain compares it again (`a in b == c`).
            haystack = index > 0 and node.ops[index - 1].op in ("in", "notin")
            compared_next = index < len(node.ops)
            if isinstance(operand, nodes.Const):  # as large as the template, no larger
                self.visit(operand, frame)
                continue
            check = "searched" if haystack and not compared_next else "compared"
            self.write(f"environment.{check}(")
            self.visit(operand, frame)
            self.write(")")
        self.write(")")

    def visit_Dict(self, node: nodes.Dict, frame: Frame) -> None:
        self.write("environment.checked_dict((")
        for item in node.items:
            self.write("(environment.compared(")
            self.visit(item.key, frame)
            self.write("), ")
            self.visit(item.value, frame)
            self.write("), ")
        self.write("))")


class _BoundedSandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"+", "-", "*", "**", "%"})
    code_generator_class = _BoundedCodeGenerator

    def __init__(self, limit: int) -> None:
        super().__init__(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=["jinja2.ext.loopcontrols"],
            finalize=self._finalize,
            # Constant folding would evaluate template expressions while compiling, and turn dict literals
            # into Python displays that no check sees.
            optimized=False,
        )
        self.limit = limit
        self.globals["raise_exception"] = _raise_exception
        self.globals["strftime_now"] = _strftime_now
        self.filters["tojson"] = _tojson
        self.filters = {name: self._guard_filter(name, func) for name, func in self.filters.items()}
        # mypy infers jinja2's test table as dict[str, function], and `function` is not Callable to it.
        tests: dict[str, Any] = self.tests
        self.tests = {name: self._guard_test(name, func) for name, func in tests.items()}

    # --- sandbox policy -------------------------------------------------------------------------------

    def is_safe_attribute(self, obj: Any, attr: str, value: Any) -> bool:
        if isinstance(obj, str | bytes) and attr in _BLOCKED_STR_METHODS:
            return False
        return super().is_safe_attribute(obj, attr, value)

    def unsafe_undefined(self, obj: Any, attribute: str) -> Undefined:
        # Jinja's default returns an Undefined that renders as "", which would hide an escape attempt and
        # let the template carry on; a template that tries one is not one to trust with the prompt.
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None
        fmt: str = value.__self__
        self._check_format_widths(fmt)
        format_call = wrapped

        def checked(*args: Any, **kwargs: Any) -> str:
            self._check_size(len(fmt) + self._weight(args) + self._weight(kwargs), "a formatted string")
            return format_call(*args, **kwargs)

        return checked

    # --- operations a template can use to build large values ------------------------------------------

    def getitem(self, obj: Any, argument: Any) -> Any:
        if not isinstance(argument, _SCALARS):
            self.compared(argument)  # a dict hashes a tuple key element by element
        return super().getitem(obj, argument)

    def call(self, context: Context, obj: Any, /, *args: Any, **kwargs: Any) -> Any:
        self._check_ints(args, kwargs)
        if not isinstance(obj, Macro):
            # Functions and methods that are not template code compare or hash their arguments in C:
            # list.count, dict.get, loop.changed, dict(pairs)... A macro's body is checked as it runs.
            for value in (*args, *kwargs.values()):
                if not isinstance(value, _SCALARS):
                    self.compared(value)
        target = getattr(obj, "__self__", None)
        if isinstance(target, str | bytes) and isinstance(obj, types.BuiltinMethodType):
            if obj.__name__ == "join" and len(args) == 1:
                items = args[0]
                if isinstance(items, str | bytes):
                    self._check_items(len(items), "a string joined character by character")
                else:
                    items = list(items)
                    self._check_items(len(items), "a joined list")
                self._check_size(self._join_size(target, items), "a joined string")
                args = (items,)
            elif obj.__name__ == "replace" and len(args) >= 2:
                count = args[2] if len(args) > 2 else kwargs.get("count", -1)
                self._check_size(_replace_size(target, args[0], args[1], count), "a replaced string")
            elif obj.__name__ in ("split", "rsplit"):
                separator = args[0] if args else kwargs.get("sep")
                maxsplit = args[1] if len(args) > 1 else kwargs.get("maxsplit", -1)
                self._check_items(_split_size(target, separator, maxsplit), "a split string")
            elif obj.__name__ == "splitlines":
                self._check_items(_line_count(target), "a string split into lines")
            elif obj.__name__ in ("strip", "lstrip", "rstrip"):
                _check_strip_chars(args[0] if args else kwargs.get("chars"))
        elif isinstance(target, list | tuple) and getattr(obj, "__name__", "") in ("count", "index"):
            self.compared(target)
        elif (
            obj is dict
            or obj is Namespace
            or (isinstance(target, type) and getattr(obj, "__name__", "") == "fromkeys")
        ):
            args = tuple(self._hashable(value) for value in args)
        return self._checked(super().call(context, obj, *args, **kwargs))

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                if isinstance(seq, str | bytes) and isinstance(times, int):
                    self._check_size(len(seq) * times, "a repeated value")
                elif isinstance(seq, list | tuple) and isinstance(times, int):
                    self._check_items(len(seq) * times, "a repeated list")
            if isinstance(left, int) and isinstance(right, int):
                self._check_int_bits(left.bit_length() + right.bit_length())
        elif operator == "**":
            if isinstance(left, int) and isinstance(right, int) and right > 0 and abs(left) > 1:
                self._check_int_bits(right * left.bit_length())
        elif operator == "+":
            if isinstance(left, str | bytes) and isinstance(right, str | bytes):
                self._check_size(len(left) + len(right), "a concatenated value")
            elif isinstance(left, list | tuple) and isinstance(right, list | tuple):
                self._check_items(len(left) + len(right), "a concatenated list")
        elif operator == "-" and (isinstance(left, Set) or isinstance(right, Set)):
            # A dict view's difference builds a set of the other side in one C call.
            left, right = self._hashable(left), self._hashable(right)
        elif operator == "%" and isinstance(left, str | bytes):
            fmt = left.decode("latin-1") if isinstance(left, bytes) else left
            self._check_format_widths(fmt)
            if "*" in fmt:
                self._check_ints(right if isinstance(right, tuple) else (right,), {})
            self._check_size(len(fmt) + self._weight(right), "a formatted string")
        return self._checked(super().call_binop(context, operator, left, right))

    def compared(self, value: Any) -> Any:
        """An operand of a comparison, or a value about to be hashed, let through if that is cheap.

        Python compares and hashes lists, tuples and dicts element by element inside one C call, and
        values that share parts (`[a, a]`, nested 60 deep) make that exponential: the walk, which counts a
        shared part every time it is reached, bounds it. Strings and numbers cost what their size does.
        """
        if isinstance(value, _SCALARS):
            return value
        if isinstance(value, Collection) and self._weight(value, _MAX_COMPARED, 256) > _MAX_COMPARED:
            raise _LimitExceeded("comparing or hashing a value this large and nested would take too long")
        return value

    def searched(self, value: Any) -> Any:
        """The right side of `in`: a dict, a dict view or a string is searched without comparing items."""
        if isinstance(value, str | dict | bytes | range | Mapping | Set):
            return value
        return self.compared(value)

    def checked_dict(self, items: tuple[tuple[Any, Any], ...]) -> dict[Any, Any]:
        """A dict literal, built once its keys are known to be cheap to hash and insert."""
        self._hashable(tuple(key for key, _ in items))
        return dict(items)

    def _hashable(self, value: Any) -> Any:
        """`value` (a list if it was an iterator), if building a dict or set from it is cheap enough."""
        if isinstance(value, _SCALARS):
            return value
        if not isinstance(value, Collection):
            value = list(value)
        if len(value) * self._weight(value, _MAX_HASH_WORK, 256) > _MAX_HASH_WORK:
            raise _LimitExceeded("a dict or set this large built at once could take too long")
        return value

    def checked_parts(self, parts: tuple[Any, ...]) -> tuple[Any, ...]:
        """The operands of `~`, let through only if joining them stays within the limit."""
        self._check_size(sum(len(p) if isinstance(p, str) else self._weight(p) for p in parts), "a string")
        return parts

    def concat(self, parts: Iterable[str]) -> str:
        """Joins block, macro and `{% set %}` bodies; counts as it goes because `parts` may be a generator."""
        collected: list[str] = []
        total = 0
        for part in parts:
            total += len(part)
            self._check_size(total, "a block of template output")
            collected.append(part)
        return "".join(collected)

    def _finalize(self, value: Any) -> Any:
        # Runs on every {{ }} value before Jinja calls str() on it.
        if not isinstance(value, str):
            self._check_size(self._weight(value), "an output value")
        return value

    def _guard_test(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        if name != "in" and name not in _COMPARING_TESTS:
            return func

        @functools.wraps(func)
        def guarded(*args: Any, **kwargs: Any) -> Any:
            for position, value in enumerate((*args, *kwargs.values())):
                if name == "in" and position == 1:
                    self.searched(value)
                else:
                    self.compared(value)
            return func(*args, **kwargs)

        return guarded

    def _guard_filter(self, name: str, func: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(func)
        walks = name not in _NON_STRINGIFYING_FILTERS
        # Jinja passes the context or environment first to some filters; the filtered value comes next.
        passes = getattr(func, "jinja_pass_arg", None) is not None
        # Jinja's async_variant gives |list and |slice an eval context that their signature (read through
        # __wrapped__) does not show; binding it would fail and skip every check, so it goes around.
        hidden = passes and getattr(inspect.unwrap(func), "jinja_pass_arg", None) is None
        value_index = 1 if passes and not hidden else 0

        @functools.wraps(func)  # keeps `jinja_pass_arg`, which tells Jinja what to pass first
        def guarded(*args: Any, **kwargs: Any) -> Any:
            lead, args = (args[:1], args[1:]) if hidden else ((), args)
            try:
                bound = signature.bind(*args, **kwargs)
            except TypeError:
                return func(*lead, *args, **kwargs)  # raises the filter's own, clearer, argument error
            # The filtered value may be any number; its arguments are widths, counts and indents.
            self._check_ints(list(bound.arguments.values())[value_index + 1 :], {})
            self._check_filter_items(name, bound, list(bound.arguments)[value_index])
            if walks:
                self._check_size(self._weight(bound.arguments), f"the input of |{name}")
            self._check_filter_growth(name, bound)
            return self._checked(func(*lead, *bound.args, **bound.kwargs))

        return guarded

    def _check_filter_items(self, name: str, bound: inspect.BoundArguments, value_name: str) -> None:
        """Pre-checks how many items the filters that make lists in C will make."""
        arguments = bound.arguments
        value = arguments[value_name]
        if isinstance(value, str | bytes):
            if name in _EXPLODING_FILTERS:
                self._check_items(len(value), f"the characters of a string given to |{name}")
            elif name in _WORD_SPLITTING_FILTERS:
                self._check_items((len(value) + 1) // 2, f"the words of a string given to |{name}")
            elif name == "indent":
                self._check_items(_line_count(value), "the lines of a string given to |indent")
        if name in _COMPARING_FILTERS:
            if not isinstance(value, Collection):
                # An iterator (`|map(...)`, `|select(...)`) hides its items from the walk.
                value = list(value)
                self._check_items(len(value), f"the input of |{name}")
                arguments[value_name] = value
            self.compared(value)

    def _check_filter_growth(self, name: str, bound: inspect.BoundArguments) -> None:
        """Pre-checks the filters whose output can be many times larger than their input."""
        arguments = bound.arguments
        if name == "join":
            items = arguments["value"]
            if not isinstance(items, str | bytes):
                items = list(items)
                self._check_items(len(items), "a joined list")
                arguments["value"] = items
            self._check_size(self._join_size(str(arguments.get("d", "")), items), "a joined string")
        elif name == "replace":
            text = str(arguments["s"])
            size = _replace_size(text, str(arguments["old"]), str(arguments["new"]), arguments.get("count"))
            self._check_size(size, "a replaced string")
        elif name == "trim":
            _check_strip_chars(arguments.get("chars"))
        elif name in ("escape", "e", "forceescape"):
            # Each of &<>"' becomes an entity of up to 5 characters.
            value = next(iter(arguments.values()))
            size = _escaped_size(value) if isinstance(value, str) else 5 * self._weight(value)
            self._check_size(size, "an escaped string")
        elif name == "indent":
            text, width = str(arguments["s"]), arguments.get("width", 4)
            prefix = len(width) if isinstance(width, str) else int(width)
            self._check_size(len(text) + (text.count("\n") + 1) * prefix, "an indented string")
        elif name == "wordwrap":
            text, wrap = str(arguments["s"]), arguments.get("wrapstring") or "\n"
            self._check_size(len(text) * (1 + len(str(wrap))), "a wrapped string")
        elif name == "format":
            fmt = str(arguments["value"])
            self._check_format_widths(fmt)
            if "*" in fmt:
                self._check_ints(arguments.get("args", ()), {})
        elif name == "sum" and not isinstance(arguments.get("start", 0), int | float):
            # sum() of lists copies the growing result once per item inside one C call: quadratic time
            # that the trace deadline cannot interrupt.
            raise _LimitExceeded("|sum is only allowed on numbers")

    # --- checks -------------------------------------------------------------------------------------

    def _check_size(self, size: int, what: str) -> None:
        if size > self.limit:
            raise _LimitExceeded(f"{what} would exceed {self.limit:,} characters")

    def _check_items(self, count: int, what: str) -> None:
        if count > MAX_ITEMS:
            raise _LimitExceeded(f"{what} would have over {MAX_ITEMS:,} items")

    def _checked(self, result: Any) -> Any:
        if isinstance(result, str | bytes):
            self._check_size(len(result), "a value")
        elif isinstance(result, list | tuple | dict):
            self._check_items(len(result), "a list")
        elif isinstance(result, int):
            self._check_int_bits(result.bit_length())
        return result

    def _check_ints(self, args: Iterable[Any], kwargs: Mapping[str, Any]) -> None:
        for value in (*args, *kwargs.values()):
            if isinstance(value, int) and abs(value) > _MAX_CALL_INT:
                raise _LimitExceeded(f"an argument of {value} is larger than {_MAX_CALL_INT:,}")

    def _check_int_bits(self, bits: int) -> None:
        if bits > _MAX_INT_BITS:
            raise _LimitExceeded(f"an integer of about {bits:,} bits is too large")

    def _check_format_widths(self, fmt: str) -> None:
        # Widths and precisions live inside the format string, where no argument check can see them.
        if any(len(digits) > 6 or int(digits) > _MAX_CALL_INT for digits in _DIGITS.findall(fmt)):
            raise _LimitExceeded(f"a format width in the template is larger than {_MAX_CALL_INT:,}")

    def _join_size(self, separator: str | bytes, items: Sequence[Any]) -> int:
        return len(separator) * max(len(items) - 1, 0) + self._weight(items)

    def _weight(self, value: object, limit: int | None = None, chars_per_unit: int = 1) -> int:
        """Roughly len(str(value)), found without building it; stops counting once past `limit` (by default
        the size limit).

        Also an upper bound on what comparing, hashing, sorting or summing it costs, since each of those
        reaches every part at most once per path to it, as the walk does. Runs untraced (see
        _render_bounded): the limit bounds it, and the tracer would make it ten times slower.
        """
        limit = self.limit if limit is None else limit
        total = 0
        pending = [value]
        while pending and total <= limit:
            item = pending.pop()
            # The common types first: isinstance() against an ABC runs Python code.
            if isinstance(item, str | bytes):
                total += len(item) // chars_per_unit + 2
            elif isinstance(item, list | tuple):
                total += 2 + 2 * len(item)
                pending.extend(item)
            elif isinstance(item, dict):
                total += 2 + 4 * len(item)
                pending.extend(item.keys())
                pending.extend(item.values())
            elif isinstance(item, int):
                total += item.bit_length() // 3 + 1
            elif isinstance(item, float) or item is None:
                total += 24
            elif isinstance(item, Namespace):
                # Its repr shows every attribute, and no chat template has a reason to print one.
                return limit + 1
            elif isinstance(item, Mapping):
                total += 2 + 4 * len(item)
                pending.extend(item.keys())
                pending.extend(item.values())
            elif isinstance(item, Collection):  # sets, dict views, ranges
                total += 2 + 2 * len(item)
                pending.extend(item)
            else:
                total += 64
        return total


def _code_objects(code: types.CodeType) -> Iterator[types.CodeType]:
    yield code
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield from _code_objects(const)


# The sandbox's own checks run untraced: each is bounded by the limits it enforces, tracing them line by line
# would make every subscript, call, comparison and filter in every template several times slower, and what
# they call in Python (filters, the template's generators) is traced as before. Signature.bind, which
# checks every filter call, is bounded by the number of arguments. By id: hashing a code object hashes its
# bytecode; these functions live as long as their classes.
_UNTRACED_CODE: Final = frozenset(
    id(code)
    for function in (
        *vars(_BoundedSandbox).values(),
        inspect.Signature.bind,
        inspect.Signature._bind,  # type: ignore[attr-defined]  # bind's body
    )
    if isinstance(function, types.FunctionType)
    for code in _code_objects(function.__code__)
)


def _check_strip_chars(chars: object) -> None:
    if isinstance(chars, str | bytes) and len(chars) > _MAX_STRIP_CHARS:
        raise _LimitExceeded(f"stripping more than {_MAX_STRIP_CHARS} different characters is not allowed")


def _split_size(text: str | bytes, separator: Any, maxsplit: Any) -> int:
    """At most how many items text.split(separator, maxsplit) makes, found without making them."""
    if isinstance(separator, str | bytes) and separator:
        items = text.count(separator) + 1  # type: ignore[arg-type]  # a mismatch fails in split itself
    else:
        items = len(text) // 2 + 1  # runs of whitespace separate words of at least one character
    if isinstance(maxsplit, int) and maxsplit >= 0:
        items = min(items, maxsplit + 1)
    return items


def _line_count(text: str | bytes) -> int:
    """At most how many lines text.splitlines() makes."""
    if isinstance(text, bytes):
        return text.count(b"\n") + text.count(b"\r") + 1
    return sum(map(text.count, _LINE_BREAKS)) + 1


def _escaped_size(text: str) -> int:
    return (
        len(text)
        + 4 * (text.count("&") + text.count('"') + text.count("'"))
        + 3 * (text.count("<") + text.count(">"))
    )


def _replace_size(text: str | bytes, old: Any, new: Any, count: Any) -> int:
    hits = text.count(old)  # an empty `old` matches len(text) + 1 times, which is what replace does too
    if isinstance(count, int) and count >= 0:
        hits = min(hits, count)
    return len(text) + hits * len(new)


def _raise_exception(message: object) -> None:
    # A non-string message would be str()-ed by whoever shows the error; keep that bounded.
    raise TemplateError(message if isinstance(message, str) else f"<{type(message).__name__}>")


def _strftime_now(format: str) -> str:
    if len(format) > _MAX_STRFTIME_FORMAT:
        raise _LimitExceeded(f"a date format over {_MAX_STRFTIME_FORMAT} characters is not allowed")
    return datetime.now().strftime(format)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # Like HF transformers' tojson (not Jinja's HTML-escaping one), since that is what chat templates expect.
    if indent is not None and (len(indent) if isinstance(indent, str) else indent) > _MAX_JSON_INDENT:
        raise _LimitExceeded(f"a JSON indent over {_MAX_JSON_INDENT} is not allowed")
    # Without an indent, json.dumps runs in C and writes a separator per item: a long one multiplies the size.
    if separators is not None and any(len(str(part)) > _MAX_JSON_SEPARATOR for part in separators):
        raise _LimitExceeded(f"a JSON separator over {_MAX_JSON_SEPARATOR} characters is not allowed")
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )
