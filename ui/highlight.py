"""Syntax highlighting for fenced code blocks: which spans of the code get which colour.

Pygments does the lexing. Lexers are imported by name rather than looked up through Pygments' plugin
registry so a frozen build (PyInstaller follows imports) ships exactly these and nothing is resolved at
run time from a string a model wrote.
"""

from __future__ import annotations

from collections.abc import Callable

from pygments.lexer import Lexer
from pygments.lexers.c_cpp import CLexer, CppLexer
from pygments.lexers.configs import IniLexer, TOMLLexer
from pygments.lexers.css import CssLexer
from pygments.lexers.data import JsonLexer, YamlLexer
from pygments.lexers.diff import DiffLexer
from pygments.lexers.go import GoLexer
from pygments.lexers.html import HtmlLexer, XmlLexer
from pygments.lexers.javascript import JavascriptLexer, TypeScriptLexer
from pygments.lexers.jvm import JavaLexer, KotlinLexer
from pygments.lexers.python import PythonLexer
from pygments.lexers.rust import RustLexer
from pygments.lexers.shell import BashLexer, BashSessionLexer, PowerShellLexer
from pygments.lexers.sql import SqlLexer
from pygments.token import Comment, Keyword, Name, Number, Operator, String, _TokenType, is_token_subtype
from pygments.token import Generic as GenericToken

# Longer code is shown in monospace without colours: lexing is pure Python on the GUI thread, and a
# model can write pathological input for a regex-based lexer.
MAX_HIGHLIGHT_CHARS = 20_000

_LEXERS: dict[str, Callable[[], Lexer]] = {
    "python": PythonLexer,
    "py": PythonLexer,
    "python3": PythonLexer,
    "javascript": JavascriptLexer,
    "js": JavascriptLexer,
    "jsx": JavascriptLexer,
    "mjs": JavascriptLexer,
    "typescript": TypeScriptLexer,
    "ts": TypeScriptLexer,
    "tsx": TypeScriptLexer,
    "c": CLexer,
    "h": CLexer,
    "cpp": CppLexer,
    "c++": CppLexer,
    "cxx": CppLexer,
    "hpp": CppLexer,
    "cc": CppLexer,
    "rust": RustLexer,
    "rs": RustLexer,
    "go": GoLexer,
    "golang": GoLexer,
    "bash": BashLexer,
    "sh": BashLexer,
    "shell": BashLexer,
    "zsh": BashLexer,
    "console": BashSessionLexer,
    "shell-session": BashSessionLexer,
    "powershell": PowerShellLexer,
    "ps1": PowerShellLexer,
    "json": JsonLexer,
    "jsonc": JsonLexer,
    "yaml": YamlLexer,
    "yml": YamlLexer,
    "toml": TOMLLexer,
    "ini": IniLexer,
    "html": HtmlLexer,
    "xml": XmlLexer,
    "css": CssLexer,
    "sql": SqlLexer,
    "java": JavaLexer,
    "kotlin": KotlinLexer,
    "diff": DiffLexer,
    "patch": DiffLexer,
}

# Most specific first: Keyword.Type is a type before it is a keyword.
_FAMILIES: tuple[tuple[_TokenType, str], ...] = (
    (Comment, "syn_comment"),
    (String.Doc, "syn_comment"),
    (String, "syn_string"),
    (Number, "syn_number"),
    (Keyword.Type, "syn_type"),
    (Keyword.Constant, "syn_builtin"),
    (Keyword, "syn_keyword"),
    (Operator.Word, "syn_keyword"),
    (Operator, "syn_operator"),
    (Name.Builtin, "syn_builtin"),
    (Name.Function, "syn_function"),
    (Name.Decorator, "syn_function"),
    (Name.Class, "syn_type"),
    (Name.Namespace, "syn_type"),
    (Name.Tag, "syn_keyword"),
    (Name.Attribute, "syn_function"),
    (GenericToken.Inserted, "syn_string"),
    (GenericToken.Deleted, "syn_number"),
    (GenericToken.Heading, "syn_keyword"),
    (GenericToken.Subheading, "syn_keyword"),
    (GenericToken.Prompt, "syn_comment"),
)

_instances: dict[Callable[[], Lexer], Lexer] = {}
_family_cache: dict[_TokenType, str | None] = {}


def language_of(info_string: str) -> str:
    """The language named by a fence's info string ("```py title=x" → "py")."""
    words = info_string.strip().split()
    return words[0].lower().lstrip(".{") if words else ""


def _lexer(language: str) -> Lexer | None:
    factory = _LEXERS.get(language.lower())
    if factory is None:
        return None
    lexer = _instances.get(factory)
    if lexer is None:
        lexer = _instances[factory] = factory()
    return lexer


def warm_up() -> None:
    """Build every lexer once. Pygments compiles a lexer's regular expressions on first use (~10 ms
    each); doing it ahead, off the GUI thread, keeps that out of the first code block of a reply."""
    for language in _LEXERS:
        _lexer(language)


def _family(token: _TokenType) -> str | None:
    if token in _family_cache:
        return _family_cache[token]
    found = next((colour for parent, colour in _FAMILIES if is_token_subtype(token, parent)), None)
    _family_cache[token] = found
    return found


def highlight_spans(code: str, language: str) -> list[tuple[int, int, str]]:
    """(start, length, Theme colour attribute) for each coloured run of `code`; adjacent runs of one colour
    are merged so applying them costs one format change per run, not per token."""
    lexer = _lexer(language)
    if lexer is None or not code or len(code) > MAX_HIGHLIGHT_CHARS:
        return []
    spans: list[tuple[int, int, str]] = []
    # Several lexers end comments and strings at a newline; Pygments adds one in get_tokens, so do the same.
    for index, token, value in lexer.get_tokens_unprocessed(code if code.endswith("\n") else code + "\n"):
        value = value[: max(0, len(code) - index)]
        colour = _family(token)
        if colour is None or not value.strip():
            continue
        if spans and spans[-1][2] == colour and spans[-1][0] + spans[-1][1] == index:
            start, length, _ = spans[-1]
            spans[-1] = (start, length + len(value), colour)
        else:
            spans.append((index, len(value), colour))
    return spans
