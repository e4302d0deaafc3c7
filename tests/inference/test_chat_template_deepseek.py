"""DeepSeek's chat templates render in Hearth's sandbox (inference.chat_template) exactly as DeepSeek intends:
system prompts, the R1 template's pre-filled `<think>\n`, and R1 dropping the reasoning of earlier replies.

The templates are the `chat_template` of each model's tokenizer_config.json on Hugging Face, as copied into
public repositories (the JSON string decoded: `\\n` inside a Jinja string literal is Jinja's own escape):
- R1_DISTILL: deepseek-ai/DeepSeek-R1-Distill-Qwen-7B (and -Qwen-32B, -Llama-8B: the same text), the revision
  with the pre-filled `<think>\n`; copy in BerriAI/litellm tests/local_testing/test_completion.py
  (test_bedrock_deepseek_custom_prompt_dict), whose expected prompt is checked below.
- R1: deepseek-ai/DeepSeek-R1 (several system messages joined by a blank line, `'tool_calls' in message`).
- V3: deepseek-ai/DeepSeek-V3 (-0324), the V2.5/V3 shape: `<｜User｜>`/`<｜Assistant｜>`, no thinking.
- V2: deepseek-ai/DeepSeek-V2-Chat / V2-Lite-Chat ("User: … Assistant:"), and CODER:
  deepseek-ai/deepseek-coder-33b-instruct (default system prompt when none is given); both as in llama.cpp's
  tests/test-chat-template.cpp, whose expected outputs are checked below.
"""

from __future__ import annotations

import pytest

from inference.chat_template import RenderedPrompt, render_chat
from inference.protocol import ChatMessage

BOS, EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
CODER_SYSTEM = (
    "You are an AI programming assistant, utilizing the Deepseek Coder model, developed by Deepseek Company, "
    "and you only answer questions related to computer science. For politically sensitive questions, "
    "security and privacy issues, and other non-computer science questions, you will refuse to answer\n"
)

R1_DISTILL = (
    "{% if not add_generation_prompt is defined %}"
    "{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, "
    "is_output_first=true, system_prompt='') %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{% set ns.system_prompt = message['content'] %}{%- endif %}"
    "{%- endfor %}{{bos_token}}{{ns.system_prompt}}"
    "{%- for message in messages %}{%- if message['role'] == 'user' %}"
    "{%- set ns.is_tool = false -%}{{'<｜User｜>' + message['content']}}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}"
    "{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}"
    "{%- if not ns.is_first %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + "
    "tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + "
    "'```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}"
    "{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\\n' + '```json' + '\\n' + "
    "tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + "
    "'<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}"
    "{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}"
    "{%- endif %}{%- if message['role'] == 'tool' %}"
    "{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + "
    "message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}"
    "{{'\\n<｜tool▁output▁begin｜>' + message['content'] + "
    "'<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}"
    "{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}"
    "{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)

R1 = (
    "{% if not add_generation_prompt is defined %}"
    "{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, "
    "is_output_first=true, system_prompt='', is_first_sp=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + "
    "message['content'] %}{% set ns.is_first_sp = false %}{%- else %}"
    "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + "
    "message['content'] %}{%- endif %}{%- endif %}{%- endfor %}"
    "{{ bos_token }}{{ ns.system_prompt }}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}"
    "{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' in message %}"
    "{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls'] %}"
    "{%- if not ns.is_first %}{%- if message['content'] is none %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + "
    "tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + "
    "'```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- else %}{{'<｜Assistant｜>' + "
    "message['content'] + '<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + "
    "tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + "
    "'```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- endif %}{%- set ns.is_first = true -%}"
    "{%- else %}{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + "
    "'<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + '```json' + "
    "'\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- endif %}{%- endfor %}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and 'tool_calls' not in message %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + "
    "'<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}"
    "{% set content = message['content'] %}{% if '</think>' in content %}"
    "{% set content = content.split('</think>')[-1] %}{% endif %}"
    "{{'<｜Assistant｜>' + content + '<｜end▁of▁sentence｜>'}}{%- endif %}"
    "{%- endif %}{%- if message['role'] == 'tool' %}"
    "{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + "
    "message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}"
    "{{'<｜tool▁output▁begin｜>' + message['content'] + "
    "'<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}"
    "{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}"
    "{{'<｜Assistant｜><think>\\n'}}{% endif %}"
)

V3 = (
    "{% if not add_generation_prompt is defined %}"
    "{% set add_generation_prompt = false %}{% endif %}"
    "{% set ns = namespace(is_first=false, is_tool=false, "
    "is_output_first=true, system_prompt='', is_first_sp=true) %}"
    "{%- for message in messages %}{%- if message['role'] == 'system' %}"
    "{%- if ns.is_first_sp %}{% set ns.system_prompt = ns.system_prompt + "
    "message['content'] %}{% set ns.is_first_sp = false %}{%- else %}"
    "{% set ns.system_prompt = ns.system_prompt + '\\n\\n' + "
    "message['content'] %}{%- endif %}{%- endif %}{%- endfor %}{{bos_token}"
    "}{{ns.system_prompt}}{%- for message in messages %}"
    "{%- if message['role'] == 'user' %}{%- set ns.is_tool = false -%}"
    "{{'<｜User｜>' + message['content']}}{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is none %}"
    "{%- set ns.is_tool = false -%}{%- for tool in message['tool_calls']%}"
    "{%- if not ns.is_first %}"
    "{{'<｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>' + "
    "tool['type'] + '<｜tool▁sep｜>' + tool['function']['name'] + '\\n' + "
    "'```json' + '\\n' + tool['function']['arguments'] + '\\n' + '```' + "
    "'<｜tool▁call▁end｜>'}}{%- set ns.is_first = true -%}{%- else %}"
    "{{'\\n' + '<｜tool▁call▁begin｜>' + tool['type'] + '<｜tool▁sep｜>' + "
    "tool['function']['name'] + '\\n' + '```json' + '\\n' + "
    "tool['function']['arguments'] + '\\n' + '```' + '<｜tool▁call▁end｜>'}}"
    "{{'<｜tool▁calls▁end｜><｜end▁of▁sentence｜>'}}{%- endif %}{%- endfor %}"
    "{%- endif %}"
    "{%- if message['role'] == 'assistant' and message['content'] is not none %}"
    "{%- if ns.is_tool %}{{'<｜tool▁outputs▁end｜>' + message['content'] + "
    "'<｜end▁of▁sentence｜>'}}{%- set ns.is_tool = false -%}{%- else %}"
    "{{'<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>'}}"
    "{%- endif %}{%- endif %}{%- if message['role'] == 'tool' %}"
    "{%- set ns.is_tool = true -%}{%- if ns.is_output_first %}"
    "{{'<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>' + "
    "message['content'] + '<｜tool▁output▁end｜>'}}"
    "{%- set ns.is_output_first = false %}{%- else %}"
    "{{'\\n<｜tool▁output▁begin｜>' + message['content'] + "
    "'<｜tool▁output▁end｜>'}}{%- endif %}{%- endif %}{%- endfor -%}"
    "{% if ns.is_tool %}{{'<｜tool▁outputs▁end｜>'}}{% endif %}"
    "{% if add_generation_prompt and not ns.is_tool %}{{'<｜Assistant｜>'}}"
    "{% endif %}"
)

V2 = (
    "{% if not add_generation_prompt is defined %}"
    "{% set add_generation_prompt = false %}{% endif %}{{ bos_token }}"
    "{% for message in messages %}{% if message['role'] == 'user' %}"
    "{{ 'User: ' + message['content'] + '\n\n' }}"
    "{% elif message['role'] == 'assistant' %}{{ 'Assistant: ' + "
    "message['content'] + eos_token }}"
    "{% elif message['role'] == 'system' %}{{ message['content'] + '\n\n' }"
    "}{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "{{ 'Assistant:' }}{% endif %}"
)

CODER = (
    "{% if not add_generation_prompt is defined %}\n"
    "{% set add_generation_prompt = false %}\n{% endif %}\n"
    "{%- set ns = namespace(found=false) -%}\n"
    "{%- for message in messages -%}\n"
    "    {%- if message['role'] == 'system' -%}\n"
    "        {%- set ns.found = true -%}\n    {%- endif -%}\n{%- endfor -%}"
    "\n{{bos_token}}{%- if not ns.found -%}\n"
    "{{'You are an AI programming assistant, "
    "utilizing the Deepseek Coder model, developed by Deepseek Company, "
    "and you only answer questions related to computer science. For politically sensitive questions, "
    "security and privacy issues, "
    "and other non-computer science questions, "
    "you will refuse to answer\\n'}}\n{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if message['role'] == 'system' %}\n{{ message['content'] }}\n"
    "    {%- else %}\n        {%- if message['role'] == 'user' %}\n"
    "{{'### Instruction:\\n' + message['content'] + '\\n'}}\n"
    "        {%- else %}\n{{'### Response:\\n' + message['content'] + "
    "'\\n<|EOT|>\\n'}}\n        {%- endif %}\n    {%- endif %}\n"
    "{%- endfor %}\n{% if add_generation_prompt %}\n{{'### Response:'}}\n"
    "{% endif %}"
)

SYSTEM = [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi")]
NO_SYSTEM = [ChatMessage("user", "Hi")]
TWO_SYSTEMS = [
    ChatMessage("system", "Be brief."),
    ChatMessage("system", "Answer in English."),
    ChatMessage("user", "Hi"),
]
# A follow-up after a reply that still holds its reasoning (as a model writes it).
MULTI_TURN = [
    ChatMessage("system", "Be brief."),
    ChatMessage("user", "Hi"),
    ChatMessage("assistant", "<think>\nGreet back.\n</think>\n\nHello!"),
    ChatMessage("user", "Why?"),
]


def render(template: str, messages: list[ChatMessage]) -> RenderedPrompt:
    result = render_chat(template, messages, bos_token=BOS, eos_token=EOS)
    assert (result.source, result.note) == ("gguf", ""), result.note
    return result


@pytest.mark.parametrize(
    ("template", "messages", "expected"),
    [
        # R1 and its distills: the reply starts inside a thought; the model writes the closing tag itself.
        pytest.param(
            R1_DISTILL, SYSTEM, f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜><think>\n", id="r1-distill"
        ),
        pytest.param(
            R1_DISTILL, NO_SYSTEM, f"{BOS}<｜User｜>Hi<｜Assistant｜><think>\n", id="r1-distill-no-system"
        ),
        # Earlier reasoning is dropped: only what follows </think> goes back, as DeepSeek advises for R1.
        pytest.param(
            R1_DISTILL,
            MULTI_TURN,
            f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜>\n\nHello!{EOS}<｜User｜>Why?<｜Assistant｜><think>\n",
            id="r1-distill-multi-turn",
        ),
        # The distills keep only the last system message.
        pytest.param(
            R1_DISTILL,
            TWO_SYSTEMS,
            f"{BOS}Answer in English.<｜User｜>Hi<｜Assistant｜><think>\n",
            id="r1-distill-2sys",
        ),
        pytest.param(R1, SYSTEM, f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜><think>\n", id="r1"),
        pytest.param(
            R1,
            MULTI_TURN,
            f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜>\n\nHello!{EOS}<｜User｜>Why?<｜Assistant｜><think>\n",
            id="r1-multi-turn",
        ),
        pytest.param(
            R1,
            TWO_SYSTEMS,
            f"{BOS}Be brief.\n\nAnswer in English.<｜User｜>Hi<｜Assistant｜><think>\n",
            id="r1-two-systems",
        ),
        pytest.param(V3, SYSTEM, f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜>", id="v3"),
        pytest.param(V3, NO_SYSTEM, f"{BOS}<｜User｜>Hi<｜Assistant｜>", id="v3-no-system"),
        # V3 has no reasoning of its own to strip: the reply goes back as it was.
        pytest.param(
            V3,
            MULTI_TURN,
            f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜><think>\nGreet back.\n</think>\n\nHello!{EOS}"
            "<｜User｜>Why?<｜Assistant｜>",
            id="v3-multi-turn",
        ),
        pytest.param(
            V3,
            TWO_SYSTEMS,
            f"{BOS}Be brief.\n\nAnswer in English.<｜User｜>Hi<｜Assistant｜>",
            id="v3-two-systems",
        ),
        pytest.param(V2, SYSTEM, f"{BOS}Be brief.\n\nUser: Hi\n\nAssistant:", id="v2"),
        pytest.param(V2, NO_SYSTEM, f"{BOS}User: Hi\n\nAssistant:", id="v2-no-system"),
        pytest.param(CODER, SYSTEM, f"{BOS}Be brief.### Instruction:\nHi\n### Response:\n", id="coder"),
        # Without a system message the Coder template supplies its own.
        pytest.param(
            CODER,
            NO_SYSTEM,
            f"{BOS}{CODER_SYSTEM}### Instruction:\nHi\n### Response:\n",
            id="coder-default-system",
        ),
    ],
)
def test_deepseek_templates_render_as_intended(
    template: str, messages: list[ChatMessage], expected: str
) -> None:
    assert render(template, messages).text == expected


# --- the expected prompts published with the copies ----------------------------------------------------

# llama.cpp's tests/test-chat-template.cpp conversation (bos_token "", eos_token "<｜end▁of▁sentence｜>").
LLAMA_CPP_CONVERSATION = [
    ChatMessage("system", "You are a helpful assistant"),
    ChatMessage("user", "Hello"),
    ChatMessage("assistant", "Hi there"),
    ChatMessage("user", "Who are you"),
    ChatMessage("assistant", "   I am an assistant   "),
    ChatMessage("user", "Another question"),
]


def test_v2_matches_llama_cpp_expected_output() -> None:
    result = render_chat(V2, LLAMA_CPP_CONVERSATION, bos_token="", eos_token=EOS)
    assert result.text == (
        f"You are a helpful assistant\n\nUser: Hello\n\nAssistant: Hi there{EOS}User: Who are you\n\n"
        f"Assistant:    I am an assistant   {EOS}User: Another question\n\nAssistant:"
    )


def test_coder_matches_llama_cpp_expected_output() -> None:
    result = render_chat(CODER, LLAMA_CPP_CONVERSATION, bos_token="", eos_token=EOS)
    assert result.text == (
        "You are a helpful assistant### Instruction:\nHello\n### Response:\nHi there\n<|EOT|>\n"
        "### Instruction:\nWho are you\n### Response:\n   I am an assistant   \n<|EOT|>\n"
        "### Instruction:\nAnother question\n### Response:\n"
    )


def test_r1_distill_matches_litellm_expected_prompt() -> None:
    messages = [
        ChatMessage("system", "You are a good assistant"),
        ChatMessage("user", "What is the weather in Copenhagen?"),
    ]
    # litellm compares after rstrip(): the template ends with "<think>" and a newline.
    assert render(R1_DISTILL, messages).text == (
        f"{BOS}You are a good assistant<｜User｜>What is the weather in Copenhagen?<｜Assistant｜><think>\n"
    )


def test_no_generation_prompt_leaves_the_turn_closed() -> None:
    messages = [*SYSTEM, ChatMessage("assistant", "<think>\nok\n</think>\n\nHello!")]
    for template in (R1_DISTILL, R1):
        result = render_chat(template, messages, bos_token=BOS, eos_token=EOS, add_generation_prompt=False)
        assert result.text == f"{BOS}Be brief.<｜User｜>Hi<｜Assistant｜>\n\nHello!{EOS}"
