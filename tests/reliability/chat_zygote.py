"""Test-only: imports the app once, then forks one `hearth chat` per request, for the kill -9 trials.

Each forked child is a real, separate process that runs the real command (opens the database, starts the
runner, loads the model, streams and saves the reply) and can be killed at any moment; forking only saves
re-importing Python modules on every trial. Protocol, one JSON object per line: a request on stdin
`{"argv": [...], "stdout": PATH, "stderr": PATH}` is answered with `{"pid": N}` on stdout, and later with
`{"pid": N, "status": S}` (the raw wait status) once that child has ended.
"""

from __future__ import annotations

import json
import os
import sys
import threading


def _child(request: dict[str, object]) -> None:
    # Its own process group, so a kill takes the runner it starts along with it.
    os.setsid()
    for fd, key in ((1, "stdout"), (2, "stderr")):
        target = os.open(str(request[key]), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    from app.__main__ import main

    argv = request["argv"]
    assert isinstance(argv, list)
    code = main([str(a) for a in argv])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def serve() -> None:
    # Everything a chat needs, imported before the first fork.
    import app.chat.engine
    import app.cli.main
    import app.core  # noqa: F401
    import inference.client  # noqa: F401

    assert threading.active_count() == 1, "forking with threads running is unsafe"
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            _child(request)
        print(json.dumps({"pid": pid}), flush=True)
        _, status = os.waitpid(pid, 0)
        print(json.dumps({"pid": pid, "status": status}), flush=True)


if __name__ == "__main__":
    serve()
