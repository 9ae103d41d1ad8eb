"""`uv run`, `conda run -n X`, `pixi run`, `poetry run` in front of the job: the environment's own
interpreter, asked of the tool without syncing or creating anything. The tools are small executables
on PATH printing what the real ones print (their documented output); each logs what it was asked."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from gpudoc.job import envtools
from gpudoc.job.interpreter import interpreter_note, target_python


def _env_python(prefix: Path) -> Path:
    """An environment's interpreter: a link to a real one, as a venv's bin/python is."""
    (prefix / "bin").mkdir(parents=True)
    (prefix / "bin" / "python").symlink_to(sys.executable)
    return prefix / "bin" / "python"


def _tool(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    path = bin_dir / name
    path.write_text(f'#!/bin/sh\necho "$@" >> "{bin_dir}/{name}.asked"\n{body}\n')
    path.chmod(0o755)
    return path


def _environ(bin_dir: Path) -> dict[str, str]:
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "HOME": str(bin_dir.parent)}


@pytest.fixture(autouse=True)
def _fresh():
    envtools._ask.cache_clear()
    yield
    envtools._ask.cache_clear()


def _asked(bin_dir: Path, name: str) -> list[str]:
    return (bin_dir / f"{name}.asked").read_text().splitlines()


def test_uv_run_is_the_projects_venv_as_uv_python_find_names_it(tmp_path):
    python = _env_python(tmp_path / "proj" / ".venv")
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "uv", f'[ "$1 $2" = "python find" ] && echo "{python}"')
    command = ["uv", "run", "--project", "proj", "python", "train.py", "--lr", "1"]
    assert target_python(command, _environ(bin_dir), str(tmp_path)) == str(python)
    assert _asked(bin_dir, "uv") == ["python find --project proj"]  # never `uv run` or `uv sync`
    assert interpreter_note(command, _environ(bin_dir), str(tmp_path)) is None


def test_conda_run_asks_the_named_environment_for_its_executable(tmp_path):
    python = _env_python(tmp_path / "envs" / "llm")
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "conda", f'[ "$1 $2 $3" = "run -n llm" ] && echo "{python}"')
    command = ["conda", "run", "-n", "llm", "--no-capture-output", "torchrun", "--nproc_per_node=2", "train.py"]
    assert target_python(command, _environ(bin_dir), str(tmp_path)) == str(python)
    assert _asked(bin_dir, "conda") == ["run -n llm python -c import sys; print(sys.executable)"]
    # The same behind Slurm's srun, one launcher per node.
    assert target_python(["srun", "-N", "2", *command], _environ(bin_dir), str(tmp_path)) == str(python)


def test_pixi_run_reads_the_environments_prefix_from_pixi_info(tmp_path):
    python = _env_python(tmp_path / ".pixi" / "envs" / "cuda")
    info = {"platform": "linux-64", "environments_info": [
        {"name": "default", "features": ["default"], "prefix": str(tmp_path / ".pixi" / "envs" / "default")},
        {"name": "cuda", "features": ["cuda", "default"], "prefix": str(tmp_path / ".pixi" / "envs" / "cuda")}]}
    bin_dir = tmp_path / "bin"
    (tmp_path / "info.json").write_text(json.dumps(info))
    _tool(bin_dir, "pixi", f'[ "$1 $2" = "info --json" ] && cat "{tmp_path / "info.json"}"')
    command = ["pixi", "run", "-e", "cuda", "python", "train.py"]
    assert target_python(command, _environ(bin_dir), str(tmp_path)) == str(python)
    assert _asked(bin_dir, "pixi") == ["info --json"]


def test_poetry_run_is_the_env_info_path(tmp_path):
    venv = tmp_path / "cache" / "virtualenvs" / "proj-AbC123-py3.11"
    python = _env_python(venv)
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "poetry", f'[ "$1 $2 $3" = "env info --path" ] && printf "%s" "{venv}"')  # no newline (older)
    assert target_python(["poetry", "run", "python", "train.py"], _environ(bin_dir), str(tmp_path)) == str(python)


def test_an_environment_not_created_yet_or_a_silent_tool_is_one_note_and_the_python_on_path(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    _tool(bin_dir, "poetry", "exit 1")  # `poetry env info --path` with no environment: exit 1, nothing printed
    environ = _environ(bin_dir)
    command = ["poetry", "run", "python", "train.py"]
    note = interpreter_note(command, environ, str(tmp_path))
    assert note is not None and note.startswith("poetry run: `poetry env info --path` named no interpreter (exit 1")
    assert target_python(command, environ, str(tmp_path)) == target_python(["python", "train.py"], environ)
    monkeypatch.setattr(envtools, "TIMEOUT_S", 0.5)
    _tool(bin_dir, "uv", "sleep 5")
    note = interpreter_note(["uv", "run", "python", "train.py"], environ, str(tmp_path))
    assert note == "uv run: `uv python find` did not answer within 0.5 s; the python on PATH is assumed"
    note = interpreter_note(["pixi", "run", "python", "t.py"], {"PATH": str(tmp_path / "none")}, str(tmp_path))
    assert note is not None and "pixi is not on the job's PATH" in note
