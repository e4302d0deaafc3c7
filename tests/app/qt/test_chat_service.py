"""ChatService's end of a turn: a bug in the engine is reported like any failed reply, in the same order."""

from __future__ import annotations

from typing import cast

from pytestqt.qtbot import QtBot

from app.chat.engine import ChatEngine, ModelState, ModelStatus
from app.qt.chat_service import ChatService


class _BrokenEngine:
    """An engine with a bug: every turn and every load raises what no caller expects."""

    def run_turn(self, *_args: object, **_kwargs: object) -> None:
        raise RuntimeError("the runner's pipe broke")

    def prepare(self, *_args: object) -> None:
        raise KeyError("n_ctx")

    def cancel(self) -> None:
        pass

    def close(self) -> None:
        pass


def test_an_unexpected_error_fails_the_reply_before_the_turn_ends(qtbot: QtBot) -> None:
    service = ChatService(cast(ChatEngine, _BrokenEngine()))
    heard: list[tuple[object, ...]] = []
    service.replyFailed.connect(lambda *args: heard.append(("replyFailed", *args)))
    service.busyChanged.connect(lambda busy: heard.append(("busyChanged", busy)))
    service.conversationsChanged.connect(lambda: heard.append(("conversationsChanged",)))
    try:
        assert service.send(None, "Hello", "some-model") is not None
        assert service.busy and service.send(None, "Again", "some-model") is None
        qtbot.waitUntil(lambda: not service.busy)
    finally:
        service.shutdown()
    assert heard == [
        ("busyChanged", True),
        ("replyFailed", -1, "internal", "Unexpected error: the runner's pipe broke"),
        ("busyChanged", False),
    ]


def test_an_unexpected_error_while_loading_is_a_failed_model_status(qtbot: QtBot) -> None:
    service = ChatService(cast(ChatEngine, _BrokenEngine()))
    try:
        with qtbot.waitSignal(service.modelStatus) as status:
            future = service.preload("some-model")
        assert status.args == [
            ModelStatus("some-model", ModelState.FAILED, "", "Model failed to load", "KeyError('n_ctx')")
        ]
        assert isinstance(future.exception(), KeyError)
    finally:
        service.shutdown()
