"""Replies that must be JSON valid against a JSON Schema: the schema made a llama.cpp grammar (GBNF), which
the runner's sampler then holds every token to.

The conversion is llama-cpp-python's own (`llama_cpp.llama_grammar.SchemaConverter`, its copy of llama.cpp's
json_schema_to_grammar.py), with what that copy gets wrong here put right (_Converter):
- a string's characters include raw control characters, which a JSON string cannot hold (`json.loads`
  refuses a raw newline): they must be escaped, as llama.cpp's newer converter has it;
- a literal's backslashes (in an enum value, a property name) are not escaped for GBNF, which reads `\\\\`
  as one backslash;
- a referenced schema's rule is looked up by the last part of its path, so a rule of that name made earlier
  for something else (a property named like a definition) is taken in its place;
- `{}` (any value) becomes any object, `items: {}` fails, a pattern's top-level alternatives lose the
  quotes around them, and integers ignore their minimum and maximum.

It also passes over much of JSON Schema without a word (`uniqueItems`, `oneOf`'s "only one", `minimum` on
numbers, most formats, ...): `schema_problems` names what a schema asks that the grammar would not hold the
reply to. The app refuses such a schema before the request waits for the model, and the runner checks again
before converting. `schema_problems` is plain Python; only `schema_grammar` imports llama_cpp, whose package
loads the native library, so the conversion runs in the runner process.
"""

from __future__ import annotations

import functools
import json
import math
import re
from typing import Any, Final
from urllib.parse import unquote

# Bounds on what a schema may make the converter build: every repetition (minItems, maxLength, a pattern's
# {n,m}) is written out in full, each enum value is an alternative the grammar follows token by token, and
# the walk over the schema is recursive.
MAX_REPEAT: Final = 1000
MAX_ENUM: Final = 1000
MAX_DEPTH: Final = 64
MAX_SUBSCHEMAS: Final = 5000
MAX_GRAMMAR_CHARS: Final = 1 << 20
# The unbounded integer llama.cpp's converter writes has at most 16 digits; ranges keep to the same.
INTEGER_LIMIT: Final = 10**16 - 1
# The formats the converter writes a rule for.
FORMATS: Final = frozenset({"date", "time", "date-time", "uuid"})
# Shown in a problem's place when there are more.
_MAX_LISTED = 8

# Keywords that only describe: validators ignore them, and so may the grammar.
_ANNOTATIONS: Final = frozenset(
    {
        "title",
        "description",
        "default",
        "examples",
        "$comment",
        "deprecated",
        "readOnly",
        "writeOnly",
        "$schema",
        "$id",
        "$anchor",
        "$vocabulary",
        "contentEncoding",
        "contentMediaType",
        "contentSchema",
    }
)
# Definitions are schemas only where a $ref points at them.
_CONTAINERS: Final = frozenset({"$defs", "definitions"})
# Keywords the converter reads; every other one (unknown ones included: JSON Schema ignores those) is
# dropped before it sees a schema, or it would fail on a schema of annotations only.
_CONVERTED: Final = frozenset(
    {
        "$ref",
        "anyOf",
        "allOf",
        "type",
        "const",
        "enum",
        "properties",
        "required",
        "additionalProperties",
        "items",
        "prefixItems",
        "minItems",
        "maxItems",
        "pattern",
        "format",
        "minLength",
        "maxLength",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
    }
)
# JSON Schema's own keywords the grammar cannot hold a reply to, wherever they are.
_NEVER: Final = frozenset(
    {
        "oneOf",
        "not",
        "if",
        "then",
        "else",
        "dependentSchemas",
        "dependentRequired",
        "dependencies",
        "patternProperties",
        "propertyNames",
        "minProperties",
        "maxProperties",
        "unevaluatedProperties",
        "unevaluatedItems",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "additionalItems",
        "multipleOf",
        "$dynamicRef",
        "$dynamicAnchor",
        "$recursiveRef",
        "$recursiveAnchor",
    }
)
_WHY: Final = {
    "oneOf": "oneOf (use anyOf: a grammar cannot make sure only one alternative matches)",
    "uniqueItems": "uniqueItems (a grammar cannot compare items)",
    "multipleOf": "multipleOf",
}
_BOUNDS: Final = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
# Keywords that make the converter write an object or an array rather than a string.
_NOT_STRING: Final = frozenset(
    {"properties", "additionalProperties", "items", "prefixItems", "minItems", "maxItems"}
)
_TYPES: Final = frozenset({"string", "number", "integer", "boolean", "null", "array", "object"})
# A character a JSON string may hold as it is: not a quote, a backslash or a control character. GBNF.
_JSON_CHAR: Final = '[^"\\\\\\x00-\\x1F\\x7F]'


class GrammarError(Exception):
    """A schema that cannot be made a grammar; the message says why."""


class _Unsupported(Exception):
    pass


def schema_problems(schema: object) -> list[str]:
    """What `schema` (a parsed JSON Schema) asks of a reply that its grammar would not enforce, each named
    with where it is (a JSON pointer); empty when the grammar holds the reply to all of it. Plain Python."""
    walk = _Walk(schema)
    return walk.problems


def schema_grammar(schema_json: str) -> str:
    """The GBNF grammar (root rule "root") of the JSON texts valid against the JSON Schema `schema_json`.

    Raises GrammarError when the schema is not JSON, asks what the grammar cannot enforce
    (schema_problems), or the converter fails on it. Imports llama_cpp: for the runner process.
    """
    try:
        schema = json.loads(schema_json)
    except ValueError as exc:
        raise GrammarError(f"The JSON schema is not valid JSON: {exc}") from exc
    walk = _Walk(schema)
    if walk.problems:
        raise GrammarError(unsupported_message(walk.problems))
    converter = _converter_class()(prop_order={}, allow_fetch=False, dotall=False, raw_pattern=False)
    # Resolved here, by the walk (with JSON pointer escapes), not by the converter, which walks enum and
    # const values for references too and fetches remote ones.
    converter._refs = walk.refs
    try:
        converter.visit(schema, "")
        grammar: str = converter.format_grammar()
    except Exception as exc:  # third-party code on a request's schema: any failure is the schema's
        raise GrammarError(f"The JSON schema cannot be made a grammar: {exc}") from exc
    if len(grammar) > MAX_GRAMMAR_CHARS:
        raise GrammarError(
            f"The JSON schema makes a grammar of {len(grammar):,} characters; at most "
            f"{MAX_GRAMMAR_CHARS:,} are taken."
        )
    return grammar


def unsupported_message(problems: list[str]) -> str:
    """schema_problems' list as one sentence for an error reply."""
    listed = "; ".join(problems[:_MAX_LISTED])
    more = f"; and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
    return f"The JSON schema asks for what this server cannot enforce with a grammar: {listed}{more}."


class _Walk:
    """Every subschema the converter would visit, once (references followed), checked: `problems` and
    `refs` (each local $ref as written, to the schema it points at)."""

    def __init__(self, root: object) -> None:
        self.problems: list[str] = []
        self.refs: dict[str, Any] = {}
        self._root = root
        self._seen = 0
        self._stopped = False
        if not isinstance(root, dict):
            self.problems.append("the schema must be a JSON object")
            return
        self._check(root, "#", 0)

    def _problem(self, what: str, where: str) -> None:
        self.problems.append(f"{what} at {where}")

    def _check(self, schema: object, where: str, depth: int) -> None:
        if self._stopped:
            return
        self._seen += 1
        if depth > MAX_DEPTH or self._seen > MAX_SUBSCHEMAS:
            limit = (
                f"more than {MAX_DEPTH} levels deep" if depth > MAX_DEPTH else f"{MAX_SUBSCHEMAS}+ schemas"
            )
            self._problem(f"a schema {limit}", where)
            self._stopped = True
            return
        if schema is True:
            return
        if not isinstance(schema, dict):
            what = "false (no value is valid)" if schema is False else "a schema that is not an object"
            self._problem(what, where)
            return
        if "$id" in schema and where != "#":
            self._problem("$id below the root", where)
        for keyword in sorted(_NEVER & schema.keys()):
            self._problem(_WHY.get(keyword, keyword), where)
        constraints = {k for k in schema if k in _CONVERTED}
        ref = schema.get("$ref")
        if ref is not None:
            self._beside(constraints, {"$ref"}, "$ref", where)
            self._follow(ref, where, depth)
            return
        if "anyOf" in schema:
            self._beside(constraints, {"anyOf"}, "anyOf", where)
            self._each(schema["anyOf"], f"{where}/anyOf", depth)
            return
        if "allOf" in schema:
            self._beside(constraints, {"allOf"}, "allOf", where)
            all_of = schema["allOf"]
            if not isinstance(all_of, list) or len(all_of) != 1:
                self._problem("allOf of more than one schema", where)
            else:
                self._check(all_of[0], f"{where}/allOf/0", depth + 1)
            return
        kind = schema.get("type")
        if isinstance(kind, list):
            self._beside(constraints, {"type"}, "a list of types", where)
            if not kind or not all(isinstance(k, str) and k in _TYPES for k in kind):
                self._problem("a type list that is not of JSON types", where)
            return
        if kind is not None and kind not in _TYPES:
            self._problem(f"type {json.dumps(kind)}", where)
            return
        if "const" in schema or "enum" in schema:
            self._beside(
                constraints, {"type", "const", "enum"}, "const" if "const" in schema else "enum", where
            )
            if "const" in schema and "enum" in schema:
                self._problem("const beside enum", where)
            enum = schema.get("enum", [None])
            if not isinstance(enum, list) or not enum or len(enum) > MAX_ENUM:
                self._problem(f"an enum that is not a list of 1 to {MAX_ENUM} values", where)
            return
        self._object(schema, kind, where, depth)
        self._array(schema, kind, where, depth)
        self._string(schema, kind, where)
        self._number(schema, kind, where)

    def _beside(self, constraints: set[str], allowed: set[str], keyword: str, where: str) -> None:
        # The converter takes the first of these it finds and never looks at the rest.
        ignored = sorted(constraints - allowed)
        if ignored:
            self._problem(f"{', '.join(ignored)} beside {keyword}", where)

    def _each(self, schemas: object, where: str, depth: int) -> None:
        if not isinstance(schemas, list) or not schemas:
            self._problem("a list of schemas that is empty or not a list", where)
            return
        for index, item in enumerate(schemas):
            self._check(item, f"{where}/{index}", depth + 1)

    def _follow(self, ref: object, where: str, depth: int) -> None:
        if not isinstance(ref, str) or not (ref == "#" or ref.startswith("#/")):
            self._problem(
                f"$ref {json.dumps(ref)} (only references into this schema, #/..., are followed)", where
            )
            return
        if ref in self.refs:
            return
        try:
            target = _pointer(self._root, ref)
        except LookupError:
            self._problem(f"$ref {json.dumps(ref)}, which points at nothing", where)
            return
        self.refs[ref] = target
        self._check(target, ref, depth + 1)

    def _object(self, schema: dict[str, Any], kind: str | None, where: str, depth: int) -> None:
        if kind not in (None, "object"):
            return
        properties = schema.get("properties", {})
        if not isinstance(properties, dict):
            self._problem("properties that are not an object", where)
            properties = {}
        for name, value in properties.items():
            self._check(value, f"{where}/properties/{_escape(name)}", depth + 1)
        required = schema.get("required", [])
        if not isinstance(required, list):
            self._problem("required that is not a list", where)
        else:
            missing = [name for name in required if name not in properties]
            if missing:
                # The converter writes only the properties listed; a required one it has no schema for
                # would never be written.
                names = ", ".join(json.dumps(name) for name in missing)
                self._problem(f"required names not in properties ({names})", where)
        additional = schema.get("additionalProperties")
        if properties and (additional is True or isinstance(additional, dict)):
            # Its keys are any string: the reply could give a listed property a second time, with a value
            # its own schema refuses, and the last one is the one a parser keeps.
            self._problem("additionalProperties beside properties (only false is enforced there)", where)
        if isinstance(additional, dict):
            self._check(additional, f"{where}/additionalProperties", depth + 1)
        elif additional is not None and not isinstance(additional, bool):
            self._problem("additionalProperties that is not a schema", where)

    def _array(self, schema: dict[str, Any], kind: str | None, where: str, depth: int) -> None:
        if kind not in (None, "array"):
            return
        items, prefix = schema.get("items"), schema.get("prefixItems")
        low, high = schema.get("minItems", 0), schema.get("maxItems")
        if not _is_count(low) or not (high is None or _is_count(high)):
            self._problem(f"minItems or maxItems that is not an integer from 0 to {MAX_REPEAT}", where)
            return
        if high is not None and low > high:
            self._problem("minItems above maxItems", where)
        # A list under items is the older spelling of prefixItems.
        tuple_items = prefix if isinstance(prefix, list) else items if isinstance(items, list) else None
        if tuple_items is not None:
            if prefix is not None and items not in (None, False):
                self._problem("items beside prefixItems", where)
            # The converter writes exactly the listed items.
            if low > len(tuple_items) or (high is not None and high < len(tuple_items)):
                self._problem("minItems or maxItems other than the number of prefixItems", where)
            where_items = f"{where}/prefixItems" if prefix is not None else f"{where}/items"
            self._each(tuple_items, where_items, depth)
            return
        if prefix is not None:
            self._problem("prefixItems that is not a list", where)
        if items is False:
            self._problem("items false (only the empty array)", where)
        elif items is not None:
            self._check(items, f"{where}/items", depth + 1)

    def _string(self, schema: dict[str, Any], kind: str | None, where: str) -> None:
        if kind not in (None, "string"):
            return
        lengths = [k for k in ("minLength", "maxLength") if k in schema]
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if lengths and (not _is_count(low) or not (high is None or _is_count(high))):
            self._problem(f"minLength or maxLength that is not an integer from 0 to {MAX_REPEAT}", where)
        elif high is not None and low > high:
            self._problem("minLength above maxLength", where)
        pattern, form = schema.get("pattern"), schema.get("format")
        if pattern is not None:
            for keyword in ("format", *lengths):
                if keyword in schema:
                    self._problem(f"{keyword} beside pattern", where)
            problem = _pattern_problem(pattern)
            if problem is not None:
                self._problem(problem, where)
        elif form is not None:
            if form not in FORMATS:
                self._problem(
                    f"format {json.dumps(form)} (formats enforced: {', '.join(sorted(FORMATS))})", where
                )
            for keyword in lengths:
                self._problem(f"{keyword} beside format", where)

    def _number(self, schema: dict[str, Any], kind: str | None, where: str) -> None:
        bounds = [k for k in _BOUNDS if k in schema]
        if not bounds:
            return
        if kind != "integer":
            if kind in (None, "number"):
                self._problem(
                    f"{', '.join(bounds)} on a number (ranges are enforced on integers only)", where
                )
            return
        if not all(_is_number(schema[k]) for k in bounds):
            self._problem(f"{', '.join(bounds)} that is not a number", where)
            return
        low, high = integer_bounds(schema)
        if low > high:
            self._problem(
                "an integer range with no integer in it (the grammar writes at most "
                f"{len(str(INTEGER_LIMIT))} digits)",
                where,
            )


def _is_count(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_REPEAT


def _is_number(value: object) -> bool:
    # JSON true and false arrive as bool, which Python counts as a number; draft 4's boolean
    # exclusiveMinimum is refused this way too.
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _escape(name: str) -> str:
    return name.replace("~", "~0").replace("/", "~1")


def _pointer(root: object, ref: str) -> object:
    """What a local reference (`#` or `#/a/b`, a JSON pointer in a URI fragment) points at in `root`."""
    target = root
    for part in ref[2:].split("/") if ref != "#" else []:
        key = unquote(part).replace("~1", "/").replace("~0", "~")
        if isinstance(target, dict):
            target = target[key]
        elif isinstance(target, list) and key.isdigit():
            target = target[int(key)]
        else:
            raise LookupError(ref)
    return target


def integer_bounds(schema: dict[str, Any]) -> tuple[int, int]:
    """The least and greatest integer `schema`'s minimum, maximum and exclusive bounds allow, within the
    16 digits the grammar writes."""
    low, high = -INTEGER_LIMIT, INTEGER_LIMIT
    if "minimum" in schema:
        low = max(low, math.ceil(schema["minimum"]))
    if "exclusiveMinimum" in schema:
        low = max(low, math.floor(schema["exclusiveMinimum"]) + 1)
    if "maximum" in schema:
        high = min(high, math.floor(schema["maximum"]))
    if "exclusiveMaximum" in schema:
        high = min(high, math.ceil(schema["exclusiveMaximum"]) - 1)
    return low, high


def integer_range(low: int, high: int) -> str:
    """A GBNF expression for exactly the integers from `low` to `high` in JSON's spelling (no leading zeros,
    no -0), digit by digit: one alternative per digit count and per differing leading digit, never one per
    number (the grammar follows every open alternative with every candidate token)."""
    assert low <= high
    parts = []
    if low < 0:
        parts.append(f'"-" ({_natural_range(max(1, -high), -low)})')
    if high >= 0:
        parts.append(_natural_range(max(0, low), high))
    return " | ".join(parts)


def _natural_range(low: int, high: int) -> str:
    parts = []
    for digits in range(len(str(low)), len(str(high)) + 1):
        start = max(low, 10 ** (digits - 1) if digits > 1 else 0)
        end = min(high, 10**digits - 1)
        parts.append(_same_length_range(str(start), str(end)))
    return " | ".join(parts)


def _same_length_range(low: str, high: str) -> str:
    """The digit strings from `low` to `high`, both of the same length."""
    if low == high:
        return f'"{low}"'
    common = 0
    while low[common] == high[common]:
        common += 1
    prefix = f'"{low[:common]}" ' if common else ""
    first, last = low[common], high[common]
    rest = len(low) - common - 1
    if rest == 0:
        return f"{prefix}[{first}-{last}]"
    low_rest, high_rest = low[common + 1 :], high[common + 1 :]
    if low_rest == "0" * rest and high_rest == "9" * rest:
        return f"{prefix}[{first}-{last}] {_digits(rest)}"
    alternatives = [f'"{first}" ({_same_length_range(low_rest, "9" * rest)})']
    if ord(last) - ord(first) > 1:
        alternatives.append(f"[{chr(ord(first) + 1)}-{chr(ord(last) - 1)}] {_digits(rest)}")
    alternatives.append(f'"{last}" ({_same_length_range("0" * rest, high_rest)})')
    return f"{prefix}({' | '.join(alternatives)})"


def _digits(count: int) -> str:
    return "[0-9]" if count == 1 else f"[0-9]{{{count}}}"


# --- patterns ---------------------------------------------------------------------------------------------

# Outside a character class: an escape the converter turns into its plain character, and the ones it would
# pass to GBNF as they are (which rejects them), spelled so that it need not.
_CONVERTER_ESCAPES: Final = frozenset("[]()|{}*+?")
_PATTERN_ESCAPES: Final = {
    ".": "[.]",
    "^": "^",
    "$": "$",
    "/": "/",
    "-": "-",
    "d": "[0-9]",
    "w": "[a-zA-Z0-9_]",
}
_CLASS_ESCAPES: Final = {
    "]": "\\]",
    "[": "\\[",
    "-": "\\-",
    ".": ".",
    "/": "/",
    "$": "$",
    "d": "0-9",
    "w": "a-zA-Z0-9_",
}
# Characters a JSON string cannot hold as they are: a class that could give one would let the reply break out
# of its string.
_UNSAFE: Final = ((0x00, 0x1F), (0x22, 0x22), (0x5C, 0x5C), (0x7F, 0x7F))
_QUANTIFIER: Final = re.compile(r"\{(\d*)(,?)(\d*)\}")


def _pattern_problem(pattern: object) -> str | None:
    if not isinstance(pattern, str):
        return "a pattern that is not a string"
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError):
        return f"pattern {json.dumps(pattern)}, which is not a regular expression"
    try:
        _pattern_for_grammar(pattern)
    except _Unsupported as exc:
        return f"{exc} in pattern {json.dumps(pattern)}"
    return None


def _pattern_for_grammar(pattern: str) -> str:
    """`pattern` as the converter takes it, matching only strings a JSON string can hold as they are (a `.`
    never gives a quote, a backslash or a control character). Raises _Unsupported naming what it cannot do."""
    if len(pattern) < 2 or not pattern.startswith("^") or not _ends_anchored(pattern):
        raise _Unsupported("no ^ at the start and $ at the end (a pattern must match the whole string)")
    inner = pattern[1:-1]
    out: list[str] = []
    i = 0
    while i < len(inner):
        c = inner[i]
        if c == "\\":
            escaped = inner[i + 1]
            if escaped in _CONVERTER_ESCAPES:
                out.append(c + escaped)
            elif escaped in _PATTERN_ESCAPES:
                out.append(_PATTERN_ESCAPES[escaped])
            else:
                raise _Unsupported(f"the escape \\{escaped}")
            i += 2
            continue
        if c == "[":
            i = _class(inner, i, out)
            continue
        if c == "{":
            match = _QUANTIFIER.match(inner, i)
            if match is None:
                raise _Unsupported("a { that is not a {n,m} repetition")
            if any(n and int(n) > MAX_REPEAT for n in (match.group(1), match.group(3))):
                raise _Unsupported(f"a repetition over {MAX_REPEAT}")
            if not match.group(2) and not match.group(1):
                raise _Unsupported("a {} repetition")
            out.append(match.group())
            i = match.end()
            continue
        if c == ".":
            out.append(_JSON_CHAR)
        elif c == "(" and inner.startswith("(?", i):
            raise _Unsupported("a (?...) group (lookaround, non-capturing or named)")
        elif c in "^$":
            raise _Unsupported(f"{c} inside the pattern")
        elif c in "]}":
            # The converter would loop forever on it.
            raise _Unsupported(f"a {c} not escaped")
        elif _unsafe(ord(c), ord(c)):
            raise _Unsupported("a quote, backslash or control character")
        else:
            out.append(c)
        i += 1
    # Grouped, or alternatives at the top level would take the string's quotes with them.
    return "^(" + "".join(out) + ")$"


def _ends_anchored(pattern: str) -> bool:
    backslashes = len(pattern) - 1 - len(pattern[:-1].rstrip("\\"))
    return pattern.endswith("$") and backslashes % 2 == 0


def _class(inner: str, start: int, out: list[str]) -> int:
    """The character class at `start`, rewritten into `out`; returns where it ends."""
    i = start + 1
    negated = inner.startswith("^", i)
    if negated:
        i += 1
    body: list[str] = []
    chars: list[int] = []  # the class's single characters and ranges' ends, in order, for the check
    ranges: list[tuple[int, int]] = []
    while True:
        if i >= len(inner):
            raise _Unsupported("an unclosed [")
        c = inner[i]
        if c == "]":
            break
        if c == "\\":
            escaped = inner[i + 1] if i + 1 < len(inner) else ""
            if escaped not in _CLASS_ESCAPES:
                raise _Unsupported(f"the escape \\{escaped} in a [...] class")
            body.append(_CLASS_ESCAPES[escaped])
            if escaped in "dw":
                ranges.extend(
                    [(0x30, 0x39)] if escaped == "d" else [(0x30, 0x39), (0x41, 0x5A), (0x61, 0x7A)]
                )
            else:
                chars.append(ord(escaped))
            i += 2
            continue
        if inner.startswith("-", i + 1) and i + 2 < len(inner) and inner[i + 2] not in "]\\":
            low, high = ord(c), ord(inner[i + 2])
            ranges.append((low, high))
            body.append(f"{_class_char(c)}-{_class_char(inner[i + 2])}")
            i += 3
            continue
        chars.append(ord(c))
        body.append(_class_char(c))
        i += 1
    if not body:
        raise _Unsupported("an empty [] class")
    ranges.extend((code, code) for code in chars)
    if negated:
        # Whatever else it leaves out, it leaves out what a JSON string cannot hold as it is.
        out.append("[^" + "".join(body) + '"\\\\\\x00-\\x1F\\x7F]')
    elif any(_unsafe(low, high) for low, high in ranges):
        raise _Unsupported("a [...] class that holds a quote, a backslash or a control character")
    else:
        out.append("[" + "".join(body) + "]")
    return i + 1


def _class_char(c: str) -> str:
    return "\\" + c if c in "]-[" else c


def _unsafe(low: int, high: int) -> bool:
    return any(low <= end and start <= high for start, end in _UNSAFE)


# --- the converter ---------------------------------------------------------------------------------------


@functools.cache
def _converter_class() -> type[Any]:
    """llama-cpp-python's SchemaConverter with the corrections the module's docstring lists. Made on first
    use: its module comes with llama_cpp, which loads the native library."""
    from llama_cpp import llama_grammar

    base: Any = llama_grammar.SchemaConverter
    primitives: dict[str, Any] = llama_grammar.PRIMITIVE_RULES
    reserved: set[str] = llama_grammar.RESERVED_NAMES
    # llama.cpp's newer converter's: no raw control characters (nor DEL) in a string.
    safe_char = llama_grammar.BuiltinRule(
        r'[^"\\\x7F\x00-\x1F] | [\\] (["\\/bfnrt] | "u" [0-9a-fA-F]{4})', []
    )

    class _Converter(base):  # type: ignore[misc]
        def __init__(self, **options: Any) -> None:
            super().__init__(**options)
            self._ref_rules: dict[str, str] = {}

        def visit(self, schema: Any, name: str) -> str:
            rule_name = name + "-" if name in reserved else name or "root"
            if schema is True:
                schema = {}
            schema = {k: v for k, v in schema.items() if k in _CONVERTED}
            if not schema:
                # Any value: the converter's own reading of {} is any object.
                return str(
                    self._add_primitive("root" if rule_name == "root" else "value", primitives["value"])
                )
            all_of = schema.get("allOf")
            if isinstance(all_of, list) and len(all_of) == 1:
                return self.visit(all_of[0], name)
            kind = schema.get("type")
            if (
                kind is None
                and ("minLength" in schema or "maxLength" in schema)
                and not schema.keys() & _NOT_STRING
            ):
                schema["type"] = "string"  # the converter applies lengths to type "string" only
            if (
                kind in (None, "array")
                and "items" not in schema
                and "prefixItems" not in schema
                and ("minItems" in schema or "maxItems" in schema)
            ):
                schema["items"] = True  # else the converter's plain array, without its bounds
            if schema.get("items") == {}:
                schema["items"] = True  # the converter takes an empty items for none, and fails
            if (
                kind == "integer"
                and any(k in schema for k in _BOUNDS)
                and not schema.keys() & {"$ref", "anyOf", "const", "enum"}
            ):
                low, high = integer_bounds(schema)
                return str(self._add_rule(rule_name, f"({integer_range(low, high)}) space"))
            return str(super().visit(schema, name))

        def _resolve_ref(self, ref: str) -> str:
            # A rule name of its own for each reference, reserved before its schema is visited (a recursive
            # reference meets it then), and never one made for something else.
            rule = self._ref_rules.get(ref)
            if rule is None:
                rule = str(self._add_rule("ref", f"<reference {ref}>"))
                self._ref_rules[ref] = rule
                self._rules[rule] = self.visit(self._refs[ref], f"{rule}-value")
            return rule

        def _add_primitive(self, name: str, rule: Any) -> str:
            return str(super()._add_primitive(name, safe_char if name == "char" else rule))

        def _format_literal(self, literal: str) -> str:
            escaped = (
                literal.replace("\\", "\\\\").replace('"', '\\"').replace("\r", "\\r").replace("\n", "\\n")
            )
            return f'"{escaped}"'

        def _visit_pattern(self, pattern: str, name: str) -> str:
            try:
                rewritten = _pattern_for_grammar(pattern)
            except _Unsupported as exc:
                raise ValueError(f"{exc} in pattern {pattern!r}") from exc
            return str(super()._visit_pattern(rewritten, name))

    return _Converter
