"""CPU stand-in for the part of xgrammar (the grammar backend both pinned engines use for JSON schemas) that the
serving models and the engine stand-ins reach: `Grammar.from_json_schema`, which converts a JSON schema into a
grammar or raises when it cannot; and, for the stand-in engines only, `_accepted_text`: a text the grammar accepts,
which is what a model decoding under the grammar's token mask emits (tests only; not xgrammar's code).

What it refuses, as xgrammar's converter does (python/xgrammar/grammar.py `Grammar.from_json_schema` ->
cpp/json_schema_converter.cc, which raises on what it cannot translate): a schema that is not an object or a boolean,
a `type` that JSON Schema does not have, and a `$ref` that does not resolve inside the schema. Where the real
converter accepts more than this (or less), the stand-in is the lenient one: it never refuses a schema that
xgrammar compiles.

The accepted text: the schema's first alternative everywhere (`anyOf`/`oneOf`/`enum`/type lists), every declared
property in order, at least one array item, strings made of the "model's" words (the prompt's, as the engine
stand-ins answer) within minLength/maxLength, numbers at their lower bound. Compact JSON with ", " and ": ", as
xgrammar's default separators for a schema without indent.
"""

from __future__ import annotations

import json
import re
from typing import Any

__version__ = "0.1.29+cpu-standin"

_TYPES = {"object", "array", "string", "integer", "number", "boolean", "null"}


class Grammar:
    def __init__(self, schema: Any) -> None:
        self.schema = schema

    @staticmethod
    def from_json_schema(schema: str | dict[str, Any] | bool, **_options: Any) -> Grammar:
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as exc:
                raise RuntimeError(f"Failed to parse JSON schema: {exc}") from None
        _check(schema, schema, "#")
        return Grammar(schema)

    @staticmethod
    def builtin_json_grammar() -> Grammar:
        return Grammar({"type": "object"})


def _check(node: Any, root: Any, where: str) -> None:
    if isinstance(node, bool):
        return
    if not isinstance(node, dict):
        raise RuntimeError(f"Schema at {where} should be an object or bool, got {type(node).__name__}")
    types = node.get("type")
    for name in types if isinstance(types, list) else [types] if types is not None else []:
        if name not in _TYPES:
            raise RuntimeError(f"Unsupported type \"{name}\" at {where}")
    if "$ref" in node:
        _resolve(root, node["$ref"], where)
    for key in ("properties", "$defs", "definitions", "patternProperties"):
        for name, sub in (node.get(key) or {}).items():
            _check(sub, root, f"{where}/{key}/{name}")
    for key in ("items", "additionalProperties", "not", "contains"):
        if isinstance(node.get(key), (dict, bool)):
            _check(node[key], root, f"{where}/{key}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or []):
            _check(sub, root, f"{where}/{key}/{i}")


def _resolve(root: Any, ref: Any, where: str) -> Any:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise RuntimeError(f"Only local $ref is supported, got {ref!r} at {where}")
    node = root
    for part in [p for p in ref[1:].split("/") if p]:
        if not isinstance(node, dict) or part not in node:
            raise RuntimeError(f"Cannot find the $ref {ref} from {where}")
        node = node[part]
    return node


def _accepted_text(schema: Any, words: list[str]) -> str:
    """A JSON text the schema's grammar accepts (None: any JSON object, as the builtin JSON grammar)."""
    words = [w for w in words if w] or ["text"]
    counter = iter(range(1 << 30))

    def word() -> str:
        return words[next(counter) % len(words)]

    def value(node: Any, depth: int) -> Any:
        if node is True or node is None or node == {}:
            return word()
        if node is False:
            return None
        if "$ref" in node:
            return value(_resolve(schema, node["$ref"], "#"), depth + 1)
        if "const" in node:
            return node["const"]
        if node.get("enum"):
            return node["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            if node.get(key):
                return value(node[key][0], depth + 1)
        kind = node.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind is None:
            kind = "object" if "properties" in node else "array" if "items" in node else "string"
        if depth > 64:
            raise RecursionError("the schema has no finite instance the stand-in can find")
        if kind == "object":
            properties = node.get("properties") or {}
            if depth > 8:  # deep (a recursive schema): the required properties only, so that the text ends
                properties = {k: v for k, v in properties.items() if k in (node.get("required") or [])}
            return {name: value(sub, depth + 1) for name, sub in properties.items()}
        if kind == "array":
            count = int(node.get("minItems", 0 if depth > 8 else 1))
            count = min(count, int(node.get("maxItems", count)))
            return [value(node.get("items", {}), depth + 1) for _ in range(count)]
        if kind == "string":
            text = word()
            low, high = int(node.get("minLength", 0)), node.get("maxLength")
            while len(text) < low:
                text += " " + word()
            return text[: int(high)] if high is not None else text
        if kind in ("integer", "number"):
            low = node.get("minimum", node.get("exclusiveMinimum", 0) + (1 if "exclusiveMinimum" in node else 0))
            number = max(low, 0) if "maximum" not in node else min(max(low, 0), node["maximum"])
            return int(number) if kind == "integer" else float(number)
        if kind == "boolean":
            return True
        return None

    if schema is None:
        return json.dumps({"answer": " ".join(words[:3])})
    return json.dumps(value(schema, 0), separators=(", ", ": "), ensure_ascii=False)


# A "token" of the stand-in engines' guided output: a JSON punctuation mark, a quoted string piece, or a word.
_PIECE = re.compile(r'\s+|[{}\[\]:,]|"(?:[^"\\]|\\.)*"|[^\s{}\[\]:,"]+')


def _pieces(text: str) -> list[str]:
    return _PIECE.findall(text)
