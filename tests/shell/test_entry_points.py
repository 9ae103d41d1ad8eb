"""bin/gpudoc from a fresh clone, and what a real install puts where the shells look."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from gpudoc import __version__
from tests.conftest import REPO, shared_once
from tests.shell.drivers import BASH_SCRIPT, bash_complete

pytestmark = pytest.mark.slow


def clean_env(tmp_path: Path, **extra: str) -> dict:
    """A user's environment: a writable home, no PYTHONPATH pointing into the checkout."""
    home = tmp_path / "user-home"
    home.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GPUDOC_VENV")}
    env.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
               PIP_CACHE_DIR=str(tmp_path / "pip-cache"), **extra)
    return env


@pytest.fixture(scope="module")
def fresh_clone(tmp_path_factory):
    clone = tmp_path_factory.mktemp("clone") / "gpudoc"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(clone)], check=True, timeout=120)
    return clone


@pytest.fixture
def wheel(fresh_clone, tmp_path_factory, tmp_path) -> Path:
    """gpudoc's wheel, built from a fresh clone once per session (as pip builds one on its way to
    installing from source): both install tests install it, as a user's `pip install .` would."""
    import importlib.util

    # The test venv's own setuptools builds it where it has one (an isolated build environment
    # installs one first, half a minute that says nothing about where gpudoc's files go).
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]

    def make(target: Path) -> None:
        built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", *isolation,
                                "--wheel-dir", str(target), str(fresh_clone)], env=clean_env(tmp_path),
                               capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr

    [built] = shared_once(tmp_path_factory, "gpudoc-wheel", make).glob("gpudoc-*.whl")
    return built


def test_bin_gpudoc_works_from_a_fresh_clone(fresh_clone, tmp_path):
    env = clean_env(tmp_path)
    assert not (fresh_clone / ".venv").exists()
    first = subprocess.run([str(fresh_clone / "bin" / "gpudoc"), "--version"], cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=600)
    assert first.returncode == 0, first.stderr
    assert first.stdout.strip() == f"gpudoc {__version__}"
    assert (fresh_clone / ".venv" / "bin" / "python").is_file()
    # The first call says why it takes a while, on stderr (stdout stays the command's).
    assert first.stderr.splitlines()[0] == f"gpudoc: setting up {fresh_clone / '.venv'} (first run only, about 20 s)"

    # Later calls go straight to the venv: no second install.
    started = time.monotonic()
    second = subprocess.run([str(fresh_clone / "bin" / "gpudoc"), "--version"], cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0
    assert second.stderr == ""
    assert time.monotonic() - started < 10

    # Through a symlink on PATH (~/bin/gpudoc -> clone/bin/gpudoc), from any directory.
    link_dir = tmp_path / "user-bin"
    link_dir.mkdir()
    (link_dir / "gpudoc").symlink_to(fresh_clone / "bin" / "gpudoc")
    env["PATH"] = f"{link_dir}{os.pathsep}{env['PATH']}"
    script = subprocess.run(["gpudoc", "completions", "bash"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=120)
    assert script.returncode == 0, script.stderr
    assert script.stdout == (fresh_clone / "completions" / "gpudoc").read_text()

    # The symlinked checkout's shipped profiles complete.
    shipped = {p.stem for p in (fresh_clone / "profiles").glob("*.toml")}
    [names] = bash_complete(["gpudoc profile show "], cwd=tmp_path, env=env)
    assert set(names) == shipped

    # With the clone's .venv activated, `gpudoc` is its editable console script: same profiles.
    env["PATH"] = f"{fresh_clone / '.venv' / 'bin'}{os.pathsep}{env['PATH']}"
    [names] = bash_complete(["gpudoc profile show "], cwd=tmp_path, env=env)
    assert set(names) == shipped


def test_bin_gpudoc_uses_the_venv_bin_test_made_without_installing_again(tmp_path):
    # The venv ./bin/test made (its own stamp, newer than pyproject.toml): gpudoc is in it already.
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    (venv / ".gpudoc-test-installed").touch()
    env = {**clean_env(tmp_path), "GPUDOC_VENV": str(venv)}
    done = subprocess.run([str(REPO / "bin" / "gpudoc"), "--version"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, f"gpudoc {__version__}", "")
    assert not (venv / ".gpudoc-installed").exists()


def test_an_install_puts_scripts_and_profiles_where_the_shells_look(fresh_clone, wheel, tmp_path):
    env = clean_env(tmp_path)
    prefix = tmp_path / "venv"
    # gpudoc itself is installed (not editable); its dependencies come from the test venv through
    # a .pth line (the global interpreter of a fresh machine has none of them).
    subprocess.run([sys.executable, "-m", "venv", str(prefix)], check=True, env=env, timeout=120)
    [site] = (prefix / "lib").glob("python*/site-packages")
    (site / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([str(prefix / "bin" / "python"), "-m", "pip", "install", "--quiet",
                              "--no-deps", str(wheel)], env=env, capture_output=True,
                             text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    for relative in ("share/bash-completion/completions/gpudoc", "share/zsh/site-functions/_gpudoc",
                     "share/fish/vendor_completions.d/gpudoc.fish"):
        installed = prefix / relative
        assert installed.read_text() == (fresh_clone / "completions" / installed.name).read_text()
    shipped = {p.stem for p in (prefix / "share" / "gpudoc" / "profiles").glob("*.toml")}
    assert shipped == {p.stem for p in (fresh_clone / "profiles").glob("*.toml")}

    env["PATH"] = f"{prefix / 'bin'}{os.pathsep}{env['PATH']}"
    work = tmp_path / "elsewhere"
    work.mkdir()
    printed = subprocess.run(["gpudoc", "completions", "fish"], cwd=work, env=env,
                             capture_output=True, text=True, timeout=120)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == (prefix / "share/fish/vendor_completions.d/gpudoc.fish").read_text()
    # The console script in PREFIX/bin finds PREFIX/share/gpudoc/profiles.
    [names] = bash_complete(["gpudoc profile show "], cwd=work, env=env)
    assert set(names) == shipped
    assert BASH_SCRIPT.is_file()


def test_a_user_install_finds_the_shipped_profiles(wheel, tmp_path):
    # `pip install --user` puts the data files under the user base, not sys.prefix.
    user_base = tmp_path / "user-base"
    env = clean_env(tmp_path, PYTHONUSERBASE=str(user_base), PIP_USER="1")
    prefix = tmp_path / "venv"
    # A venv that sees the (user) site like a system interpreter does: --user installs work in it.
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--system-site-packages", "--without-pip", str(prefix)], check=True,
                   env=env, timeout=120)
    user_site = subprocess.run([str(prefix / "bin" / "python"), "-c", "import site; print(site.getusersitepackages())"],
                               env=env, capture_output=True, text=True, check=True).stdout.strip()
    Path(user_site).mkdir(parents=True)
    # gpudoc's dependencies from the test venv (a fresh machine's global interpreter has none).
    (Path(user_site) / "test-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    install = subprocess.run([sys.executable, "-m", "pip", "--python", str(prefix / "bin" / "python"), "install",
                              "--quiet", "--no-deps", "--user", str(wheel)],
                             env=env, capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    assert (user_base / "share" / "gpudoc" / "profiles" / "gpu-24gb.toml").is_file()
    work = tmp_path / "elsewhere"
    work.mkdir()
    gpudoc = [str(prefix / "bin" / "python"), "-m", "gpudoc"]
    listed = subprocess.run([*gpudoc, "profile", "list"], cwd=work, env=env, capture_output=True, text=True,
                            timeout=120)
    assert listed.returncode == 0, listed.stderr
    assert "gpu-24gb" in listed.stdout
    shown = subprocess.run([*gpudoc, "profile", "show", "gpu-24gb", "--json"], cwd=work, env=env,
                           capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["profile"]["path"].startswith(str(user_base))


def _venv_standing_in_for_bin_test(tmp_path: Path) -> Path:
    """A venv directory whose python is this interpreter (pytest and gpudoc's deps already there),
    stamped as installed so bin/test goes straight to pytest."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    (venv / "bin" / "python").chmod(0o755)
    stamp = venv / ".gpudoc-test-installed"
    stamp.touch()
    later = (REPO / "pyproject.toml").stat().st_mtime + 10
    os.utime(stamp, (later, later))
    return venv


def test_bin_test_fails_loudly_when_pytest_collects_nothing(tmp_path):
    venv = _venv_standing_in_for_bin_test(tmp_path)
    env = {**os.environ, "GPUDOC_VENV": str(venv)}
    done = subprocess.run([str(REPO / "bin" / "test"), "-q", "-p", "no:cacheprovider", str(tmp_path)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "collected no tests" in done.stderr


def test_ci_runs_exactly_the_readme_test_command():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert "./bin/test" in readme and "./bin/gpudoc check" in readme
    lines = [line for line in ci.splitlines() if line and not line.startswith("#")]
    assert lines[-1] == "exec ./bin/test"
    assert "export GPUDOC_FUZZ_EXAMPLES=300" in lines  # CI's fuzz count (tests/cli/test_fuzz.py)
