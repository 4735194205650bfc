"""PromQL the operator writes: label values quoted safely, and the admin's named query templates filled in.

No query a tenant writes is run on a Prometheus (docs/security.md, "Queries on a shared Prometheus"): the ratio
query is built from the backend's own pods (render/hpa.default_query), and the activation query is a template the
admin named (`--prometheus-query NAME=TEMPLATE`) whose placeholders the operator fills with the backend's
namespace and name, each inside a double-quoted PromQL string and escaped there.
"""

from __future__ import annotations

import json
import re

PLACEHOLDERS = ("{namespace}", "{backend}")
_PLACEHOLDER = re.compile(r"\{(namespace|backend)\}")


def string(value: str) -> str:
    """`value` as the inside of a double-quoted PromQL string: backslashes, quotes, newlines and every other
    character that is not printable escaped. PromQL reads Go's escapes (\\\\, \\", \\n, \\uXXXX, \\UXXXXXXXX ...), a
    superset of JSON's; printable non-ASCII characters stay literal (PromQL refuses the surrogate pairs JSON would
    write for them)."""
    return "".join(c if c.isprintable() else _escape(c) for c in json.dumps(value, ensure_ascii=False)[1:-1])


def _escape(c: str) -> str:
    return f"\\u{ord(c):04x}" if ord(c) <= 0xFFFF else f"\\U{ord(c):08x}"


def template_error(template: str) -> str | None:
    """Why `template` cannot be filled safely, or None: every placeholder must sit inside a double-quoted string
    (a label matcher's value), where string() keeps the value from closing the string."""
    in_string = escaped = False
    i = 0
    while i < len(template):
        c = template[i]
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "'`":
            return f"use double quotes around placeholders, not {c} (at {i})"
        match = _PLACEHOLDER.match(template, i)
        if match and not in_string:
            return f"placeholder {match.group(0)} at {i} is outside a double-quoted string"
        i += 1
    if in_string:
        return "unterminated double-quoted string"
    return None


def fill(template: str, namespace: str, backend: str) -> str:
    """The template with {namespace} and {backend} replaced by the escaped values (nothing else is read as a
    placeholder: PromQL's own braces stay)."""
    values = {"namespace": string(namespace), "backend": string(backend)}
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)
