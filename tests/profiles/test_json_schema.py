"""The profile's JSON Schema says what the loader says: generated from the schema module, shipped in
step, named by every shipped profile, and checked here by an independent validator (jsonschema)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest

from gpudoc.errors import ProfileError
from gpudoc.profiles import schema
from gpudoc.profiles.json_schema import FILE_NAME, profile_schema, schema_text
from gpudoc.profiles.loader import shipped_profiles_dir
from gpudoc.profiles.validate import toml_parser, validate
from tests.conftest import REPO, gpudoc_cli

SHIPPED = sorted(shipped_profiles_dir().glob("*.toml"))
EXAMPLES = sorted((REPO / "examples").glob("*/gpudoc.toml"))
VALIDATOR = jsonschema.Draft7Validator(profile_schema())


def _loader_refuses(data: dict) -> bool:
    try:
        validate(data, Path("p.toml"), "")
    except ProfileError:
        return True
    return False


def _schema_refuses(data: dict) -> bool:
    return any(True for _ in VALIDATOR.iter_errors(data))


def test_the_schema_is_a_valid_draft_7_schema():
    jsonschema.Draft7Validator.check_schema(profile_schema())


def test_the_shipped_file_is_the_generated_schema():
    shipped = shipped_profiles_dir() / FILE_NAME
    assert shipped.read_text(encoding="utf-8") == schema_text(), \
        "regenerate it: gpudoc profile schema > profiles/gpudoc-profile.schema.json"


@pytest.mark.parametrize("path", SHIPPED + EXAMPLES, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_and_example_profile_names_the_schema_and_passes_it(path):
    text = path.read_text(encoding="utf-8")
    directive = re.match(r"#:schema (\S+)\n", text)
    assert directive, f"{path} does not start with a #:schema line"
    assert (path.parent / directive.group(1)).resolve() == (shipped_profiles_dir() / FILE_NAME).resolve()
    errors = [e.message for e in VALIDATOR.iter_errors(toml_parser().loads(text))]
    assert errors == []


def _wrong_type(types: tuple) -> object:
    return "x" if str not in types else 3.5


def _keys() -> list[tuple[str, str, tuple]]:
    return [(table, key, types) for table, keys in schema.TABLES.items() for key, types in keys.items()]


@pytest.mark.parametrize(("table", "key", "types"), _keys(), ids=lambda v: v if isinstance(v, str) else "")
def test_a_value_of_the_wrong_type_is_refused_by_both(table, key, types):
    data = {table: {key: _wrong_type(types)}}
    assert _loader_refuses(data) and _schema_refuses(data)


@pytest.mark.parametrize(("table", "key"), sorted(schema.RANGES))
def test_a_number_out_of_range_is_refused_by_both_and_its_bounds_pass(table, key):
    low, high = schema.RANGES[(table, key)]
    as_type = int if schema.TABLES[table][key] == schema.INT else float
    for inside in (low, high):
        data = {table: {key: as_type(inside)}}
        assert not _loader_refuses(data) and not _schema_refuses(data), data
    over = {table: {key: as_type(high) * 2 + 1}}
    assert _loader_refuses(over) and _schema_refuses(over)


@pytest.mark.parametrize(("table", "key"), sorted(schema.ENUMS))
def test_a_choice_outside_the_list_is_refused_by_both(table, key):
    for choice in schema.ENUMS[(table, key)]:
        assert not _schema_refuses({table: {key: choice}})
    data = {table: {key: schema.ENUMS[(table, key)][0] + "x"}}
    assert _loader_refuses(data) and _schema_refuses(data)


@pytest.mark.parametrize("table", sorted(set(schema.TABLES) - schema.OPEN_TABLES))
def test_a_typo_in_a_closed_table_is_refused_by_both(table):
    for key, types in schema.TABLES[table].items():
        typo = key[:-1]  # the last letter dropped: "min_free_gi", "prob"
        value = 1 if int in types or float in types else ("x" if str in types else True)
        data = {table: {typo: value}}
        assert _loader_refuses(data) and _schema_refuses(data), data


def test_a_misspelt_table_and_a_user_rung_without_op_are_refused_by_both():
    for data in ({"trian": {"micro_batch_size": 2}},
                 {"ladder": {"rung": [{"name": "r", "knob": "micro_batch_size"}]}},
                 {"train": {"gradient_checkpointing": "full"}},
                 {"train": {"zero_stage": 4}},
                 {"train": {"my_knob": [1, 2]}}):
        assert _loader_refuses(data) and _schema_refuses(data), data
    # ... while a custom knob in the open [train] and any variable in [env] pass both.
    fine = {"train": {"my_knob": 3}, "env": {"ANY_VAR": "1"}, "ladder": {"rung": [
        {"name": "r", "knob": "my_knob", "op": "halve"}]}}
    assert not _loader_refuses(fine) and not _schema_refuses(fine)


def test_profile_schema_prints_the_shipped_file():
    result = gpudoc_cli("profile", "schema")
    assert result.returncode == 0, result.stderr
    assert result.stdout == (shipped_profiles_dir() / FILE_NAME).read_text(encoding="utf-8")
    assert json.loads(result.stdout)["properties"]["train"]["properties"]["micro_batch_size"]["type"] == "integer"


def test_profile_new_names_the_installed_schema(isolated_home):
    assert gpudoc_cli("profile", "new", "box", cwd=isolated_home).returncode == 0
    text = (isolated_home / ".gpudoc" / "profiles" / "box.toml").read_text()
    first = text.splitlines()[0]
    assert first.startswith("#:schema /")
    named = Path(first.split(" ", 1)[1])
    assert named.read_text(encoding="utf-8") == schema_text()
    assert list(VALIDATOR.iter_errors(toml_parser().loads(text))) == []
