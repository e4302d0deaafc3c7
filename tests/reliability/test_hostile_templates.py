"""Hostile chat templates inside real model files, through the engine the window and the CLI use: the reply
still comes, in the fallback format the user is told about, and nothing the template asked for runs.

The sandbox itself (every escape and allocation bomb known to us) is tested in
tests/inference/test_chat_template.py;
here each kind of attack rides in a model file from load to a stored reply.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.chat.engine import ChatEngine, ModelStatus, TurnCallbacks
from app.core import Core
from inference.chat_template import FALLBACK_SOURCE
from inference.protocol import SamplingParams
from tests.helpers.model_files import with_chat_template
from tests.reliability.conftest import RecordFault, characters_missing

pytestmark = pytest.mark.model

CATEGORY = "Untrusted models"

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, seed=1)
# {sentinel} is a file each template tries to create; the starter's template leaves 368 bytes of room.
TEMPLATES = {
    "code execution through a global's __globals__": (
        "{{ cycler.__init__.__globals__.os.system('touch {sentinel}') }}"
    ),
    "code execution through the |attr filter": (
        "{{ (messages|attr('__class__')|attr('__mro__'))[1]|attr('__subclasses__')() }}"
        "{{ lipsum|attr('__globals__')|attr('get')('os')|attr('popen')('touch {sentinel}') }}"
    ),
    "code execution through str.format": "{{ '{0.__init__.__globals__[os].system}'.format(cycler) }}",
    "a loop that never ends": (
        "{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}"
    ),
    "output of billions of characters": "{% for i in range(99999) %}{{ 'x' * 99999 }}{% endfor %}",
    "gigabytes kept in memory": (
        "{% set ns = namespace(l=[]) %}"
        "{% for i in range(99999) %}{% set ns.l = ns.l + ['x' * 4000000] %}{% endfor %}"
    ),
    # One comparison, exponential in the nesting depth, inside a single C call no deadline can interrupt.
    "a comparison that runs for centuries": (
        "{% set ns = namespace(a=[1], b=[1]) %}{% for i in range(60) %}"
        "{% set ns.a = [ns.a, ns.a] %}{% set ns.b = [ns.b, ns.b] %}{% endfor %}{{ ns.a == ns.b }}"
    ),
}
# What the status must say for attacks that another limit would also stop, later and less clearly.
REASONS = {"gigabytes kept in memory": "it needs too much memory"}


class Statuses(TurnCallbacks):
    def __init__(self) -> None:
        self.seen: list[ModelStatus] = []
        self.shown = ""

    def model_status(self, status: ModelStatus) -> None:
        self.seen.append(status)

    def delta(self, assistant_message_id: int, text: str, n_tokens: int) -> None:
        self.shown += text


@pytest.fixture
def engine(make_engine: Callable[..., ChatEngine]) -> ChatEngine:
    return make_engine(context_length=512)


def test_hostile_templates_cannot_run_code_or_hang_a_turn(
    core: Core, engine: ChatEngine, starter_model: Path, tmp_path: Path, fault: RecordFault
) -> None:
    sentinel = tmp_path / "pwned"
    for number, (attack, template) in enumerate(TEMPLATES.items()):
        source = template.replace("{sentinel}", str(sentinel))
        model_file = with_chat_template(starter_model, tmp_path / f"hostile-{number}.gguf", source)
        name = f"hostile-{number}"
        core.library.import_file(model_file, name=name)
        statuses = Statuses()

        result = engine.run_turn("Hello!", name, sampling=GREEDY, callbacks=statuses)
        stored = core.store.get_message(result.assistant_message_id)
        missing = characters_missing(statuses.shown, stored.content)
        fault(
            CATEGORY,
            f"hostile chat template in the model file: {attack}",
            trials=1,
            outcome="nothing ran; the reply used ChatML and the status says why",
            lost={"characters": missing},
        )

        assert missing == 0, attack
        assert result.status == "complete", (attack, result.error)
        assert stored.template == FALLBACK_SOURCE, attack
        assert stored.content == result.text
        ready = statuses.seen[-1]
        assert ready.state == "ready"
        assert "The model's chat template failed" in ready.detail, attack
        assert REASONS.get(attack, "") in ready.detail, (attack, ready.detail)
        assert ready.detail.endswith("using the ChatML format."), attack
        assert not sentinel.exists(), f"{attack}: the template ran a command"
