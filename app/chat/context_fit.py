"""Fitting a prompt into the model's context: what is sent, what the overflow policy leaves out, and the
refusals when it does not fit."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from app.errors import ContextOverflow
from inference.protocol import ChatMessage, TokenCount

# Room kept free for the reply when deciding whether a conversation fits: its max_tokens, but never more
# than this share of the context (a 4,096-token reply would otherwise leave no room in a 4,096 context).
REPLY_RESERVE_SHARE = 0.25


def reply_reserve(n_ctx: int, max_tokens: int) -> int:
    return min(max_tokens, int(n_ctx * REPLY_RESERVE_SHARE))


@dataclass(frozen=True)
class Fitted:
    """A prompt checked against the context: what would be sent, and what had to be left out."""

    messages: tuple[ChatMessage, ...]
    used_tokens: int  # before anything was left out
    context_tokens: int
    reserve_tokens: int
    template_source: str
    dropped: int = 0
    fits: bool = True  # False: too long even with every earlier message left out
    sent_tokens: int = 0  # the prompt left after the cut (when nothing fits: with everything cut)

    def note(self) -> str | None:
        if not self.dropped:
            return None
        were = "message was" if self.dropped == 1 else "messages were"
        return f"{self.dropped} earlier {were} left out to fit the {self.context_tokens}-token context"


def fit(
    messages: list[ChatMessage],
    has_system: bool,
    max_tokens: int,
    count: Callable[[Sequence[ChatMessage]], TokenCount],
) -> Fitted:
    """Check the prompt against the context, and find the fewest oldest turns to leave out if it is over.

    The system prompt and the last message (the prompt being answered) are never left out, and what
    remains starts with a user message: chat templates expect turns to alternate from there. After a tool
    round the last message is a result: the turn it belongs to (from its prompt on) is kept whole, since a
    result whose call was left out is one no template can place.
    """
    full = count(messages)
    n_ctx = full.n_ctx
    reserve = reply_reserve(n_ctx, max_tokens)
    fitted = Fitted(tuple(messages), full.n_tokens, n_ctx, reserve, full.template_source)
    if full.n_tokens + reserve <= n_ctx or len(messages) < 2:
        return dataclasses.replace(fitted, fits=full.n_tokens + reserve <= n_ctx, sent_tokens=full.n_tokens)
    head = messages[:1] if has_system else []
    body = messages[len(head) : -1]
    last = messages[-1]
    cuts = [i for i in range(1, len(body)) if body[i].role == "user"]
    if last.role == "user":
        cuts.append(len(body))
    best: tuple[int, TokenCount] | None = None
    low, high = 0, len(cuts) - 1
    smallest: TokenCount | None = None
    # Fewer tokens the more is cut, so a binary search over the cut points needs log2(turns) counts.
    while low <= high:
        middle = (low + high) // 2
        candidate = count([*head, *body[cuts[middle] :], last])
        if middle == len(cuts) - 1:
            smallest = candidate
        if candidate.n_tokens + reserve <= n_ctx:
            best = (cuts[middle], candidate)
            high = middle - 1
        else:
            low = middle + 1
    if best is None:
        return dataclasses.replace(
            fitted, fits=False, sent_tokens=smallest.n_tokens if smallest else full.n_tokens
        )
    cut, counted = best
    return dataclasses.replace(
        fitted,
        messages=(*head, *body[cut:], last),
        dropped=cut,
        template_source=counted.template_source,
        sent_tokens=counted.n_tokens,
    )


def check_policy(fitted: Fitted, policy: str) -> None:
    if not fitted.fits:
        raise ContextOverflow(
            f"The message needs {fitted.sent_tokens} tokens plus {fitted.reserve_tokens} for the "
            f"reply, more than the model's {fitted.context_tokens}-token context even with every earlier "
            "message left out. Shorten it, or raise the context length in the conversation's settings."
        )
    if fitted.dropped and policy == "refuse":
        raise ContextOverflow(
            f"The conversation needs {fitted.used_tokens} tokens plus {fitted.reserve_tokens} for the "
            f"reply, but the model's context holds {fitted.context_tokens}. Nothing was sent or cut (the "
            "overflow policy is to refuse): start a new conversation, or raise the context length."
        )
