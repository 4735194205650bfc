"""A tiny, safe writer (and reader) for protobuf text format, as used by Triton's config.pbtxt.

Why not string templates: every value that reaches a config.pbtxt goes through
`quote()` (strings), `Ident` (enum identifiers, validated) or int/float/bool
formatting, so no value can break out of its literal and inject fields.

The reader (`parse`) is deliberately small: it understands the subset of text
format that Triton configs use (messages, repeated fields written as `[ ... ]`,
strings, numbers, identifiers, `#` comments). It is used by the batching-rule
checker in `render.triton` and by the tests to round-trip what we write.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Ident",
    "Message",
    "msg",
    "quote",
    "unquote",
    "to_pbtxt",
    "parse",
    "ParseError",
]

_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_IDENT = re.compile(r"^[A-Z_][A-Z0-9_]*$")


class Ident(str):
    """An enum identifier written bare (e.g. TYPE_INT32, KIND_CPU). Validated on creation."""

    def __new__(cls, value: str) -> Ident:
        if not _IDENT.fullmatch(value):
            raise ValueError(f"not a protobuf enum identifier: {value!r}")
        return super().__new__(cls, value)


Scalar = str | int | float | bool | Ident


@dataclass(frozen=True)
class Message:
    """An ordered list of (field name, value); repeated keys are allowed (e.g. `parameters`)."""

    fields: tuple[tuple[str, Any], ...]


def msg(*fields: tuple[str, Any]) -> Message:
    for name, _ in fields:
        if not _FIELD_NAME.fullmatch(name):
            raise ValueError(f"invalid field name {name!r}")
    return Message(tuple(fields))


# ---- writing ----


def quote(value: str) -> str:
    """A protobuf text-format string literal for `value`; the output is pure printable ASCII.

    Backslash and both quote characters are escaped, \\n \\r \\t use their short
    escapes, every other byte outside printable ASCII (control characters, DEL,
    UTF-8 bytes of non-ASCII text) becomes a 3-digit octal escape. Strings that
    are not valid Unicode (lone surrogates) raise ValueError.
    """
    if not isinstance(value, str):
        raise TypeError(f"quote() takes str, not {type(value).__name__}")
    out = ['"']
    for byte in value.encode("utf-8"):  # UnicodeEncodeError is a ValueError
        ch = chr(byte)
        if ch == "\\":
            out.append("\\\\")
        elif ch == '"':
            out.append('\\"')
        elif ch == "'":
            out.append("\\'")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif 0x20 <= byte < 0x7F:
            out.append(ch)
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)


def _scalar(value: Any) -> str:
    if isinstance(value, Ident):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("non-finite float in config")
        return repr(value)
    if isinstance(value, str):
        return quote(value)
    raise TypeError(f"unsupported pbtxt value type {type(value).__name__}")


def _render_fields(message: Message, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    for name, value in message.fields:
        if isinstance(value, Message):
            out.append(f"{pad}{name} {{")
            _render_fields(value, indent + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(value, (list, tuple)):
            if value and all(isinstance(v, Message) for v in value):
                out.append(f"{pad}{name} [")
                for i, item in enumerate(value):
                    out.append(f"{pad}  {{")
                    _render_fields(item, indent + 2, out)
                    out.append(f"{pad}  }}" + ("," if i < len(value) - 1 else ""))
                out.append(f"{pad}]")
            elif any(isinstance(v, Message) for v in value):
                raise TypeError(f"field {name!r} mixes messages and scalars")
            else:
                inner = ", ".join(_scalar(v) for v in value)
                out.append(f"{pad}{name}: [ {inner} ]" if inner else f"{pad}{name}: [ ]")
        else:
            out.append(f"{pad}{name}: {_scalar(value)}")


def to_pbtxt(message: Message, header: str | None = None) -> str:
    """Render a top-level message; `header` lines become `#` comments (newlines are split, never injected)."""
    out: list[str] = []
    if header:
        for line in header.splitlines():
            out.append(f"# {line}".rstrip())
        out.append("")
    _render_fields(message, 0, out)
    return "\n".join(out) + "\n"


# ---- reading ----


class ParseError(ValueError):
    pass


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+|\#[^\n]*)
  | (?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
  | (?P<punct>[{}\[\]<>:,;])
  | (?P<word>[A-Za-z0-9_.+\-]+)
    """,
    re.VERBOSE | re.DOTALL,
)

_SIMPLE_ESCAPES = {
    "n": 0x0A, "t": 0x09, "r": 0x0D, "a": 0x07, "b": 0x08, "f": 0x0C, "v": 0x0B,
    "\\": 0x5C, "'": 0x27, '"': 0x22, "?": 0x3F,
}


def unquote(literal: str) -> str:
    """Decode one protobuf text-format string literal (with its quotes) to str."""
    if len(literal) < 2 or literal[0] not in "\"'" or literal[-1] != literal[0]:
        raise ParseError(f"not a string literal: {literal!r}")
    body = literal[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != "\\":
            if ch == literal[0] or ch == "\n":
                raise ParseError("unescaped quote or newline inside string literal")
            out += ch.encode("utf-8")
            i += 1
            continue
        i += 1
        if i >= len(body):
            raise ParseError("dangling backslash")
        esc = body[i]
        if esc in _SIMPLE_ESCAPES:
            out.append(_SIMPLE_ESCAPES[esc])
            i += 1
        elif esc in "01234567":
            j = i
            while j < len(body) and j < i + 3 and body[j] in "01234567":
                j += 1
            out.append(int(body[i:j], 8) & 0xFF)
            i = j
        elif esc in "xX":
            j = i + 1
            while j < len(body) and j < i + 3 and body[j] in "0123456789abcdefABCDEF":
                j += 1
            if j == i + 1:
                raise ParseError("\\x without hex digits")
            out.append(int(body[i + 1 : j], 16))
            i = j
        else:
            raise ParseError(f"unknown escape \\{esc}")
    try:
        return out.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ParseError(f"string literal is not UTF-8: {exc}") from None


def _tokenize(text: str) -> list[tuple[str, str]]:
    tokens: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ParseError(f"unexpected character {text[pos]!r} at offset {pos}")
        pos = m.end()
        kind = m.lastgroup
        assert kind is not None  # every alternative of _TOKEN is a named group
        if kind != "ws":
            tokens.append((kind, m.group()))
    return tokens


def _word_value(word: str) -> Any:
    low = word.lower()
    if low in ("true", "t"):
        return True
    if low in ("false", "f"):
        return False
    try:
        return int(word, 0) if not re.match(r"^-?0\d", word) else int(word, 8)
    except ValueError:
        pass
    try:
        return float(word)
    except ValueError:
        pass
    if re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", word):
        return Ident(word) if _IDENT.fullmatch(word) else word
    raise ParseError(f"bad token {word!r}")


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokenize(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def next_kind(self) -> str | None:
        tok = self.peek()
        return tok[0] if tok else None

    def next_value(self) -> str | None:
        tok = self.peek()
        return tok[1] if tok else None

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        if tok is None:
            raise ParseError("unexpected end of input")
        self.i += 1
        return tok

    def expect(self, value: str) -> None:
        kind, tok = self.take()
        if tok != value:
            raise ParseError(f"expected {value!r}, got {tok!r}")

    def message(self, close: str | None) -> dict[str, list[Any]]:
        fields: dict[str, list[Any]] = {}
        while True:
            tok = self.peek()
            if tok is None:
                if close is not None:
                    raise ParseError(f"missing {close!r}")
                return fields
            if tok[1] == close:
                self.i += 1
                return fields
            kind, name = self.take()
            if kind != "word" or not _FIELD_NAME.fullmatch(name):
                raise ParseError(f"expected a field name, got {name!r}")
            has_colon = False
            if self.next_value() == ":":
                self.i += 1
                has_colon = True
            nxt = self.peek()
            if nxt is None:
                raise ParseError(f"field {name!r} has no value")
            if nxt[1] == "[":
                self.i += 1
                fields.setdefault(name, []).extend(self.list_values())
            elif nxt[1] in ("{", "<"):
                self.i += 1
                fields.setdefault(name, []).append(self.message("}" if nxt[1] == "{" else ">"))
            elif has_colon:
                fields.setdefault(name, []).append(self.scalar())
            else:
                raise ParseError(f"field {name!r}: expected ':' before a scalar")
            if self.next_value() in (",", ";"):
                self.i += 1

    def list_values(self) -> list[Any]:
        values: list[Any] = []
        if self.next_value() == "]":
            self.i += 1
            return values
        while True:
            tok = self.peek()
            if tok is None:
                raise ParseError("unterminated list")
            if tok[1] in ("{", "<"):
                self.i += 1
                values.append(self.message("}" if tok[1] == "{" else ">"))
            else:
                values.append(self.scalar())
            kind, sep = self.take()
            if sep == "]":
                return values
            if sep != ",":
                raise ParseError(f"expected ',' or ']' in list, got {sep!r}")

    def scalar(self) -> Any:
        kind, tok = self.take()
        if kind == "str":
            # adjacent string literals concatenate, as in protobuf
            parts = [unquote(tok)]
            while self.next_kind() == "str":
                parts.append(unquote(self.take()[1]))
            return "".join(parts)
        if kind == "word":
            return _word_value(tok)
        raise ParseError(f"expected a value, got {tok!r}")


def parse(text: str) -> dict[str, list[Any]]:
    """Parse text format into {field: [values...]}; nested messages are dicts of the same shape.

    Strings come back as str, bare enum identifiers as Ident, numbers as int/float, true/false as bool.
    """
    return _Parser(text).message(None)
