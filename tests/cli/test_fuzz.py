"""Hostile input through the real CLI boundary, in-process: profiles, logs, nvidia-smi snapshots
and switches that hypothesis makes up. Whatever comes in, gpudoc answers with an exit code from the
SPEC, never a traceback or a crash report (exit 3), and a refusal changes no file.

The examples are built from what gpudoc really reads (the schema's keys, real error lines from the
shared corpus, real nvidia-smi captures), then broken: wrong types, non-finite and huge numbers,
truncation, lost line breaks, stray bytes. How many examples each property draws is a setting:
``GPUDOC_FUZZ_EXAMPLES`` (CI sets 300, .ci/run), 100 when unset.
"""

from __future__ import annotations

import json
import os
import re
import string
from pathlib import Path

import pytest
import tomlkit
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpudoc.cli.main import run_cli
from gpudoc.profiles import schema
from tests.conftest import ERRORS_CORPUS, NVIDIA_SMI, captured_workspace


def _examples() -> int:
    """The example count from ``GPUDOC_FUZZ_EXAMPLES``: 100 when unset keeps a local run quick; CI
    draws 300. A value that is not a positive count fails the run, never quietly draws none."""
    raw = os.environ.get("GPUDOC_FUZZ_EXAMPLES", "").strip() or "100"
    if not (raw.isascii() and raw.isdigit()) or int(raw) < 1:
        raise pytest.UsageError(f"GPUDOC_FUZZ_EXAMPLES={raw!r}: not a positive count of examples")
    return int(raw)


EXAMPLES = _examples()
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

# What each command may answer (SPEC): 0 ok, 1 negative, 2 usage/bad input; run adds 125-127.
ANSWERS = {"profile": {0, 2}, "estimate": {0, 1, 2}, "fix": {0, 1, 2}, "check": {0, 1, 2},
           "run": {0, 2, 125, 126, 127}, "runs": {0, 1, 2}, "logs": {0, 1, 2}, "clean": {0, 1, 2},
           "completions": {0, 2}, "--help": {0}, "--version": {0}}

NUMBER = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, 1, -1, 2**63 - 1, 1e300, 10**20]),
)
VALUE = st.one_of(NUMBER, st.booleans(), st.text(max_size=16), st.lists(st.integers(-5, 5), max_size=3))
KNOWN_KEYS = sorted({key for keys in schema.TABLES.values() for key in keys})
KEY = st.one_of(st.sampled_from(KNOWN_KEYS), st.text(alphabet=string.ascii_lowercase + "_", min_size=1, max_size=12))
TABLE = st.sampled_from([*schema.TABLES, "env", "bogus"])
PROFILE_DOC = st.dictionaries(TABLE, st.dictionaries(KEY, VALUE, max_size=5), max_size=4)


def _broken(text: str) -> st.SearchStrategy[str]:
    """``text`` cut short, with its numbers replaced, its line breaks lost, or stray bytes in it."""
    return st.one_of(
        st.integers(0, len(text)).map(lambda n: text[:n]),
        st.sampled_from(["0", "-1", "nan", "1e309", "99999999999999999999999", ""]).map(
            lambda n: re.sub(r"\d+(?:\.\d+)?", n, text)),
        st.just(text.replace("\n", " ")),
        st.tuples(st.integers(0, len(text)), st.text(max_size=8)).map(lambda p: text[:p[0]] + p[1] + text[p[0]:]),
    )


def _corpus_lines() -> list[str]:
    lines = []
    with open(ERRORS_CORPUS, encoding="utf-8") as handle:
        for row in handle:
            lines.append(json.loads(row)["log"][:4000])
            if len(lines) >= 40:
                break
    return lines


CORPUS = _corpus_lines()
LOG = st.one_of(st.sampled_from(CORPUS).flatmap(_broken), st.text(max_size=400))
SNAPSHOTS = sorted(p for p in NVIDIA_SMI.iterdir() if p.suffix in (".xml", ".csv", ".txt") and p.stat().st_size < 60_000)
SNAPSHOT = st.sampled_from(SNAPSHOTS[:12]).flatmap(lambda p: _broken(p.read_text(encoding="utf-8", errors="replace")))

PROFILE_TEXT = "[train]\nmicro_batch_size = 8\ngradient_accumulation_steps = 2\n[bind]\nenv = true\n"


def _cli(work: Path, *argv: str, stdin: str = "") -> tuple[int, str]:
    ws = captured_workspace(work, environ={"GPUDOC_HOME": str(work / ".gpudoc"), "NO_COLOR": "1"}, stdin=stdin)
    status = run_cli(["gpudoc", *argv], workspace=ws)
    return status, ws.console.err.getvalue()


def _files(work: Path) -> dict[str, bytes]:
    return {str(p.relative_to(work)): p.read_bytes() for p in sorted(work.rglob("*"))
            if p.is_file() and ".gpudoc" not in p.parts}


def _assert_answer(command: str, status: int, err: str) -> None:
    assert status in ANSWERS[command], (status, err)
    assert "Traceback" not in err and "internal error" not in err, err
    if status in (2, 125):
        assert len(err.strip().splitlines()) == 1, err  # a refusal is one line naming what is wrong


@pytest.fixture
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz")


@SETTINGS
@given(doc=PROFILE_DOC, raw=st.one_of(st.none(), st.binary(max_size=200), st.text(max_size=200)))
def test_any_profile_is_an_answer_never_a_crash(work, doc, raw):
    path = work / "p.toml"
    if raw is None:
        try:
            text = tomlkit.dumps(doc)
        except Exception:  # a value TOML cannot hold: the raw forms cover the rest
            text = ""
        path.write_text(text, encoding="utf-8", errors="surrogateescape")
    else:
        path.write_bytes(raw if isinstance(raw, bytes) else raw.encode("utf-8", "surrogateescape"))
    (work / "oom.log").write_text(CORPUS[0])
    before = _files(work)
    for argv in (("profile", "show", str(path)), ("estimate", "-p", str(path)),
                 ("fix", "--log", "oom.log", "-p", str(path), "--apply"),
                 ("run", "--dry-run", "--no-check", "-p", str(path), "--", "python", "train.py",
                  "--per_device_train_batch_size", "4")):
        status, err = _cli(work, *argv)
        _assert_answer(argv[0], status, err)
        if status == 2:
            assert _files(work) == before, argv  # a refusal changes no file


@SETTINGS
@given(log=LOG)
def test_any_log_is_an_answer_and_a_refused_apply_writes_nothing(work, log):
    (work / "gpudoc.toml").write_text(PROFILE_TEXT)
    (work / "given.log").write_text(log, encoding="utf-8", errors="surrogateescape")
    before = _files(work)
    status, err = _cli(work, "fix", "--log", "given.log", "--json")
    _assert_answer("fix", status, err)
    assert _files(work) == before
    status, err = _cli(work, "fix", "--log", "given.log", "--apply")
    _assert_answer("fix", status, err)
    if status != 0:
        assert _files(work) == before
    status, err = _cli(work, "fix", "-", stdin=log)
    _assert_answer("fix", status, err)


@SETTINGS
@given(snapshot=SNAPSHOT, suffix=st.sampled_from([".xml", ".csv", ".txt", ".json"]))
def test_any_snapshot_is_an_answer(work, snapshot, suffix):
    path = work / f"smi{suffix}"
    path.write_text(snapshot, encoding="utf-8", errors="surrogateescape")
    status, err = _cli(work, "check", "--snapshot", str(path), "--only", "gpu,proc")
    _assert_answer("check", status, err)


SWITCH_VALUES = st.one_of(
    st.sampled_from(["", "0", "-1", "nan", "inf", "0-99999999999", "0-30000000", "1,,2", "a10g-24gb", "x" * 300,
                     "../../etc/passwd", "\x00", "é", "-", "--", "3-1"]),
    st.text(max_size=12),
)
COMMANDS = st.sampled_from([
    ("check", ["--gpus", "--only", "--skip", "-p", "--snapshot", "--json", "--strict", "--list-checks"]),
    ("estimate", ["-p", "--gpu-memory", "--micro-batch-size", "--json"]),
    ("fix", ["--log", "-p", "--json", "--allow-semantic"]),
    ("runs", ["--json", "--last"]),
    ("logs", []),
    ("clean", ["--gpus", "--dry-run", "--json"]),
    ("profile", ["list", "show", "new"]),
    ("completions", []),
    ("run", ["-p", "--gpus", "--retry-oom", "--tmux", "--json", "--no-check"]),
])


@SETTINGS
@given(command=COMMANDS, picks=st.lists(st.tuples(st.integers(0, 20), SWITCH_VALUES), max_size=4))
def test_any_switches_are_an_answer(work, command, picks):
    name, switches = command
    argv: list[str] = [name]
    if name == "run":
        argv.append("--dry-run")  # the fuzz never launches a job
    for index, value in picks:
        if switches and index < len(switches):
            argv.append(switches[index])
        argv.append(value)
    if name == "run":
        argv += ["--", "definitely-not-a-command-xyz"]
    status, err = _cli(work, *argv)
    _assert_answer(name, status, err)


def test_the_fuzz_reads_real_inputs():
    # The strategies above are only as good as what they start from.
    assert len(CORPUS) >= 20 and len(SNAPSHOTS) >= 6
    assert os.path.getsize(ERRORS_CORPUS) > 0


def test_the_example_count_is_the_setting(monkeypatch):
    assert SETTINGS.max_examples == EXAMPLES == _examples()  # this run's, as its environment says
    monkeypatch.setenv("GPUDOC_FUZZ_EXAMPLES", "300")
    assert _examples() == 300
    monkeypatch.delenv("GPUDOC_FUZZ_EXAMPLES")
    assert _examples() == 100
    for wrong in ("0", "-5", "many", "1e3", "３"):
        monkeypatch.setenv("GPUDOC_FUZZ_EXAMPLES", wrong)
        with pytest.raises(pytest.UsageError, match="GPUDOC_FUZZ_EXAMPLES"):
            _examples()
