"""Structured output for the local API: OpenAI's `response_format`, checked before a request waits for the
model, as the JSON Schema (its text) the runner holds the reply to with a grammar (inference.grammar).

`{"type": "json_object"}` is any JSON object; `{"type": "json_schema", "json_schema": {"name", "schema",
"strict"}}` one valid against `schema`; `{"type": "text"}` (or none) is free text. A schema that is not one
(jsonschema's own check against its metaschema), or that asks what a grammar cannot enforce, is refused
with the reason: a reply that only looked constrained would be worse than an error.
"""

from __future__ import annotations

import json
from typing import Final

import jsonschema

from inference.grammar import schema_problems, unsupported_message

# What json_object asks for: any object, as OpenAI's JSON mode gives.
ANY_OBJECT: Final = json.dumps({"type": "object"})


class ResponseFormatError(ValueError):
    """`response_format` is malformed (code "invalid_value") or asks what cannot be enforced
    ("unsupported"); the message names the field."""

    def __init__(self, message: str, code: str = "invalid_value") -> None:
        super().__init__(message)
        self.code = code


def response_format_schema(value: object) -> str | None:
    """The JSON Schema (its text) a request's `response_format` holds the reply to; None for free text.

    Raises ResponseFormatError.
    """
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return ANY_OBJECT
    if kind != "json_schema":
        raise ResponseFormatError(
            '\'response_format\' must be an object whose \'type\' is "text", "json_object" or "json_schema".'
        )
    assert isinstance(value, dict)
    spec = value.get("json_schema")
    if not isinstance(spec, dict):
        raise ResponseFormatError(
            "'response_format.json_schema' must be an object with the schema under 'schema' (and a 'name')."
        )
    name = spec.get("name")
    if name is not None and not isinstance(name, str):
        raise ResponseFormatError("'response_format.json_schema.name' must be a string.")
    if not isinstance(spec.get("strict", False), bool | None):
        raise ResponseFormatError("'response_format.json_schema.strict' must be true or false.")
    if "schema" not in spec:
        raise ResponseFormatError(
            "'response_format.json_schema.schema' is missing: give the JSON Schema there."
        )
    return schema_text(spec["schema"], "'response_format.json_schema.schema'")


def schema_text(schema: object, where: str) -> str:
    """A request's JSON Schema (found at `where`, as its messages name it) as the text the runner takes, once
    checked: Ollama's `format` gives the schema itself, OpenAI's `response_format` wraps it.

    Raises ResponseFormatError.
    """
    if not isinstance(schema, dict):
        raise ResponseFormatError(f"{where} must be a JSON Schema object.")
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        at = "/".join(str(part) for part in exc.path)
        raise ResponseFormatError(
            f"{where} is not a valid JSON Schema{f' (at {at})' if at else ''}: {exc.message}"
        ) from exc
    except RecursionError as exc:
        raise ResponseFormatError(f"{where} nests too deeply.") from exc
    problems = schema_problems(schema)
    if problems:
        raise ResponseFormatError(f"{where}: {unsupported_message(problems)}", code="unsupported")
    return json.dumps(schema, ensure_ascii=False)
