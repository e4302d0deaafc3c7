"""The server registry, and chat turns answered by OpenAI-compatible servers through the real engine and
database: llama-cpp-python's server running the starter model, and the fault server."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import keyring
import pytest
from keyring.backends.fail import Keyring as FailKeyring
from keyring.errors import KeyringLocked

from app.chat.documents import TurnDocuments
from app.chat.engine import ChatEngine, ModelStatus, TurnCallbacks
from app.core import Core
from app.documents.chunking import estimate_tokens
from app.documents.library import DocumentLibrary
from app.errors import HearthError
from app.remote.openai_client import RemoteError
from app.remote.registry import (
    DEFAULT_SERVER_CONTEXT,
    SERVERS_FILE,
    ContextSource,
    Server,
    ServerContext,
    ServerRegistry,
    split_model_name,
)
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


def test_a_servers_json_from_before_the_context_setting_loads_and_keeps_its_version(
    hermetic_home: Path,
) -> None:
    hermetic_home.mkdir(parents=True, exist_ok=True)
    path = hermetic_home / SERVERS_FILE
    path.write_text(
        json.dumps(
            {
                "schema_version": 1,
                "servers": [
                    {"name": "lab", "url": "http://127.0.0.1:9/v1", "ca_bundle": None},
                    # Hand edits gone wrong cost the setting, not the server.
                    {
                        "name": "big",
                        "url": "http://127.0.0.1:10/v1",
                        "ca_bundle": None,
                        "context_tokens": "lots",
                    },
                    {"name": "tiny", "url": "http://127.0.0.1:11/v1", "ca_bundle": None, "context_tokens": 0},
                ],
            }
        )
    )
    registry = ServerRegistry(hermetic_home)
    assert registry.servers() == [
        Server("big", "http://127.0.0.1:10/v1"),
        Server("lab", "http://127.0.0.1:9/v1"),
        Server("tiny", "http://127.0.0.1:11/v1"),
    ]
    assert registry.set_context_tokens("LAB", 32768) == Server("lab", "http://127.0.0.1:9/v1", None, 32768)
    saved = json.loads(path.read_text())
    assert saved["schema_version"] == 1
    assert [s.get("context_tokens") for s in saved["servers"]] == [None, 32768, None]
    assert registry.get("lab").context_tokens == 32768
    # A change of CA bundle keeps the context, and back to automatic.
    assert registry.set_ca_bundle("lab", None).context_tokens == 32768
    assert registry.set_context_tokens("lab", None).context_tokens is None
    for bad in (0, -1, 100, 10**9):
        with pytest.raises(HearthError, match="cannot be a server's context length"):
            registry.set_context_tokens("lab", bad)
    with pytest.raises(HearthError, match="no server named"):
        registry.set_context_tokens("nothing", 4096)


def test_a_models_context_is_the_setting_else_what_the_server_reports_else_the_default(
    hermetic_home: Path,
) -> None:
    registry = ServerRegistry(hermetic_home)
    with serve_faults(max_model_len={"echo": 4096}) as server:
        lab, _ = registry.add("lab", server.url)
        assert registry.context_for(lab, "echo") == ServerContext(4096, ContextSource.SERVER)
        assert registry.context_for(lab, "usage") == ServerContext(
            DEFAULT_SERVER_CONTEXT, ContextSource.DEFAULT
        )
        # Asked once: what it reported is kept until its models are listed again.
        assert [r.path for r in server.requests].count("/v1/models") == 1
        lab = registry.set_context_tokens("lab", 16384)
        assert registry.context_for(lab, "echo") == ServerContext(16384, ContextSource.SETTING)
        server.max_model_len = {"echo": 2048}
        registry.listing(registry.set_context_tokens("lab", None))
        assert registry.context_for(registry.get("lab"), "echo") == ServerContext(2048, ContextSource.SERVER)
    # A server that cannot be reached is planned for the default, and not asked again for every turn.
    gone = registry.add("gone", server.url)[0]
    assert registry.context_for(gone, "echo").source is ContextSource.DEFAULT
    assert registry.context_for(gone, "echo").tokens == DEFAULT_SERVER_CONTEXT


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


def test_preparing_a_remote_model_loads_nothing_and_the_context_is_estimated(
    engine: ChatEngine, fault_server: FaultServer
) -> None:
    assert engine.servers is not None
    engine.servers.add("lab", fault_server.url)
    callbacks = Recorder()
    engine.prepare("lab/echo", callbacks)
    assert engine.loaded is None
    assert [s.summary for s in callbacks.statuses] == ["Remote · lab"]
    draft = "A draft, counted by the estimate."
    usage = engine.measure_context(None, draft, "lab/echo")
    assert usage.estimated and usage.context_source is ContextSource.DEFAULT
    assert (usage.used_tokens, usage.context_tokens) == (estimate_tokens(draft), DEFAULT_SERVER_CONTEXT)
    assert usage.document_tokens == 0 and usage.searched == ()
    assert engine.loaded is None


@pytest.fixture
def documents(core: Core) -> Iterator[DocumentLibrary]:
    library = core.documents()
    yield library
    library.close()


def _logbook(tmp_path: Path) -> Path:
    """About 6,000 tokens by the estimate: whole in 8,192 tokens, not in 4,096."""
    entries = [
        f"Day {n}. The keeper trimmed the wick, wound the clock and noted the wind. " * 4 for n in range(80)
    ]
    entries[61] = "Day 61. The keeper hid the logbook's spare key behind the brass barometer."
    path = tmp_path / "logbook.txt"
    path.write_text("\n\n".join(entries), encoding="utf-8")
    return path


@pytest.mark.model
def test_a_server_reporting_4096_tokens_gets_a_long_attachment_as_passages_unless_set_higher(
    core: Core,
    make_engine: Callable[..., ChatEngine],
    documents: DocumentLibrary,
    embedding_model: Path,
    tmp_path: Path,
) -> None:
    registry = ServerRegistry(core.paths.home)
    engine = make_engine(servers=registry, documents=documents)
    logbook = documents.attach(_logbook(tmp_path))
    attached = TurnDocuments((logbook,))
    question = "Where is the logbook's spare key?"
    with serve_faults(max_model_len={"echo": 4096}) as server:
        registry.add("lab", server.url)
        usage = engine.measure_context(None, question, "lab/echo", documents=attached)
        assert usage.context_source is ContextSource.SERVER and usage.context_tokens == 4096
        assert usage.searched == ("logbook.txt",) and 0 < usage.passage_tokens <= usage.document_tokens
        assert usage.fits

        searched = engine.run_turn(question, "lab/echo", documents=attached, callbacks=Recorder())
        assert searched.status == "complete", searched.error
        sent = server.requests[-1].body
        assert sent is not None
        prompt = sent["messages"][-1]["content"]
        assert "Passages found in logbook.txt" in prompt and "brass barometer" in prompt
        assert len(prompt) < 4096 * 4
        (part,) = core.store.list_messages(searched.conversation_id)[0].attachments
        assert part.meta["mode"] == "retrieved"

        # The user's setting wins over what the server says.
        registry.set_context_tokens("lab", 32768)
        usage = engine.measure_context(None, question, "lab/echo", documents=attached)
        assert (usage.context_tokens, usage.context_source, usage.searched) == (
            32768,
            ContextSource.SETTING,
            (),
        )
        whole = engine.run_turn(question, "lab/echo", documents=attached, callbacks=Recorder())
        sent = server.requests[-1].body
        assert sent is not None and "Day 79." in sent["messages"][-1]["content"]
        (part,) = core.store.list_messages(whole.conversation_id)[0].attachments
        assert part.meta["mode"] == "whole"


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
