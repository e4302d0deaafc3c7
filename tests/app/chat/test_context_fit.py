"""Which earlier messages the overflow policy leaves out, counted by a tokenizer of the test's own (one token
per character, a 100-token context): what is kept always makes a prompt a chat template can render."""

from __future__ import annotations

from collections.abc import Sequence

from app.chat.context_fit import fit
from inference.protocol import ChatMessage, TokenCount, ToolCallRecord

N_CTX = 100
CALL = ToolCallRecord("c4ll0aaaa", "add", '{"a": 2, "b": 40}')


def count(messages: Sequence[ChatMessage]) -> TokenCount:
    return TokenCount("count", sum(len(m.content) + 2 for m in messages), N_CTX, "gguf")


def user(text: str) -> ChatMessage:
    return ChatMessage("user", text)


def test_whole_turns_are_left_out_oldest_first_and_the_prompt_always_stays() -> None:
    messages = [
        ChatMessage("system", "Be brief."),
        user("a" * 30),
        ChatMessage("assistant", "b" * 30),
        user("c" * 10),
        ChatMessage("assistant", "d" * 10),
        user("What now?"),
    ]
    fitted = fit(messages, True, 20, count)
    assert fitted.fits and fitted.dropped == 2
    assert [m.content for m in fitted.messages] == ["Be brief.", "c" * 10, "d" * 10, "What now?"]
    assert fitted.sent_tokens + fitted.reserve_tokens <= N_CTX


def test_after_a_tool_round_the_result_keeps_the_call_it_answers() -> None:
    """The prompt being answered is a tool result: leaving out everything but it would send a result with
    no call, so the cut keeps the whole turn it belongs to."""
    messages = [
        user("x" * 40),
        ChatMessage("assistant", "y" * 30),
        user("What is 2 + 40?"),
        ChatMessage("assistant", "Adding.", tool_calls=(CALL,)),
        ChatMessage("tool", "42", tool_call_id=CALL.id, tool_name="add"),
    ]
    fitted = fit(messages, False, 20, count)
    assert fitted.fits and fitted.dropped == 2
    assert [m.role for m in fitted.messages] == ["user", "assistant", "tool"]
    assert fitted.messages[1].tool_calls == (CALL,)


def test_a_tool_round_whose_own_turn_does_not_fit_is_refused_not_cut_apart() -> None:
    messages = [
        user("What is 2 + 40?"),
        ChatMessage("assistant", "z" * 90, tool_calls=(CALL,)),
        ChatMessage("tool", "42", tool_call_id=CALL.id, tool_name="add"),
    ]
    fitted = fit(messages, False, 20, count)
    assert not fitted.fits and fitted.dropped == 0
    assert fitted.messages == tuple(messages)
