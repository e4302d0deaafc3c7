"""JSON Schemas as llama.cpp grammars (inference.grammar): what is refused and why, what the conversion puts
right in llama-cpp-python's converter, and replies of the real starter model held to them by the runner,
parsed with json.loads and validated with jsonschema."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from inference.grammar import (
    MAX_REPEAT,
    GrammarError,
    integer_range,
    schema_grammar,
    schema_problems,
)
from inference.protocol import (
    ChatMessage,
    ErrorKind,
    Failed,
    Finished,
    GenerateRequest,
    GenerationStats,
    LoadPlan,
    LoadRequest,
    SamplingParams,
    StopReason,
    TokenDelta,
)
from inference.runner import Runner

PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "colour": {"enum": ["red", "green", "blue"]},
        "age": {"type": "integer", "minimum": 18, "maximum": 99},
        "hobbies": {
            "type": "array",
            "items": {"type": "string", "maxLength": 30},
            "minItems": 1,
            "maxItems": 3,
        },
    },
    "required": ["name", "colour", "age", "hobbies"],
    "additionalProperties": False,
}
# Definitions, a recursive reference, anyOf with null, a format, a pattern, a tuple, a negative range.
TREE: dict[str, Any] = {
    "$defs": {
        "node": {
            "type": "object",
            "properties": {
                "label": {"type": "string", "pattern": "^[A-Z][a-z]{0,8}( [a-z]+)?$"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}, "maxItems": 2},
            },
            "required": ["label"],
        }
    },
    "type": "object",
    "properties": {
        "root": {"$ref": "#/$defs/node"},
        "planted": {"type": "string", "format": "date"},
        "note": {"anyOf": [{"type": "string", "maxLength": 20}, {"type": "null"}]},
        "where": {"type": "array", "prefixItems": [{"type": "number"}, {"type": "number"}]},
        "depth": {"type": "integer", "exclusiveMinimum": -40, "maximum": -3},
    },
    "required": ["root", "planted", "note", "where", "depth"],
}


# --- integer ranges ----------------------------------------------------------------------------------


def as_regex(expression: str) -> re.Pattern[str]:
    """integer_range's GBNF is regular: quoted digits, [a-b] classes, {n} repetitions, groups and |."""
    return re.compile(expression.replace('"', "").replace(" ", ""))


@pytest.mark.parametrize(
    ("low", "high"),
    [(0, 0), (0, 9), (5, 5), (18, 99), (7, 1234), (100, 120), (-5, 5), (-120, -7), (-1, 0), (999, 1001)],
)
def test_an_integer_range_is_exactly_its_integers_in_json_spelling(low: int, high: int) -> None:
    regex = as_regex(integer_range(low, high))
    for n in range(low - 150, high + 151):
        assert bool(regex.fullmatch(str(n))) == (low <= n <= high), n
    for spelled in ("-0", "00", "01", f"0{max(low, 1)}", "+1", ""):
        assert not regex.fullmatch(spelled), spelled


def test_a_range_of_sixteen_digits_is_written_digit_by_digit() -> None:
    expression = integer_range(-(10**16 - 1), 10**16 - 1)
    assert len(expression) < 600
    regex = as_regex(expression)
    for n in (0, 7, -7, 10**15, 10**16 - 1, -(10**16 - 1), 1234567890123456):
        assert regex.fullmatch(str(n))
    assert not regex.fullmatch(str(10**16))


# --- what is refused ---------------------------------------------------------------------------------

UNSUPPORTED = [
    (
        {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        "uniqueItems (a grammar cannot compare items) at #",
    ),
    ({"type": "integer", "multipleOf": 5}, "multipleOf at #"),
    ({"properties": {"n": {"type": "number", "minimum": 0}}}, "minimum on a number (ranges are enforced on"),
    ({"properties": {"n": {"minimum": 0}}}, "minimum on a number"),
    ({"type": "object", "patternProperties": {"^x": {}}}, "patternProperties at #"),
    ({"type": "object", "propertyNames": {"maxLength": 3}}, "propertyNames"),
    ({"type": "object", "minProperties": 1}, "minProperties"),
    ({"not": {"type": "string"}}, "not at #"),
    ({"if": {"type": "string"}, "then": {"maxLength": 3}}, "if at #"),
    ({"dependentSchemas": {"a": {}}}, "dependentSchemas"),
    ({"dependentRequired": {"a": ["b"]}}, "dependentRequired"),
    ({"oneOf": [{"type": "string"}, {"type": "integer"}]}, "oneOf (use anyOf"),
    ({"allOf": [{"type": "string"}, {"maxLength": 3}]}, "allOf of more than one schema at #"),
    ({"type": "array", "contains": {"type": "integer"}}, "contains at #"),
    ({"properties": {"mail": {"type": "string", "format": "email"}}}, 'format "email" (formats enforced:'),
    ({"type": "string", "format": "uri"}, 'format "uri"'),
    ({"$ref": "https://example.com/schema.json"}, "only references into this schema"),
    ({"$ref": "#/$defs/missing"}, "which points at nothing"),
    ({"$ref": "#/$defs/a", "$defs": {"a": {"type": "string"}}, "maxLength": 3}, "maxLength beside $ref"),
    ({"anyOf": [{"type": "string"}], "minLength": 2}, "minLength beside anyOf"),
    ({"type": ["string", "null"], "maxLength": 3}, "maxLength beside a list of types"),
    ({"enum": ["a", "bb"], "maxLength": 1}, "maxLength beside enum"),
    (
        {"type": "object", "properties": {"a": {}}, "required": ["a", "b"]},
        'required names not in properties ("b")',
    ),
    ({"type": "array", "prefixItems": [{}], "items": {"type": "string"}}, "items beside prefixItems"),
    ({"type": "array", "prefixItems": [{}, {}], "minItems": 3}, "other than the number of prefixItems"),
    ({"type": "array", "items": False}, "items false"),
    ({"properties": {"a": {}}, "additionalProperties": True}, "additionalProperties beside properties"),
    ({"properties": {"a": {}}, "additionalProperties": {"type": "string"}}, "additionalProperties beside"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength above maxLength"),
    ({"type": "array", "maxItems": MAX_REPEAT + 1}, f"an integer from 0 to {MAX_REPEAT}"),
    ({"type": "integer", "minimum": 10, "maximum": 9}, "an integer range with no integer in it"),
    ({"type": "integer", "minimum": 10**17}, "an integer range with no integer in it"),
    ({"type": "integer", "minimum": 0, "exclusiveMinimum": True}, "that is not a number"),
    ({"properties": {"x": False}}, "false (no value is valid) at #/properties/x"),
    ({"properties": {"a/b": {"properties": {"c": {"not": {}}}}}}, "not at #/properties/a~1b/properties/c"),
    ({"$defs": {"a": {"$id": "other", "type": "string"}}, "$ref": "#/$defs/a"}, "$id below the root"),
    ({"type": "string", "pattern": "^a+"}, "no ^ at the start and $ at the end"),
    ({"type": "string", "pattern": "(?i)^a$"}, "no ^ at the start"),
    ({"type": "string", "pattern": "^(?=a)ab$"}, "a (?...) group"),
    ({"type": "string", "pattern": "^\\s+$"}, "the escape \\s"),
    ({"type": "string", "pattern": '^a"b$'}, "a quote, backslash or control character"),
    ({"type": "string", "pattern": "^[ -~]+$"}, "a [...] class that holds a quote, a backslash"),
    ({"type": "string", "pattern": "^a{2000}$"}, f"a repetition over {MAX_REPEAT}"),
    ({"type": "string", "pattern": "^a]$"}, "a ] not escaped"),
    ({"type": "string", "pattern": "^a(b$"}, "which is not a regular expression"),
    ({"type": "string", "pattern": "^x$", "maxLength": 3}, "maxLength beside pattern"),
]


@pytest.mark.parametrize(("schema", "named"), UNSUPPORTED, ids=[named for _, named in UNSUPPORTED])
def test_what_a_grammar_cannot_enforce_is_named_with_where_it_is(schema: dict[str, Any], named: str) -> None:
    problems = schema_problems(schema)
    assert any(named in problem for problem in problems), problems
    with pytest.raises(GrammarError, match="cannot enforce with a grammar"):
        schema_grammar(json.dumps(schema))


def test_a_schema_that_is_not_json_or_not_an_object_is_refused() -> None:
    assert schema_problems([]) == ["the schema must be a JSON object"]
    with pytest.raises(GrammarError, match="not valid JSON"):
        schema_grammar("{")


def test_a_schema_too_deep_stops_the_walk() -> None:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(100):
        schema = {"type": "array", "items": schema}
    (problem,) = schema_problems(schema)
    assert "more than 64 levels deep" in problem


SUPPORTED: list[dict[str, Any]] = [
    {"type": "object"},
    {},
    PERSON,
    TREE,
    # Annotations and keywords JSON Schema does not know are ignored, as validators ignore them.
    {"title": "T", "description": "d", "examples": [1], "nullable": True, "type": "integer"},
    {"type": "object", "properties": {"anything": {"description": "any value"}, "list": {"items": {}}}},
    {"allOf": [{"$ref": "#/definitions/a"}], "definitions": {"a": {"type": "boolean"}}},
    {"type": "array", "minItems": 2, "maxItems": 2},
    {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0, "maximum": 9}},
    {"type": ["string", "null"]},
    {"const": {"k": [1, "two"]}},
    {"type": "string", "format": "date-time"},
    {"type": "string", "format": "uuid"},
    {"type": "string", "pattern": "^[a-z]+\\.com|[^@]+@x\\.org$"},
    {"type": "string", "pattern": "^\\d{3}-\\w+ .*$"},
    {"type": "string", "minLength": 2},
    {"type": "array", "items": [{"type": "string"}, {"type": "integer"}]},
]


@pytest.mark.parametrize("schema", SUPPORTED, ids=range(len(SUPPORTED)))
def test_what_a_grammar_can_enforce_converts(schema: dict[str, Any]) -> None:
    assert schema_problems(schema) == []
    grammar = schema_grammar(json.dumps(schema))
    assert re.search(r"^root ::= ", grammar, re.MULTILINE), grammar


# --- what the conversion puts right ------------------------------------------------------------------


def rules(grammar: str) -> dict[str, str]:
    return dict(line.split(" ::= ", 1) for line in grammar.splitlines())


def test_strings_never_hold_raw_control_characters() -> None:
    char = rules(schema_grammar(json.dumps({"type": "string"})))["char"]
    assert char.startswith('[^"\\\\\\x7F\\x00-\\x1F]')


def test_backslashes_in_literals_are_escaped_for_gbnf() -> None:
    colour = rules(schema_grammar(json.dumps({"enum": ["a\\b"]})))["root"]
    # JSON's "a\\b", each of its backslashes doubled for GBNF.
    assert colour == '"\\"a\\\\\\\\b\\""'


def test_a_reference_gets_its_own_rule_even_when_a_property_has_its_name() -> None:
    schema = {
        "type": "object",
        "properties": {
            "pet": {"type": "object", "properties": {"legs": {"type": "integer"}}},
            "other": {"$ref": "#/$defs/pet"},
        },
        "$defs": {"pet": {"enum": ["cat"]}},
    }
    grammar = rules(schema_grammar(json.dumps(schema)))
    other = grammar[grammar["other-kv"].split()[-1]]
    assert grammar[grammar[other]] == '"\\"cat\\""'


def test_any_value_is_any_value_and_patterns_keep_their_quotes() -> None:
    assert rules(schema_grammar("{}"))["root"] == "object | array | string | number | boolean | null"
    root = rules(schema_grammar(json.dumps({"type": "string", "pattern": "^a|b$"})))["root"]
    assert root == '"\\"" ("a" | "b") "\\"" space'


# --- llama.cpp and the real starter model ------------------------------------------------------------


class InProcess:
    """The runner's own code in this process: a grammar llama.cpp chokes on would take the tests down."""

    def __init__(self, path: Path) -> None:
        self.sent: list[object] = []
        self.runner = Runner(self.sent.append)
        plan = LoadPlan(
            model_path=str(path), n_ctx=1024, n_gpu_layers=0, n_layers=30, flash_attn=True, n_threads=2
        )
        self.runner.load(LoadRequest(plan))
        assert self.runner._model is not None, self.sent

    def reply(
        self, prompt: str, sampling: SamplingParams, schema: object = None
    ) -> tuple[str, GenerationStats | Failed]:
        self.sent.clear()
        json_schema = None if schema is None else schema if isinstance(schema, str) else json.dumps(schema)
        self.runner.generate(
            GenerateRequest("g", (ChatMessage("user", prompt),), sampling, json_schema=json_schema)
        )
        (end,) = [m for m in self.sent if isinstance(m, Finished | Failed)]
        text = "".join(m.text for m in self.sent if isinstance(m, TokenDelta))
        return text, end.stats if isinstance(end, Finished) else end


@pytest.fixture(scope="module")
def model() -> Iterator[InProcess]:
    from tests.conftest import starter_model_file

    path = starter_model_file()
    if path is None:
        pytest.skip("the starter model is not installed")
    loaded = InProcess(path)
    yield loaded
    assert loaded.runner._model is not None
    loaded.runner._model.llm.close()


@pytest.mark.model
def test_llama_cpp_takes_every_grammar_made(model: InProcess) -> None:
    from inference.runner import _grammar

    assert model.runner._model is not None
    for schema in SUPPORTED:
        assert _grammar(model.runner._model, json.dumps(schema)), schema


GREEDY = SamplingParams(temperature=0.0, max_tokens=200, seed=1)
ASK_PERSON = "Describe a person as JSON: their name, favourite colour, age and up to three hobbies."
ASK_TREE = "Describe a small family tree as JSON, with the day it was written down and a short note."


@pytest.mark.model
@pytest.mark.parametrize(
    ("prompt", "schema", "sampling"),
    [
        (ASK_PERSON, {"type": "object"}, GREEDY),
        (ASK_PERSON, PERSON, GREEDY),
        (ASK_PERSON, PERSON, SamplingParams(temperature=1.0, max_tokens=200, seed=5)),
        (ASK_TREE, TREE, SamplingParams(temperature=0.7, max_tokens=300, seed=2)),
    ],
    ids=["object", "person", "person-sampled", "tree"],
)
def test_a_reply_held_to_a_schema_parses_and_validates(
    model: InProcess, prompt: str, schema: dict[str, Any], sampling: SamplingParams
) -> None:
    text, stats = model.reply(prompt, sampling, schema)
    assert isinstance(stats, GenerationStats), stats
    assert stats.stop_reason is StopReason.END_OF_TURN, text
    # No format checker: the grammar writes a date's shape (2024-02-31 is one) and the checker knows the
    # calendar.
    jsonschema.validate(json.loads(text), schema)


@pytest.mark.model
def test_a_reply_cut_by_max_tokens_is_not_json(model: InProcess) -> None:
    text, stats = model.reply(ASK_PERSON, SamplingParams(temperature=0.0, max_tokens=6, seed=1), PERSON)
    assert isinstance(stats, GenerationStats) and stats.stop_reason is StopReason.MAX_TOKENS
    assert stats.completion_tokens == 6 and text.startswith("{")
    with pytest.raises(json.JSONDecodeError):
        json.loads(text)


@pytest.mark.model
def test_a_grammar_llama_cpp_refuses_is_an_error_reply_and_the_runner_goes_on(model: InProcess) -> None:
    # Passes every check, converts, and is left-recursive: llama.cpp's parser returns NULL for it.
    loop = {"$defs": {"a": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"}
    assert schema_problems(loop) == []
    _, failed = model.reply(ASK_PERSON, GREEDY, loop)
    assert isinstance(failed, Failed) and failed.kind is ErrorKind.BAD_SCHEMA
    assert "llama.cpp cannot use the grammar" in failed.message
    # Nothing was sent before the error, not even PromptReady: the prompt was never read.
    assert model.sent == [failed]
    _, refused = model.reply(ASK_PERSON, GREEDY, {"type": "string", "format": "email"})
    assert isinstance(refused, Failed) and refused.kind is ErrorKind.BAD_SCHEMA
    text, stats = model.reply(ASK_PERSON, replace(GREEDY, max_tokens=40), {"type": "object"})
    assert isinstance(stats, GenerationStats) and text.startswith("{")
