"""`gpudoc check`'s two parsers (the plain one and plumbum's) read every command line alike, and the
plain one leaves to plumbum whatever it is not sure about."""

from __future__ import annotations

import json

import pytest

from gpudoc.cli import check as cli_check
from gpudoc.cli import context
from gpudoc.cli.app import Gpudoc
from gpudoc.cli.main import run_cli
from tests.cli.switches import declared_switches
from tests.commands.test_check import A5000
from tests.conftest import captured_workspace

USUAL = [
    [], ["--json"], ["-p", "a10g-24gb"], ["-pa10g-24gb"], ["--profile=a10g-24gb"], ["--"],
    ["--only", "env", "--only", "host,gpu.mig"], ["--skip=env", "--skip", "host"],
    ["--snapshot", "a.xml", "--snapshot=b.csv", "--strict", "--deep"],
    ["--gpus", "0-3", "--python", "/usr/bin/python3", "--json"], ["--list-checks", "--json"],
    ["--profile", "-odd-name"],  # a value may start with a dash: plumbum takes it too
]
UNUSUAL = [
    ["--help"], ["-h"], ["--help-all"], ["--version"], ["-v"], ["--json", "--json"], ["-p", "a", "-p", "b"],
    ["--profile="], ["--profile", "=x"], ["--profile", "=", "x"], ["extra"], ["--", "extra"], ["--bogus"], ["-p"],
    ["--gpus"], ["--json=1"], ["-x"], ["--jso"],
]


@pytest.mark.parametrize("args", USUAL, ids=" ".join)
def test_the_plain_parser_reads_what_plumbum_reads(monkeypatch, args, tmp_path):
    seen: list[dict] = []
    monkeypatch.setattr(cli_check, "_check", lambda values, ws: seen.append(values) or 0)
    ws = captured_workspace(tmp_path)
    assert cli_check.fast_main(list(args), ws) == 0
    with context.using(ws):
        _, status = Gpudoc.run(["gpudoc", "check", *args], exit=False)
    assert status == 0 and len(seen) == 2
    assert seen[0] == seen[1]


@pytest.mark.parametrize("args", UNUSUAL, ids=" ".join)
def test_anything_unusual_is_left_to_plumbum(monkeypatch, args, tmp_path):
    monkeypatch.setattr(cli_check, "_check", lambda values, ws: pytest.fail(f"plain parser took {args}"))
    assert cli_check.fast_main(list(args), captured_workspace(tmp_path)) is None


def test_both_ways_in_give_the_same_output(tmp_path):
    # The same command line through the plain parser, and through plumbum (`--snapshot =FILE` is
    # plumbum's to read): the same document (but for the free RAM and disk, and the second, of the
    # moment), the same status.
    results = []
    for args in (["--snapshot", A5000, "--json"], ["--snapshot", "=" + A5000, "--json"]):
        ws = captured_workspace(tmp_path)
        status = run_cli(["gpudoc", "check", *args], ws)
        doc = json.loads(ws.console.out.getvalue())
        for moving in ("ram_available_bytes", "runs_dir_free_bytes"):  # other processes move these
            doc["facts"]["host"].pop(moving)
        doc["facts"].pop("collected_at")
        results.append((status, doc))
    assert results[0] == results[1]
    assert results[0][1]["command"] == "check" and results[0][1]["facts"]["gpus"]


def test_plumbum_command_has_exactly_the_tables_switches():
    assert declared_switches(cli_check.CheckCommand) == {name for names, *_ in cli_check.SWITCHES for name in names}
