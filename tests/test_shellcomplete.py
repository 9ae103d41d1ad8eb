"""gpudoc.shellcomplete mirrors the profile and run lookups without importing them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpudoc import shellcomplete
from gpudoc.profiles import loader
from gpudoc.runs.record import RunRecord
from gpudoc.runs.store import RunStore
from tests.conftest import REPO


def test_profile_dirs_match_the_loader(isolated_home, tmp_path, monkeypatch):
    assert [Path(d) for d in shellcomplete.profile_dirs()] == loader.search_dirs()
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    assert [Path(d) for d in shellcomplete.profile_dirs()] == loader.search_dirs()
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert [Path(d) for d in shellcomplete.profile_dirs()] == loader.search_dirs()
    assert Path(shellcomplete.shipped_profiles_dir()) == loader.shipped_profiles_dir()
    # From a subdirectory: the project's nearest .gpudoc/profiles, by the one upward rule.
    (isolated_home / ".gpudoc" / "profiles").mkdir(parents=True)
    deeper = isolated_home / "src"
    deeper.mkdir()
    assert [Path(d) for d in shellcomplete.profile_dirs(str(deeper))] == loader.search_dirs(deeper)
    assert loader.search_dirs(deeper)[0] == isolated_home / ".gpudoc" / "profiles"


def test_profile_names_match_the_loader(isolated_home, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (isolated_home / ".gpudoc" / "profiles").mkdir(parents=True)
    (isolated_home / ".gpudoc" / "profiles" / "mine.toml").write_text("")
    (isolated_home / ".gpudoc" / "profiles" / "a10g-24gb.toml").write_text("")  # shadows shipped
    (tmp_path / "cfg" / "gpudoc" / "profiles").mkdir(parents=True)
    (tmp_path / "cfg" / "gpudoc" / "profiles" / "user.toml").write_text("")
    names = shellcomplete.profile_names()
    assert names == sorted(loader.list_profile_names())
    assert {"mine", "user"} <= set(names)


def test_run_ids_match_the_store(isolated_home, tmp_path, monkeypatch):
    store = RunStore.locate(isolated_home, os.environ)
    for run_id in ("20260101-000000-aaaaaa", "20260101-000001-bbbbbb"):
        store.create(RunRecord(id=run_id, command=["true"], cwd=str(isolated_home)))
    (store.root / "20260101-000002-cccccc").mkdir()
    # A directory without its record yet (a run being created) is no run to complete.
    assert shellcomplete.run_ids() == [r.id for r in store.records()] == ["20260101-000000-aaaaaa",
                                                                          "20260101-000001-bbbbbb"]
    monkeypatch.setenv("GPUDOC_HOME", str(tmp_path / "home"))
    assert shellcomplete.run_ids() == RunStore.locate(isolated_home, os.environ).ids() == []


def test_imports_nothing_heavy(isolated_home):
    # gpudoc.upward is the one "search upward" rule, with nothing but os imported.
    code = ("import sys, gpudoc.shellcomplete as s; s.profile_names(); s.run_ids();"
            "bad = [m for m in sys.modules if m.split('.')[0] in "
            "('tomllib', 'tomli', 'plumbum', 'psutil', 'pynvml', 'torch') or "
            "m.startswith('gpudoc.') and m not in ('gpudoc.shellcomplete', 'gpudoc.upward')];"
            "print(bad)")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert result.stdout.strip() == "[]", result.stderr


def test_command_line(isolated_home):
    def run(*args):
        return subprocess.run([sys.executable, "-m", "gpudoc.shellcomplete", *args],
                              capture_output=True, text=True, timeout=60,
                              env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin",
                                   "HOME": str(isolated_home)})

    shipped = run("shipped-dir")
    assert shipped.returncode == 0
    assert Path(shipped.stdout.strip()) == loader.shipped_profiles_dir()
    assert run("profiles").stdout.split() == shellcomplete.profile_names()
    assert run("runs").stdout == ""
    assert run("nonsense").returncode == 2
