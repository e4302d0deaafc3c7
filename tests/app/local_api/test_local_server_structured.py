"""Structured output through the local API with the official `openai` client: `response_format` json_object
and json_schema hold the real starter model's reply to JSON (valid against the schema, checked with
jsonschema), streamed and not; what a grammar cannot enforce, and a malformed `response_format`, are 400s
naming them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from app.chat.engine import ChatEngine
from app.local_api.server import LocalServer
from tests.app.local_api.test_local_server import model_name
from tests.inference.test_grammar import PERSON

__all__ = ["PERSON", "model_name"]

KEY = "hearth-test-key-structured"
ASK: list[ChatCompletionMessageParam] = [
    {"role": "user", "content": "Describe a person as JSON: their name, favourite colour, age and hobbies."}
]
JSON_OBJECT: dict[str, Any] = {"type": "json_object"}
JSON_SCHEMA: dict[str, Any] = {
    "type": "json_schema",
    "json_schema": {"name": "person", "schema": PERSON, "strict": True},
}


@pytest.fixture
def client(engine: ChatEngine) -> Iterator[openai.OpenAI]:
    server = LocalServer(engine, KEY, port=0)
    server.start()
    try:
        with openai.OpenAI(base_url=server.url, api_key=KEY, max_retries=0, timeout=300) as api:
            yield api
    finally:
        server.stop()


def reply(client: openai.OpenAI, model: str, stream: bool, **options: Any) -> tuple[str, str | None]:
    """The reply's text and finish reason, from one response or from the chunks of a stream."""
    options = {"temperature": 0, "seed": 1, "max_tokens": 200, **options}
    if not stream:
        choice = client.chat.completions.create(model=model, messages=ASK, **options).choices[0]
        return choice.message.content or "", choice.finish_reason
    chunks = list(client.chat.completions.create(model=model, messages=ASK, stream=True, **options))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert len(reasons) == 1
    return text, reasons[0]


@pytest.mark.model
@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_json_object_and_json_schema_replies_parse_and_validate(
    model_name: str, client: openai.OpenAI, stream: bool
) -> None:
    text, reason = reply(client, model_name, stream, response_format=JSON_OBJECT)
    assert reason == "stop", text
    assert isinstance(json.loads(text), dict)

    text, reason = reply(client, model_name, stream, response_format=JSON_SCHEMA, temperature=0.8, seed=4)
    assert reason == "stop", text
    jsonschema.validate(json.loads(text), PERSON)


@pytest.mark.model
def test_a_reply_cut_by_max_tokens_is_length_and_not_json(model_name: str, client: openai.OpenAI) -> None:
    for stream in (False, True):
        text, reason = reply(client, model_name, stream, response_format=JSON_SCHEMA, max_tokens=5)
        assert reason == "length" and text.startswith("{")
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)


@pytest.mark.model
def test_text_is_no_constraint(model_name: str, client: openai.OpenAI) -> None:
    free = reply(client, model_name, False, max_tokens=12)
    assert reply(client, model_name, False, max_tokens=12, response_format={"type": "text"}) == free
    assert not free[0].startswith("{")


@pytest.mark.model
def test_a_schema_llama_cpp_refuses_is_400_and_the_next_request_is_answered(
    model_name: str, client: openai.OpenAI
) -> None:
    loop = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    with pytest.raises(openai.BadRequestError) as refused:
        reply(
            client, model_name, True, response_format={"type": "json_schema", "json_schema": {"schema": loop}}
        )
    assert (
        refused.value.param == "response_format"
        and "llama.cpp cannot use the grammar" in refused.value.message
    )
    text, _ = reply(client, model_name, False, response_format=JSON_OBJECT, max_tokens=8)
    assert text.startswith("{")


def ask(client: openai.OpenAI, **options: Any) -> None:
    """A request refused before it needs a model: what the client sends as it is, typed or not."""
    client.chat.completions.create(model="m", messages=ASK, **options)


def schema_format(schema: object) -> dict[str, Any]:
    return {"type": "json_schema", "json_schema": {"name": "s", "schema": schema}}


MALFORMED = [
    ("json", "'response_format' must be an object whose 'type'"),
    ({"type": "xml"}, "'response_format' must be an object whose 'type'"),
    ({"type": "json_schema"}, "'response_format.json_schema' must be an object"),
    (
        {"type": "json_schema", "json_schema": {"name": "s"}},
        "'response_format.json_schema.schema' is missing",
    ),
    (
        schema_format([{"type": "object"}]),
        "'response_format.json_schema.schema' must be a JSON Schema object",
    ),
    (schema_format("object"), "'response_format.json_schema.schema' must be a JSON Schema object"),
    (schema_format({"type": "strin"}), "'response_format.json_schema.schema' is not a valid JSON Schema"),
    (schema_format({"properties": {"a": {"minLength": "3"}}}), "(at properties/a/minLength)"),
    ({**schema_format({}), "json_schema": {"name": 3, "schema": {}}}, "'response_format.json_schema.name'"),
    (
        {**schema_format({}), "json_schema": {"strict": "yes", "schema": {}}},
        "'response_format.json_schema.strict'",
    ),
]


@pytest.mark.parametrize(("response_format", "named"), MALFORMED)
def test_a_malformed_response_format_is_400_naming_the_field(
    client: openai.OpenAI, response_format: object, named: str
) -> None:
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, response_format=response_format)
    assert refused.value.param == "response_format" and refused.value.code == "invalid_value"
    assert named in refused.value.message


def test_what_a_grammar_cannot_enforce_is_400_naming_each(client: openai.OpenAI) -> None:
    schema = {
        "type": "object",
        "properties": {
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "mail": {"type": "string", "format": "email"},
            "score": {"type": "number", "maximum": 1},
        },
    }
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, response_format=schema_format(schema))
    error = refused.value
    assert error.param == "response_format" and error.code == "unsupported"
    for named in (
        "uniqueItems (a grammar cannot compare items) at #/properties/tags",
        'format "email"',
        "at #/properties/mail",
        "maximum on a number",
    ):
        assert named in error.message


def test_response_format_beside_tools_is_400(client: openai.OpenAI) -> None:
    tool = {"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}
    with pytest.raises(openai.BadRequestError) as refused:
        ask(client, response_format=JSON_OBJECT, tools=[tool])
    assert (
        refused.value.param == "response_format"
        and "cannot be combined with 'tools'" in refused.value.message
    )
