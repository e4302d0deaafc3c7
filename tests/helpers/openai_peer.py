"""Real OpenAI-compatible peers on 127.0.0.1 for the remote-engine tests.

- `start_llama_peer`: llama-cpp-python's own server (`python -m llama_cpp.server`, its "server" extra)
  running the starter model, in a subprocess, with an API key. Hearth's llama.cpp loads its backends at
  run time (inference.ggml_backends), which llama-cpp-python's server never asks for, so the subprocess
  loads them first and then runs the server module as `-m` would.
- `FaultServer`: a small HTTP server of our own that misbehaves on purpose, chosen by the model asked for
  (see `FaultServer.chat`), optionally over TLS with a certificate from `make_certificates`.
"""

from __future__ import annotations

import datetime
import ipaddress
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx2

PEER_KEY = "peer-key-3f9a7c21d4"
FAULT_MODELS = ("echo", "reasoning", "usage", "tools")
START_TIMEOUT_S = 90.0


@dataclass
class LlamaPeer:
    url: str  # the API root, ending in /v1
    model_id: str  # as /v1/models lists it
    api_key: str
    process: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(10)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@contextmanager
def start_llama_peer(model: Path, workdir: Path) -> Iterator[LlamaPeer]:
    """llama_cpp.server on a free loopback port; waits until /v1/models answers, stops it at the end."""
    port = _free_port()
    log = workdir / f"llama-server-{port}.log"
    root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))),
    }
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                "import runpy, sys; from inference.ggml_backends import load_backends; load_backends(); "
                "sys.argv[0] = 'llama_cpp.server'; runpy.run_module('llama_cpp.server', run_name='__main__')",
                "--model",
                str(model),
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--n_ctx",
                "2048",
                "--api_key",
                PEER_KEY,
                "--verbose",
                "False",
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}/v1"
    peer = LlamaPeer(url, "", PEER_KEY, process, log)
    try:
        peer.model_id = _wait_for_models(peer)
        yield peer
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def _wait_for_models(peer: LlamaPeer) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if peer.process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited: {peer.log.read_text(errors='replace')[-2000:]}")
        try:
            response = httpx2.get(
                f"{peer.url}/models", headers={"authorization": f"Bearer {peer.api_key}"}, timeout=2.0
            )
        except httpx2.TransportError:
            time.sleep(0.2)
            continue
        if response.status_code == 200:
            model_id: str = response.json()["data"][0]["id"]
            return model_id
        time.sleep(0.2)
    raise RuntimeError(f"llama_cpp.server did not answer in {START_TIMEOUT_S:g} s")


# -- the fault server ------------------------------------------------------------------------------------


@dataclass
class Certificates:
    ca: Path  # the CA bundle a client should trust
    cert: Path  # the server's chain
    key: Path


def make_certificates(directory: Path) -> Certificates:
    """A throwaway CA and a certificate it signs for 127.0.0.1 / localhost."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "Hearth test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    certs = Certificates(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    certs.ca.write_bytes(ca.public_bytes(pem))
    certs.cert.write_bytes(leaf.public_bytes(pem))
    certs.key.write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return certs


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any] | None


class _QuietServer(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        # Clients that hang up (Stop, a refused certificate) are what the fault tests do on purpose.
        if not isinstance(sys.exc_info()[1], ConnectionError | ssl.SSLError):
            super().handle_error(request, client_address)  # type: ignore[arg-type]


@dataclass
class FaultServer:
    """Behaviour by the model asked for:

    echo / usage / reasoning  a good reply ("usage" adds token counts; "reasoning" thinks first, as the
                              DeepSeek API and vLLM send it, in delta.reasoning_content)
    cut                       two chunks, then the connection drops mid-body (a server killed mid-reply)
    eof                       two chunks, then a clean end of stream without [DONE] or a finish reason
    empty                     headers, then the end, without a single event
    slow                      one chunk, then silence until the server stops
    slow-headers              silence before the response headers
    malformed                 one chunk, then an event whose data is not JSON
    error-event               one chunk, then {"error": …} as OpenAI-style servers report failures
    html                      200 with an HTML page instead of an event stream
    status-NNN                that status with an OpenAI-style error body ("status-400-context": the
                              context-length error vLLM sends)
    tools                     offered tools: two calls of the first one, streamed in pieces as OpenAI and
                              vLLM do (`delta.tool_calls`, finish reason "tool_calls"); after tool results:
                              "Results: " and their contents
    anything else             404, as for a model the server does not have

    What it reports of its context, as the servers it stands for do: `max_model_len` per model in its list
    (vLLM); `n_ctx_train` in each model's `meta` (llama.cpp's server, which `meta` gives away) with GET
    /props answering `props_n_ctx`; GET /info answering `info_max_total_tokens` (TGI). Unset: 404.
    """

    api_key: str | None = None
    certificates: Certificates | None = None
    requests: list[Recorded] = field(default_factory=list)
    port: int = 0
    _server: ThreadingHTTPServer | None = None
    _thread: threading.Thread | None = None
    release: threading.Event = field(default_factory=threading.Event)
    # /v1/models answers only once `release` is set: a server that is slow to list its models.
    hold_models: bool = False
    max_model_len: dict[str, int] = field(default_factory=dict)
    n_ctx_train: int | None = None
    props_n_ctx: int | None = None
    info_max_total_tokens: int | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.certificates else "http"
        return f"{scheme}://127.0.0.1:{self.port}/v1"

    def start(self) -> FaultServer:
        handler = type("Handler", (_FaultHandler,), {"fault": self})
        # A port given (one a stopped server had): the same address coming back up.
        server = _QuietServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        server.block_on_close = False
        if self.certificates is not None:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            context.load_cert_chain(self.certificates.cert, self.certificates.key)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        self._server = server
        self.port = server.server_address[1]
        self._thread = threading.Thread(target=server.serve_forever, name="fault-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(10)


@contextmanager
def serve_faults(
    api_key: str | None = None,
    certificates: Certificates | None = None,
    *,
    port: int = 0,
    hold_models: bool = False,
    max_model_len: dict[str, int] | None = None,
) -> Iterator[FaultServer]:
    server = FaultServer(
        api_key, certificates, port=port, hold_models=hold_models, max_model_len=dict(max_model_len or {})
    ).start()
    try:
        yield server
    finally:
        server.stop()


def _chunk(text: str = "", *, reasoning: str = "", finish: str | None = None) -> dict[str, Any]:
    delta: dict[str, Any] = {}
    if text:
        delta["content"] = text
    if reasoning:
        delta["reasoning_content"] = reasoning
    return {
        "id": "chatcmpl-fault",
        "object": "chat.completion.chunk",
        "model": "fault",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _calls(*pieces: dict[str, Any]) -> dict[str, Any]:
    chunk = _chunk()
    chunk["choices"][0]["delta"]["tool_calls"] = list(pieces)
    return chunk


class _FaultHandler(BaseHTTPRequestHandler):
    fault: FaultServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass  # the test output is for failures

    def _record(self, body: dict[str, Any] | None) -> None:
        self.fault.requests.append(Recorded(self.path, dict(self.headers.items()), body))

    def _authorized(self) -> bool:
        key = self.fault.api_key
        if key is None or self.headers.get("authorization") == f"Bearer {key}":
            return True
        self._json(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
        return False

    def _json(self, status: int, data: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._record(None)
        if self.fault.hold_models:
            self.fault.release.wait(30)
        if not self._authorized():
            return
        fault = self.fault
        if self.path == "/props" and fault.props_n_ctx is not None:
            self._json(200, {"default_generation_settings": {"n_ctx": fault.props_n_ctx}, "total_slots": 1})
            return
        if self.path == "/info" and fault.info_max_total_tokens is not None:
            total = fault.info_max_total_tokens
            self._json(200, {"model_id": "fault", "max_input_tokens": total - 1, "max_total_tokens": total})
            return
        if self.path != "/v1/models":
            self._json(404, {"error": {"message": "not found"}})
            return
        models: list[dict[str, Any]] = []
        for model in FAULT_MODELS:
            entry: dict[str, Any] = {"id": model, "object": "model", "owned_by": "fault"}
            if model in fault.max_model_len:
                entry["max_model_len"] = fault.max_model_len[model]
            if fault.n_ctx_train is not None:
                entry["meta"] = {"n_ctx_train": fault.n_ctx_train, "n_vocab": 49152}
            models.append(entry)
        self._json(200, {"object": "list", "data": models})

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = json.loads(self.rfile.read(length) or b"{}")
        self._record(body)
        if not self._authorized():
            return
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": "not found"}})
            return
        self.chat(str(body.get("model", "")), body)

    # -- chat ------------------------------------------------------------------------------------------

    def _start_stream(self, content_type: str = "text/event-stream") -> None:
        self.send_response(200)
        self.send_header("content-type", content_type)
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

    def _send(self, raw: bytes) -> None:
        self.wfile.write(f"{len(raw):x}\r\n".encode() + raw + b"\r\n")
        self.wfile.flush()

    def _event(self, data: object) -> None:
        self._send(f"data: {json.dumps(data) if not isinstance(data, str) else data}\n\n".encode())

    def _end(self) -> None:
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _drop(self) -> None:
        # Like a process that died: the socket closes with the chunked body unfinished.
        self.wfile.flush()
        self.connection.shutdown(socket.SHUT_RDWR)
        self.close_connection = True

    def _tool_round(self, body: dict[str, Any]) -> None:
        messages = body.get("messages", [])
        if messages and messages[-1].get("role") == "tool":
            results = [m["content"] for m in messages if m.get("role") == "tool"][-2:]
            self._event(_chunk("Results: " + ", ".join(results)))
            self._event(_chunk(finish="stop"))
        elif body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            for index, (call_id, pieces) in enumerate(
                (("call_one", ['{"a": 2,', ' "b": 40}']), ("call_two", ['{"a": 1, "b": 1}']))
            ):
                opening = {"index": index, "id": call_id, "type": "function", "function": {"name": name}}
                self._event(_calls(opening))
                for piece in pieces:
                    self._event(_calls({"index": index, "function": {"arguments": piece}}))
            self._event(_chunk(finish="tool_calls"))
        else:
            self._event(_chunk("No tools were offered."))
            self._event(_chunk(finish="stop"))
        self._event("[DONE]")
        self._end()

    def chat(self, model: str, body: dict[str, Any]) -> None:
        fault = self.fault
        if model.startswith("status-"):
            status = int(model.split("-")[1])
            message = {
                "status-400-context": "This model's maximum context length is 2048 tokens. However, you "
                "requested 4100 tokens (4000 in the messages, 100 in the completion).",
            }.get(model, f"fault server answers {status}")
            headers = {"retry-after": "7"} if status == 429 else {}
            self._json(status, {"error": {"message": message, "type": "fault"}}, headers)
            return
        if model == "slow-headers":
            fault.release.wait(30)
            return
        if model == "html":
            page = b"<html><body>Welcome to nginx!</body></html>"
            self._start_stream("text/html")
            self._send(page)
            self._end()
            return
        if model not in (*FAULT_MODELS, "cut", "eof", "empty", "slow", "malformed", "error-event"):
            self._json(
                404, {"error": {"message": f"The model `{model}` does not exist.", "code": "model_not_found"}}
            )
            return
        self._start_stream()
        if model == "empty":
            self._end()
            return
        if model == "tools":
            self._tool_round(body)
            return
        if model == "reasoning":
            self._event(_chunk(reasoning="The user greets me. "))
            self._event(_chunk(reasoning="I greet back."))
            self._event(_chunk("Hello!"))
            self._event(_chunk(finish="stop"))
            self._event("[DONE]")
            self._end()
            return
        self._event(_chunk("Hello"))
        self._event(_chunk(", world"))
        if model == "cut":
            self._drop()
        elif model == "eof":
            self._end()
        elif model == "slow":
            fault.release.wait(30)
        elif model == "malformed":
            self._send(b'data: {"choices": [{"delta": {"content": "broken\n\n')
            self._end()
        elif model == "error-event":
            self._event({"error": {"message": "CUDA out of memory", "type": "server_error"}})
            self._end()
        else:
            self._event(_chunk(".", finish="stop"))
            if model == "usage":
                self._event({"choices": [], "usage": {"prompt_tokens": 11, "completion_tokens": 3}})
            self._event("[DONE]")
            self._end()
