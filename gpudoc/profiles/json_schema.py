"""The JSON Schema of a profile, generated from ``gpudoc.profiles.schema`` and never written by hand,
so editors that read TOML through JSON Schema (taplo, Even Better TOML) complete and check a
``gpudoc.toml`` while it is typed. The same file ships beside the shipped profiles, which name it
with a ``#:schema`` line; ``profile new`` names the installed copy.

The loader's validator stays the authority (it also places errors on their line, suggests a key and
checks what a schema cannot, such as ``via_env`` needing ``env = true``); this schema says the same
about every key, type, range and choice, and a test keeps the two in step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gpudoc.profiles import schema

FILE_NAME = "gpudoc-profile.schema.json"

_TYPES = {int: "integer", float: "number", str: "string", bool: "boolean", list: "array", dict: "object"}
# Values of a custom [train] knob and of an [env] variable: what the validator takes there.
_SCALAR = {"type": ["number", "boolean", "string"]}


def profile_schema() -> dict[str, Any]:
    """The whole profile as a draft-07 schema (the draft taplo reads)."""
    properties: dict[str, Any] = {key: _value(None, key, types) for key, types in schema.TOP_LEVEL.items()}
    for table, keys in schema.TABLES.items():
        properties[table] = {
            "type": "object",
            "properties": {key: _value(table, key, types) for key, types in keys.items()},
            "additionalProperties": _SCALAR if table in schema.OPEN_TABLES else False,
        }
    properties["env"] = {"type": "object", "description": "environment variables the job is launched with",
                         "additionalProperties": _SCALAR}
    return {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "title": "gpudoc profile",
        "description": "A gpudoc profile: GPU needs, environment and training knobs (gpudoc profile schema).",
        "type": "object",
        "properties": properties,
        "additionalProperties": False,
    }


def schema_text() -> str:
    """The schema as the shipped file holds it (and `gpudoc profile schema` prints it)."""
    return json.dumps(profile_schema(), indent=2, sort_keys=False) + "\n"


def shipped_schema_path() -> Path:
    """The installed copy, beside the shipped profiles."""
    from gpudoc.profiles.loader import shipped_profiles_dir

    return shipped_profiles_dir() / FILE_NAME


def directive(target: Path | None = None) -> str:
    """The ``#:schema`` line for a profile: the shipped file's path, relative where the profile sits
    beside it (the shipped profiles), absolute elsewhere (a user's profile names the installed copy)."""
    path = shipped_schema_path()
    if target is not None and target.parent.resolve() == path.parent.resolve():
        return f"#:schema ./{FILE_NAME}"
    return f"#:schema {path.resolve()}"


def _value(table: str | None, key: str, types: tuple) -> dict[str, Any]:
    spec: dict[str, Any] = _typed(types)
    if table is not None:
        low_high = schema.RANGES.get((table, key))
        if low_high is not None:
            spec["minimum"], spec["maximum"] = low_high
        choices = schema.ENUMS.get((table, key))
        if choices is not None:
            spec["enum"] = list(choices)
    special = _SPECIAL.get((table, key))
    return {**spec, **special} if special else spec


def _typed(types: tuple) -> dict[str, Any]:
    if types == schema.NUMBER:
        return {"type": "number"}
    names = [_TYPES[t] for t in types]
    return {"type": names[0] if len(names) == 1 else names}


_RUNG = {
    "type": "object",
    "properties": {key: _typed(types) for key, types in schema.USER_RUNG_KEYS.items()}
    | {"op": {"type": "string", "enum": list(schema.USER_RUNG_OPS)}},
    "required": ["name", "knob", "op"],
    "additionalProperties": False,
}

# What the validator checks beyond a key's type, range and choices (gpudoc/profiles/validate.py).
_SPECIAL: dict[tuple[str | None, str], dict[str, Any]] = {
    ("train", "gradient_checkpointing"): {"type": ["boolean", "string"], "enum": [True, False, "selective"]},
    ("train", "zero_stage"): {"minimum": 0, "maximum": 3},
    ("train", "lora_targets"): {"items": {"type": "string"}},
    ("model", "lora_targets"): {"items": {"type": "string"}, "description": "older place of [train] lora_targets"},
    ("bind", "args_knobs"): {"items": {"type": "string"}},
    ("bind", "via_env"): {"items": {"type": "string"}},
    ("bind", "overrides"): {"additionalProperties": {"anyOf": [
        {"type": "string"},
        {"type": "object", "properties": {"key": {"type": "string"}, "map": {"type": "object",
                                                                           "additionalProperties": _SCALAR}},
         "required": ["key"], "additionalProperties": False}]}},
    ("bind", "flags"): {"additionalProperties": {"type": "string", "pattern": "^-"}},
    ("ladder", "target_utilization"): {"exclusiveMinimum": 0, "maximum": 1},
    ("ladder", "rung"): {"items": _RUNG},
}
