"""`gpudoc run`'s switches: the fast parser, the switches back as argv, a record's switches read back."""

from __future__ import annotations

import pytest

from gpudoc.commands.run_options import RunOptions, parse_fast, relaunch_switches
from gpudoc.errors import InputError
from gpudoc.runs.record import RunRecord


def test_fast_parser_reads_every_switch():
    values = parse_fast(["-p", "prof", "--no-check", "--force", "--clean", "-y", "--retry-oom", "3",
                                 "--allow-semantic", "--tmux=t1", "--dry-run", "--json", "--", "python", "t.py"])
    assert values == RunOptions(profile="prof", no_check=True, force=True, clean=True, yes=True, retry_oom=3,
                                allow_semantic=True, tmux="t1", dry_run=True, json=True, command=["python", "t.py"])


@pytest.mark.parametrize("args, command", [
    (["python", "t.py", "--lr", "3"], ["python", "t.py", "--lr", "3"]),
    (["--no-check", "torchrun", "--nproc_per_node=2", "t.py", "-p", "x"],
     ["torchrun", "--nproc_per_node=2", "t.py", "-p", "x"]),
    (["-p", "prof", "python", "--", "x"], ["python", "--", "x"]),
    (["--", "--weird-first-arg"], ["--weird-first-arg"]),
])
def test_first_word_that_is_not_ours_starts_the_command(args, command):
    assert parse_fast(args).command == command


@pytest.mark.parametrize("args", [
    ["--help"], ["-h", "--", "x"], ["--bogus", "--", "x"], ["--retry-oom", "many", "--", "x"],
    ["--no-check=1", "--", "x"], ["--tmux"], ["-p", "a", "-p", "b", "--", "x"],
])
def test_anything_unusual_goes_to_the_full_parser(args):
    assert parse_fast(args) is None


def test_relaunch_keeps_the_recorded_switches_from_either_field():
    rec = RunRecord(id="r", command=["python", "t.py"], cwd=".", run_switches=["-p", "x.toml", "--no-check", "--force",
                                                                                 "--retry-oom", "3", "--json"])
    assert relaunch_switches(rec.id, rec.run_switches, rec.argv) == RunOptions(no_check=True, force=True)
    # argv that holds gpudoc's own switches (`run ... -- COMMAND`) reads the same.
    rec = RunRecord(id="r", command=["python", "t.py"], cwd=".",
                    argv=["run", "--clean", "--yes", "--allow-semantic", "--", "python", "t.py"])
    assert relaunch_switches(rec.id, rec.run_switches, rec.argv) == RunOptions(clean=True, yes=True, allow_semantic=True)
    # argv that is the launched command: no switches known.
    rec = RunRecord(id="r", command=["python", "t.py"], cwd=".", argv=["python", "t.py", "--bs", "2"])
    assert relaunch_switches(rec.id, rec.run_switches, rec.argv) == RunOptions()




def test_unreadable_recorded_switches_name_the_run():
    with pytest.raises(InputError, match="run r7: unreadable recorded switches '--bogus'"):
        relaunch_switches("r7", ["--bogus"], [])


def test_to_argv_round_trips_through_the_fast_parser():
    options = RunOptions(command=["torchrun", "--nproc_per_node=2", "t.py", "--lr", "3"], profile="p.toml",
                         no_check=True, retry_oom=2, json=True, tmux="ignored", dry_run=True)
    argv = options.to_argv()
    assert argv[0] == "run" and "--tmux" not in argv and "--dry-run" not in argv
    back = parse_fast(argv[1:])
    assert back == RunOptions(command=options.command, profile="p.toml", no_check=True, retry_oom=2, json=True)
    assert options.switches() == ["-p", "p.toml", "--no-check", "--json", "--retry-oom", "2"]
