"""Asking the installed framework through the reader helper: the bounds it runs in, what it says
when it cannot answer, and the cache that makes a repeated reading cost nothing. The interpreters
here are small real programs standing in for a job's interpreter (no framework is imported)."""

from __future__ import annotations

import json
import stat
import sys
import time
from pathlib import Path

import pytest

from gpudoc.frameworks import asked
from gpudoc.readhelper import main as helper

REQUEST = {"framework": "hydra", "config_dir": "conf", "config_name": "config", "overrides": []}


def _interpreter(tmp_path: Path, body: str) -> str:
    """An executable standing in for the job's interpreter: ``body`` is shell."""
    path = tmp_path / "python"
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _answering(tmp_path: Path, answer: dict, *, count: Path) -> str:
    """An interpreter that prints (after some noise, as a framework's import may) one answer line
    and counts its runs."""
    line = helper.MARKER + json.dumps(answer)
    return _interpreter(tmp_path, f"cat >/dev/null\necho run >> {count}\necho 'importing...'\n"
                                  f"printf '%s\\n' '{line}'\n")


def test_the_marker_is_the_helpers():
    assert asked.MARKER == helper.MARKER


def test_a_helper_past_its_time_limit_is_stopped_and_says_so(tmp_path):
    python = _interpreter(tmp_path, "sleep 30\n")
    started = time.monotonic()
    with pytest.raises(asked.Unanswered, match=r"did not answer within 0\.5 s"):
        asked.ask(REQUEST, python=python, cwd=tmp_path, files=[], timeout_s=0.5)
    assert time.monotonic() - started < 10


def test_an_interpreter_that_cannot_run_or_a_helper_that_stops_is_a_reason(tmp_path):
    with pytest.raises(asked.Unanswered, match="cannot be run"):
        asked.ask(REQUEST, python=str(tmp_path / "nothing"), cwd=tmp_path, files=[])
    python = _interpreter(tmp_path, "echo 'SyntaxError: not Python' >&2\nexit 1\n")
    with pytest.raises(asked.Unanswered, match="its helper stopped .SyntaxError: not Python"):
        asked.ask(REQUEST, python=python, cwd=tmp_path, files=[])


def test_a_framework_not_importable_is_the_helpers_answer_not_a_crash(tmp_path):
    # The real helper in an interpreter that has no site-packages: no Hydra, no torchtune.
    python = _interpreter(tmp_path, f'exec {sys.executable} -S "$@"\n')
    for framework in ("hydra", "torchtune"):
        with pytest.raises(asked.Unanswered, match=f"^{framework} is not importable here"):
            asked.ask({**REQUEST, "framework": framework, "config": "x", "cwd": str(tmp_path)},
                      python=python, cwd=tmp_path, files=[])


def test_an_answer_is_cached_on_the_files_bytes_and_the_request(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    count = tmp_path / "runs"
    config = tmp_path / "config.yaml"
    config.write_text("batch_size: 8\n")
    python = _answering(tmp_path, {"ok": True, "config": {"batch_size": 8}, "read_files": [str(config)]}, count=count)
    first = asked.ask(REQUEST, python=python, cwd=tmp_path, files=[config])
    again = asked.ask(REQUEST, python=python, cwd=tmp_path, files=[config])
    assert first["config"] == again["config"] == {"batch_size": 8}
    assert "cached" not in first and again["cached"] is True
    assert count.read_text().count("run") == 1  # the second reading ran nothing
    asked.ask({**REQUEST, "overrides": ["batch_size=4"]}, python=python, cwd=tmp_path, files=[config])
    config.write_text("batch_size: 16\n")
    asked.ask(REQUEST, python=python, cwd=tmp_path, files=[config])
    assert count.read_text().count("run") == 3  # another override, then other bytes: asked again


def test_a_cached_answer_whose_read_file_changed_is_asked_again(tmp_path, monkeypatch):
    # A built-in config in the installed package is not known before asking: the answer names it.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    count = tmp_path / "runs"
    builtin = tmp_path / "installed.yaml"
    builtin.write_text("batch_size: 4\n")
    python = _answering(tmp_path, {"ok": True, "config": {}, "read_files": [str(builtin)]}, count=count)
    asked.ask(REQUEST, python=python, cwd=tmp_path, files=[])
    assert asked.ask(REQUEST, python=python, cwd=tmp_path, files=[]).get("cached") is True
    builtin.write_text("batch_size: 2\n")  # the package was upgraded
    assert "cached" not in asked.ask(REQUEST, python=python, cwd=tmp_path, files=[])
    assert count.read_text().count("run") == 2


def test_a_cache_that_cannot_be_written_costs_only_time(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o500)
    monkeypatch.setenv("XDG_CACHE_HOME", str(cache))
    python = _answering(tmp_path, {"ok": True, "config": {"a": 1}}, count=tmp_path / "runs")
    assert asked.ask(REQUEST, python=python, cwd=tmp_path, files=[])["config"] == {"a": 1}
