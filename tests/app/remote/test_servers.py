"""The server registry, and chat turns answered by OpenAI-compatible servers through the real engine and
database: llama-cpp-python's server running the starter model, and the fault server."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as FailKeyring
from keyring.errors import KeyringLocked

from app.chat.engine import ChatEngine, ModelStatus, TurnCallbacks
from app.core import Core
from app.errors import HearthError
from app.remote.openai_client import RemoteError
from app.remote.registry import SERVERS_FILE, ServerRegistry, split_model_name
from app.secret_store import SecretStore
from inference.protocol import ErrorKind, SamplingParams
from tests.conftest import MemoryKeyring
from tests.helpers.openai_peer import (
    FAULT_MODELS,
    FaultServer,
    LlamaPeer,
    make_certificates,
    serve_faults,
    start_llama_peer,
)

GREEDY = SamplingParams(temperature=0.0, max_tokens=24, seed=9)
KEY = "sk-remote-4b1d9e7f02c3"


# -- the registry --------------------------------------------------------------------------------------


def test_servers_are_saved_with_the_key_in_the_keyring_only(hermetic_home: Path) -> None:
    registry = ServerRegistry(hermetic_home)
    server, stored = registry.add("gpu-box", "http://10.0.0.5:8000/", api_key=f"  {KEY}\n")
    assert (server.name, server.url, server.ca_bundle) == ("gpu-box", "http://10.0.0.5:8000/v1", None)
    assert stored is not None and stored.persisted
    saved = (hermetic_home / SERVERS_FILE).read_text()
    assert KEY not in saved
    assert json.loads(saved)["servers"] == [
        {"name": "gpu-box", "url": "http://10.0.0.5:8000/v1", "ca_bundle": None}
    ]
    again = ServerRegistry(hermetic_home)
    assert again.servers() == [server]
    assert again.api_key("gpu-box") == KEY
    assert again.key_status("gpu-box").present and again.key_status("gpu-box").persisted
    assert again.resolve("gpu-box/meta-llama/Llama-3-8B") == (server, "meta-llama/Llama-3-8B")
    assert again.resolve("SmolLM2-135M-Instruct-Q4_1") is None
    assert split_model_name("a/b/c") == ("a", "b/c")

    # Added again without a key: the old key goes too.
    registry.add("gpu-box", "http://10.0.0.5:9000")
    assert again.api_key("gpu-box") is None
    registry.remove("GPU-BOX")
    assert again.servers() == []
    with pytest.raises(HearthError, match="no server named"):
        again.resolve("gpu-box/x")


def test_bad_names_addresses_keys_and_bundles_are_refused(hermetic_home: Path, tmp_path: Path) -> None:
    registry = ServerRegistry(hermetic_home)
    for name in ("", "a/b", "has space", "x" * 41):
        with pytest.raises(HearthError):
            registry.add(name, "http://127.0.0.1:1")
    with pytest.raises(HearthError, match="credentials"):
        registry.add("lab", f"https://me:{KEY}@host/v1")
    with pytest.raises(HearthError, match="API key") as info:
        registry.add("lab", "http://127.0.0.1:1", api_key=f"{KEY} with spaces")
    assert KEY not in str(info.value)
    with pytest.raises(HearthError, match="not a file"):
        registry.add("lab", "https://host", ca_bundle=tmp_path / "missing.pem")
    assert registry.servers() == []


def test_a_key_the_keyring_refuses_is_kept_for_the_session(hermetic_home: Path) -> None:
    registry = ServerRegistry(hermetic_home, SecretStore(backend=FailKeyring()))  # type: ignore[no-untyped-call]
    _, stored = registry.add("lab", "http://127.0.0.1:1", api_key=KEY)
    assert stored is not None and not stored.persisted
    assert "No system keyring is available" in stored.reason
    assert registry.api_key("lab") == KEY
    status = registry.key_status("lab")
    assert status.present and not status.persisted
    assert KEY not in (hermetic_home / SERVERS_FILE).read_text()
    assert ServerRegistry(hermetic_home, SecretStore(backend=FailKeyring())).api_key("lab") is None  # type: ignore[no-untyped-call]


def test_a_servers_key_and_ca_bundle_can_be_changed_and_removed(hermetic_home: Path, tmp_path: Path) -> None:
    memory = keyring.get_keyring()
    registry = ServerRegistry(hermetic_home)
    registry.add("lab", "https://lab.example/v1", api_key="sk-old-00000000")
    stored = registry.set_api_key("LAB", f" {KEY}\n")
    assert stored.persisted and stored.value == KEY
    assert ServerRegistry(hermetic_home).api_key("lab") == KEY
    with pytest.raises(HearthError, match="API key") as info:
        registry.set_api_key("lab", f"{KEY} oops")
    assert KEY not in str(info.value)
    assert registry.api_key("lab") == KEY
    removed = registry.set_api_key("lab", None)
    assert removed.persisted and removed.value is None
    assert registry.api_key("lab") is None and not registry.key_status("lab").present
    assert memory.get_password("Hearth", "server-api-key:lab") is None

    bundle = tmp_path / "ca.pem"
    bundle.write_text("-----BEGIN CERTIFICATE-----\n")
    changed = registry.set_ca_bundle("lab", bundle)
    assert changed == registry.get("lab") and changed.ca_bundle == str(bundle.resolve())
    assert json.loads((hermetic_home / SERVERS_FILE).read_text())["servers"][0]["ca_bundle"] == str(bundle)
    with pytest.raises(HearthError, match="not a file"):
        registry.set_ca_bundle("lab", tmp_path / "missing.pem")
    assert registry.get("lab").ca_bundle == str(bundle.resolve())
    assert registry.set_ca_bundle("lab", None).ca_bundle is None
    assert registry.get("lab").ca_bundle is None

    for change in (
        lambda: registry.set_api_key("elsewhere", KEY),
        lambda: registry.set_ca_bundle("elsewhere", None),
        lambda: registry.remove("elsewhere"),
    ):
        with pytest.raises(HearthError, match="no server named"):
            change()


class StickyKeyring(MemoryKeyring):
    """Stores and reads, but refuses to delete: a locked collection, say."""

    def delete_password(self, service: str, username: str) -> None:
        raise KeyringLocked("the collection is locked")


def test_removing_a_server_says_when_its_key_stays_in_the_keyring(hermetic_home: Path) -> None:
    sticky = StickyKeyring()
    registry = ServerRegistry(hermetic_home, SecretStore(backend=sticky))
    registry.add("lab", "http://127.0.0.1:1", api_key=KEY)
    server, deleted = registry.remove("lab")
    assert server.name == "lab" and registry.servers() == []
    assert not deleted.persisted and "locked" in deleted.reason
    assert list(sticky.entries.values()) == [KEY]

    registry.add("lab", "http://127.0.0.1:1")
    _, deleted = ServerRegistry(hermetic_home).remove("lab")
    assert deleted.persisted


def test_a_changed_key_or_ca_bundle_is_used_for_the_next_request(
    hermetic_home: Path, fault_server: FaultServer, tmp_path: Path
) -> None:
    fault_server.api_key = KEY
    registry = ServerRegistry(hermetic_home)
    server, _ = registry.add("lab", fault_server.url, api_key="sk-wrong-000000000000")
    refused = registry.listing(server)
    assert refused.error is not None and "refused the API key (401" in refused.error
    registry.set_api_key("lab", KEY)
    listed = registry.listing(server)
    assert listed.error is None and [m.id for m in listed.models] == list(FAULT_MODELS)
    assert fault_server.requests[-1].headers["authorization"] == f"Bearer {KEY}"

    certificates = make_certificates(tmp_path)
    with serve_faults(certificates=certificates) as tls:
        internal, _ = registry.add("internal", tls.url)
        unverified = registry.listing(internal)
        assert unverified.error is not None and "could not be verified" in unverified.error
        trusted = registry.set_ca_bundle("internal", certificates.ca)
        assert registry.listing(trusted).error is None


def test_a_damaged_servers_file_is_set_aside(hermetic_home: Path) -> None:
    hermetic_home.mkdir(parents=True, exist_ok=True)
    (hermetic_home / SERVERS_FILE).write_text("{not json")
    registry = ServerRegistry(hermetic_home)
    assert registry.servers() == []
    assert [p.name.startswith(f"{SERVERS_FILE}.corrupt-") for p in hermetic_home.iterdir()] == [True]
    registry.add("lab", "http://127.0.0.1:1")
    assert [s.name for s in registry.servers()] == ["lab"]


# -- turns through the engine --------------------------------------------------------------------------


@pytest.fixture
def engine(core: Core, make_engine: Callable[..., ChatEngine]) -> ChatEngine:
    return make_engine(servers=ServerRegistry(core.paths.home))


class Recorder(TurnCallbacks):
    def __init__(self, on_delta: Callable[[str], None] | None = None) -> None:
        self.deltas: list[str] = []
        self.statuses: list[ModelStatus] = []
        self._on_delta = on_delta

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        self.deltas.append(text)
        if text and self._on_delta is not None:
            self._on_delta(text)

    def model_status(self, status: ModelStatus) -> None:
        self.statuses.append(status)


def test_a_reply_from_llama_cpp_server_is_stored_with_provenance_and_stats(
    engine: ChatEngine, core: Core, llama_peer: LlamaPeer
) -> None:
    assert engine.servers is not None
    engine.servers.add("peer", llama_peer.url, api_key=llama_peer.api_key)
    model = f"peer/{llama_peer.model_id}"
    callbacks = Recorder()
    result = engine.run_turn("Say hello.", model, sampling=GREEDY, callbacks=callbacks)

    assert result.status == "complete", result.error
    assert result.text.strip() and result.text == "".join(callbacks.deltas)
    assert engine.loaded is None, "a remote turn must not load a local model"
    assert callbacks.statuses[-1].summary == "Remote · peer"
    assert engine.status().summary == "Remote · peer"
    (_, reply) = core.store.list_messages(result.conversation_id)
    assert reply.content == result.text and reply.status == "complete"
    assert (reply.model_name, reply.server_name, reply.server_url) == (model, "peer", llama_peer.url)
    assert reply.model_sha256 is None and reply.template is None
    assert reply.sampling == {"temperature": 0.0, "top_p": 0.95, "max_tokens": 24, "seed": 9}
    assert reply.seed == 9
    assert reply.completion_tokens and reply.completion_tokens > 0
    assert reply.ttft_ms is not None and reply.ttft_ms > 0
    assert reply.tokens_per_second is not None and reply.tokens_per_second > 0
    exported = core.store.export_json(result.conversation_id)["messages"][-1]
    assert (exported["server_name"], exported["server_url"]) == ("peer", llama_peer.url)
    assert core.store.get_conversation(result.conversation_id).model_name == model

    follow_up = engine.run_turn(
        "And goodbye?", model, conversation_id=result.conversation_id, sampling=GREEDY, callbacks=Recorder()
    )
    assert follow_up.status == "complete" and follow_up.conversation_id == result.conversation_id


def test_stop_mid_stream_keeps_a_stopped_reply(engine: ChatEngine, core: Core, llama_peer: LlamaPeer) -> None:
    assert engine.servers is not None
    engine.servers.add("peer", llama_peer.url, api_key=llama_peer.api_key)
    long = SamplingParams(temperature=0.0, max_tokens=1500)
    result = engine.run_turn(
        "Count from 1 to 500.",
        f"peer/{llama_peer.model_id}",
        sampling=long,
        callbacks=Recorder(lambda _text: engine.cancel()),
    )
    assert result.status == "stopped"
    assert result.stats is not None and result.stats.completion_tokens < 1500
    reply = core.store.get_message(result.assistant_message_id)
    assert reply.status == "stopped" and reply.content == result.text and result.text


def test_a_server_killed_mid_reply_keeps_the_partial_reply(
    engine: ChatEngine, core: Core, starter_model: Path, tmp_path: Path
) -> None:
    with start_llama_peer(starter_model, tmp_path) as peer:
        assert engine.servers is not None
        engine.servers.add("doomed", peer.url, api_key=peer.api_key)
        result = engine.run_turn(
            "Write a long story about a lighthouse keeper.",
            f"doomed/{peer.model_id}",
            sampling=SamplingParams(temperature=0.0, max_tokens=1500),
            callbacks=Recorder(lambda _text: peer.kill()),
        )
    assert result.status == "error"
    assert result.error_kind is ErrorKind.STREAM_CUT
    assert result.error is not None and "connection to doomed was lost" in result.error
    assert result.text
    reply = core.store.get_message(result.assistant_message_id)
    assert (reply.status, reply.content, reply.error) == ("error", result.text, result.error)


def test_a_cut_or_malformed_stream_is_an_error_with_the_partial_text(
    engine: ChatEngine, core: Core, fault_server: FaultServer
) -> None:
    assert engine.servers is not None
    engine.servers.add("lab", fault_server.url)
    for model, kind in (("cut", ErrorKind.STREAM_CUT), ("malformed", ErrorKind.SERVER_ERROR)):
        result = engine.run_turn("Hi", f"lab/{model}", callbacks=Recorder())
        assert (result.status, result.text, result.error_kind) == ("error", "Hello, world", kind)
        reply = core.store.get_message(result.assistant_message_id)
        assert (reply.status, reply.content, reply.error) == ("error", "Hello, world", result.error)


def test_a_server_that_refuses_stores_nothing(
    engine: ChatEngine, core: Core, fault_server: FaultServer
) -> None:
    assert engine.servers is not None
    fault_server.api_key = KEY
    engine.servers.add("lab", fault_server.url, api_key="sk-wrong-000000000000")
    with pytest.raises(RemoteError) as info:
        engine.run_turn("Hi", "lab/echo")
    assert info.value.kind is ErrorKind.SERVER_AUTH
    engine.servers.add("lab", fault_server.url, api_key=KEY)
    for model, kind in (
        ("nothing-here", ErrorKind.MODEL_MISSING),
        ("status-429", ErrorKind.SERVER_BUSY),
        ("status-503", ErrorKind.SERVER_ERROR),
        ("status-400-context", ErrorKind.CONTEXT_OVERFLOW),
    ):
        with pytest.raises(RemoteError) as info:
            engine.run_turn("Hi", f"lab/{model}")
        assert info.value.kind is kind
    with pytest.raises(HearthError, match="no server named “elsewhere”"):
        engine.run_turn("Hi", "elsewhere/echo")
    assert core.store.list_conversations() == []


class StoredWhenFirstShown(TurnCallbacks):
    """What the database held for the reply when its first text (answer or reasoning) was shown."""

    def __init__(self, core: Core) -> None:
        self._core = core
        self.first: tuple[str, str, str | None] | None = None

    def _shown(self, assistant_message_id: int, text: str) -> None:
        if text and self.first is None:
            stored = self._core.store.get_message(assistant_message_id)
            self.first = (text, stored.content, stored.reasoning)

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        self._shown(assistant_message_id, text)

    def reasoning_delta(self, assistant_message_id: int, text: str) -> None:
        self._shown(assistant_message_id, text)


def test_the_first_text_of_a_reply_is_stored_before_it_is_shown(
    engine: ChatEngine, core: Core, fault_server: FaultServer
) -> None:
    """A crash right after the user saw the first words still finds them in the database."""
    assert engine.servers is not None
    engine.servers.add("lab", fault_server.url)
    for model, part in (("echo", "answer"), ("reasoning", "reasoning")):
        callbacks = StoredWhenFirstShown(core)
        engine.run_turn("Hi", f"lab/{model}", callbacks=callbacks)
        assert callbacks.first is not None, model
        shown, content, reasoning = callbacks.first
        assert (content if part == "answer" else reasoning) == shown, model


def test_history_and_reasoning_go_through_the_same_conversation(
    engine: ChatEngine, core: Core, fault_server: FaultServer
) -> None:
    assert engine.servers is not None
    engine.servers.add("lab", fault_server.url)
    first = engine.run_turn("Hi", "lab/reasoning", system_prompt="Be brief.", callbacks=Recorder())
    assert first.status == "complete"
    # reasoning_content is reasoning here too: kept apart from the answer, never sent back.
    assert (first.text, first.reasoning) == ("Hello!", "The user greets me. I greet back.")
    second = engine.run_turn("Again", "lab/echo", conversation_id=first.conversation_id, callbacks=Recorder())
    assert second.status == "complete"
    sent = fault_server.requests[-1].body
    assert sent is not None
    assert [(m["role"], m["content"]) for m in sent["messages"]] == [
        ("system", "Be brief."),
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "Again"),
    ]


def test_preparing_a_remote_model_loads_nothing_and_the_context_is_not_measured(
    engine: ChatEngine, fault_server: FaultServer
) -> None:
    assert engine.servers is not None
    engine.servers.add("lab", fault_server.url)
    callbacks = Recorder()
    engine.prepare("lab/echo", callbacks)
    assert engine.loaded is None
    assert [s.summary for s in callbacks.statuses] == ["Remote · lab"]
    with pytest.raises(HearthError, match="on a server"):
        engine.measure_context(None, "draft", "lab/echo")


def test_the_server_survives_export_and_import(core: Core, tmp_path: Path) -> None:
    store = core.store
    conversation = store.create_conversation("Remote")
    store.add_message(conversation.id, "user", "Hi")
    reply = store.start_assistant_message(
        conversation.id,
        model_name="lab/llama-3",
        model_sha256=None,
        sampling={"temperature": 0.5},
        seed=None,
        server_name="lab",
        server_url="https://lab.example/v1",
    )
    store.finish_message(reply.id, content="Hello", status="complete")
    exported = tmp_path / "remote.json"
    exported.write_text(json.dumps(store.export_json(conversation.id)))
    (imported_id,) = store.import_file(exported).conversation_ids
    copy = store.list_messages(imported_id)[-1]
    assert (copy.model_name, copy.model_sha256, copy.server_name, copy.server_url) == (
        "lab/llama-3",
        None,
        "lab",
        "https://lab.example/v1",
    )
    assert "## Assistant (lab/llama-3)" in store.export_markdown(imported_id)
