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


def test_uv_run_outside_a_project_is_the_python_uv_python_find_names(tmp_path):
    python = _env_python(tmp_path / "proj" / ".venv")
    bin_dir = tmp_path / "bin"
    # As uv says outside a project: `uv sync` finds no pyproject.toml (exit 2), `uv python find`
    # names the first Python it would use (here the nearest .venv).
    _tool(bin_dir, "uv", f'[ "$1 $2" = "python find" ] && echo "{python}" && exit 0\n'
                         'echo "error: No \\`pyproject.toml\\` found in current directory or any parent directory" >&2\n'
                         "exit 2")
    command = ["uv", "run", "--project", "proj", "python", "train.py", "--lr", "1"]
    assert target_python(command, _environ(bin_dir), str(tmp_path)) == str(python)
    # Never `uv run` (it would create the environment) nor a real `uv sync`.
    assert _asked(bin_dir, "uv") == ["sync --dry-run --offline --no-python-downloads --project proj",
                                     "python find --project proj"]
    assert interpreter_note(command, _environ(bin_dir), str(tmp_path)) is None
    # --no-project: the first Python found, whatever project is around.
    envtools._ask.cache_clear()
    (bin_dir / "uv.asked").unlink()
    assert target_python(["uv", "run", "--no-project", "python", "t.py"], _environ(bin_dir), str(tmp_path)) == str(python)
    assert _asked(bin_dir, "uv") == ["python find"]


def _real_uv(tmp_path: Path) -> dict[str, str]:
    """The job's environment for the real uv (the test extra installs it beside gpudoc): offline,
    with a cache and home of the test's own, and no Python download."""
    from tests.conftest import VENV_BIN

    return {"PATH": f"{VENV_BIN}{os.pathsep}/usr/bin{os.pathsep}/bin", "HOME": str(tmp_path),
            "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_PYTHON_DOWNLOADS": "never", "UV_OFFLINE": "1"}


def _uv_venv(environ: dict[str, str], where: Path) -> Path:
    import subprocess

    subprocess.run(["uv", "venv", "-q", "--python", sys.executable, str(where)], env=environ, check=True, timeout=60)
    return where / "bin" / "python"


def test_real_uv_run_in_a_project_is_its_environment_not_the_active_one_nor_created(tmp_path):
    """The real uv: `uv run` from a subdirectory of a project runs the project's .venv, even with
    another virtual environment active (uv warns and ignores it without --active), and the one
    UV_PROJECT_ENVIRONMENT names; one not created yet is a note, and nothing is created."""
    environ = _real_uv(tmp_path)
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\ndependencies = []\n')
    cwd = str(project / "src")
    command = ["uv", "run", "python", "train.py"]
    assert interpreter_note(command, environ, cwd) == (
        f"uv run: the project's environment {project / '.venv'} is not created yet (`uv sync --dry-run --offline "
        "--no-python-downloads`: uv run would create it, gpudoc does not); the python on PATH is assumed")
    assert not (project / ".venv").exists() and not (project / "uv.lock").exists()
    envtools._ask.cache_clear()
    venv = _uv_venv(environ, project / ".venv")
    active = _uv_venv(environ, tmp_path / "active")
    assert target_python(command, {**environ, "VIRTUAL_ENV": str(active.parent.parent)}, cwd) == str(venv)
    assert target_python([*command[:2], "--active", *command[2:]],
                         {**environ, "VIRTUAL_ENV": str(active.parent.parent)}, cwd) == str(active)
    assert target_python(command, {**environ, "UV_PROJECT_ENVIRONMENT": str(active.parent.parent)}, cwd) == str(active)
    assert not (project / "uv.lock").exists()  # a dry run: nothing synced, no lock written


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


def test_real_uv_run_of_a_script_with_inline_metadata_is_the_scripts_own_environment(tmp_path):
    """`uv run s.py` where s.py declares its dependencies (PEP 723 `# /// script`) runs in an
    environment uv keeps for that script, not the project's: asked with `uv sync --script`."""
    environ = _real_uv(tmp_path)
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "proj"\nversion = "0"\ndependencies = []\n')
    _uv_venv(environ, tmp_path / ".venv")
    (tmp_path / "s.py").write_text('# /// script\n# requires-python = ">=3.10"\n# dependencies = []\n# ///\n'
                                   "print('hi')\n")
    note = interpreter_note(["uv", "run", "s.py"], environ, str(tmp_path))
    assert note is not None and note.startswith("uv run: the script's environment ")
    assert "is not created yet (`uv sync --dry-run --offline --no-python-downloads --script s.py`" in note
    import subprocess

    subprocess.run(["uv", "run", "-q", "s.py"], cwd=tmp_path, env=environ, check=True, timeout=60)  # uv makes it
    envtools._ask.cache_clear()
    python = target_python(["uv", "run", "s.py"], environ, str(tmp_path))
    assert python is not None and python.startswith(str(tmp_path / "uv-cache")) and python.endswith("/bin/python")
    assert target_python(["uv", "run", "python", "s.py"], environ, str(tmp_path)) == str(tmp_path / ".venv" / "bin" / "python")
