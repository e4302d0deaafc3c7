"""Tools and tool calls through Hearth's sandboxed template renderer, with the real templates of the model
families that take tools (tests/fixtures/chat_templates): the `tools` variable, an assistant's calls and
the tool results come out where each model expects them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from inference.chat_template import render_chat
from inference.protocol import ChatMessage, ToolCallRecord, ToolSpec

TEMPLATES = Path(__file__).resolve().parents[1] / "fixtures" / "chat_templates"
WEATHER = ToolSpec(
    "get_weather",
    "The weather in a city now.",
    json.dumps({"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}),
)
# Nine letters and digits: the one id shape every template accepts (Mistral's refuse any other).
CALL = ToolCallRecord("c4ll0abcd", "get_weather", '{"city": "Paris"}')
CONVERSATION = (
    ChatMessage("user", "Weather in Paris?"),
    ChatMessage("assistant", "", tool_calls=(CALL,)),
    ChatMessage("tool", "18 °C, light rain", tool_call_id="c4ll0abcd", tool_name="get_weather"),
)


@pytest.mark.parametrize(
    ("template", "call_text", "result_text"),
    [
        (
            "Qwen-Qwen2.5-7B-Instruct.jinja",
            '{"name": "get_weather", "arguments": {"city": "Paris"}}',
            "<tool_response>\n18 °C, light rain\n</tool_response>",
        ),
        (
            "Qwen-Qwen3-0.6B.jinja",
            '{"name": "get_weather", "arguments": {"city": "Paris"}}',
            "<tool_response>\n18 °C, light rain\n</tool_response>",
        ),
        (
            "meta-llama-Llama-3.1-8B-Instruct.jinja",
            '{"name": "get_weather", "parameters": {"city": "Paris"}}',
            '<|start_header_id|>ipython<|end_header_id|>\n\n"18 °C, light rain"',
        ),
        (
            "mistralai-Mistral-Nemo-Instruct-2407.jinja",
            '"name": "get_weather", "arguments": {"city": "Paris"}',
            "[TOOL_RESULTS]",
        ),
    ],
)
def test_tools_calls_and_results_render_where_the_model_expects_them(
    template: str, call_text: str, result_text: str
) -> None:
    source = (TEMPLATES / template).read_text()
    offered = render_chat(source, CONVERSATION[:1], bos_token="<s>", eos_token="</s>", tools=(WEATHER,))
    assert offered.source == "gguf", offered.note
    assert "get_weather" in offered.text and "The weather in a city now." in offered.text
    plain = render_chat(source, CONVERSATION[:1], bos_token="<s>", eos_token="</s>")
    assert "get_weather" not in plain.text
    answered = render_chat(source, CONVERSATION, bos_token="<s>", eos_token="</s>", tools=(WEATHER,))
    assert answered.source == "gguf", answered.note
    assert call_text in answered.text
    assert result_text in answered.text
