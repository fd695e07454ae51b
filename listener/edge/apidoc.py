"""docs/api.md, rendered from the OpenAPI document (``listener.edge.openapi``).

    .venv/bin/python -m listener.edge.apidoc > docs/api.md

A test checks that docs/api.md is up to date. Its last section, "Reading the records" (the
read contract of the stored records), is static text (``listener.edge.readdoc``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from listener.edge import openapi, readdoc


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{name.lower()})"
    if "const" in schema:
        return f"`{json.dumps(schema['const'])}`"
    if "enum" in schema:
        return " \\| ".join(f"`{json.dumps(v)}`" for v in schema["enum"])
    if "oneOf" in schema:
        return " or ".join(_type(s) for s in schema["oneOf"])
    t = schema.get("type", "any")
    if t == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if t == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"map of {_type(schema['additionalProperties'])}"
    return str(t)


PIPE = "\\|"
_CONSTRAINTS = (
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "minItems",
    "maxItems",
    "maxProperties",
    "default",
)


def _constraints(schema: dict[str, Any]) -> str:
    parts = [f"{k} `{schema[k]}`" for k in _CONSTRAINTS if k in schema]
    if "propertyNames" in schema:
        parts.append(f"keys: {_type(schema['propertyNames'])}")
    return ", ".join(parts)


def _schema_section(name: str, schema: dict[str, Any]) -> list[str]:
    out = [f"### {name}", ""]
    if schema.get("description"):
        out += [schema["description"], ""]
    props = schema.get("properties")
    if not props:
        out += [
            f"{_type(schema)}" + (f" ({_constraints(schema)})" if _constraints(schema) else ""),
            "",
        ]
        return out
    required = set(schema.get("required", []))
    out += ["| field | type | required | constraints / meaning |", "|---|---|---|---|"]
    for field, sub in props.items():
        note = "; ".join(x for x in (_constraints(sub), sub.get("description", "")) if x)
        note = note.replace("|", PIPE)
        out.append(
            f"| `{field}` | {_type(sub)} | {'yes' if field in required else 'no'} | {note} |"
        )
    if schema.get("additionalProperties") is False:
        out += ["", "No other fields are allowed."]
    if "if" in schema:
        out += ["", "When `deleted` is true, `data` and `binaryData` must be empty (a tombstone)."]
    return out + [""]


def render() -> str:
    doc = openapi.document()
    out = [
        "# Listener API reference",
        "",
        "Generated from the OpenAPI document (`listener/openapi.json`, served at "
        "`/openapi.json`) by `python -m listener.edge.apidoc`; do not edit by hand. How the "
        "listener works, its settings and metrics: [listener.md](listener.md); the security "
        "model: [security.md](security.md). What a consumer of the stored records may rely "
        "on: [Reading the records](#reading-the-records).",
        "",
        'Every error answer is JSON `{"error": <short text>, "details": <any>}`. '
        "Clients retry 408, 429 and 5xx (honouring `Retry-After`), never other 4xx.",
        "",
        "## Endpoints",
        "",
    ]
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            auth = "none" if op.get("security") == [] else "runtime client certificate (mTLS)"
            out += [
                f"### `{method.upper()} {path}`",
                "",
                op.get("summary", ""),
                "",
                f"Authentication: {auth}.",
                "",
            ]
            params = op.get("parameters", [])
            if params:
                out += ["| parameter | in | type | constraints |", "|---|---|---|---|"]
                for p in params:
                    out.append(
                        f"| `{p['name']}` | {p['in']} | {_type(p['schema'])} | "
                        f"{_constraints(p['schema'])} |"
                    )
                out.append("")
            body = op.get("requestBody")
            if body:
                schema = body["content"]["application/json"]["schema"]
                out += [f"Request body (`application/json`): {_type(schema)}", ""]
            out += ["| status | meaning | body |", "|---|---|---|"]
            for code, resp in sorted(op["responses"].items()):
                content = resp.get("content", {})
                media = next(iter(content), None)
                shape = (
                    _type(content[media]["schema"]) if media and "schema" in content[media] else "-"
                )
                extra = " (header `Retry-After`)" if "headers" in resp else ""
                out.append(f"| {code} | {resp['description']}{extra} | {shape} |")
            out.append("")
    out += [
        "## Schemas",
        "",
        "`ConfigMapChange`, `ConfigMapChangeList` and their parts come from the shared JSON "
        "Schemas in `tether/wire/schemas/` (the single source for the webhook, the poller and "
        "the listener).",
        "",
    ]
    for name, schema in sorted(doc["components"]["schemas"].items()):
        out += _schema_section(name, schema)
    out.append(readdoc.TEXT)
    return "\n".join(out).rstrip() + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
