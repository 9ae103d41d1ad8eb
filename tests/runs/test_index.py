"""The per-user list of projects for `runs --all`: every project that ran is in it, also when many
first runs start at once."""

from __future__ import annotations

import subprocess
import sys

from gpudoc.runs.index import MAX_PROJECTS, projects, register


def test_twenty_first_runs_at_once_register_twenty_projects(tmp_path):
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    folders = [tmp_path / f"project{n}" / ".gpudoc" / "runs" for n in range(20)]
    for folder in folders:
        folder.mkdir(parents=True)
    code = ("import sys, time\nfrom pathlib import Path\nfrom gpudoc.runs.index import register\n"
            "start = float(sys.argv[2])\nwhile time.time() < start: pass\n"
            "for _ in range(5): register(Path(sys.argv[1]), {'XDG_STATE_HOME': sys.argv[3]})\n")
    import time

    start = time.time() + 3  # interpreters started first, then all register at once
    procs = [subprocess.Popen([sys.executable, "-c", code, str(folder), str(start), environ["XDG_STATE_HOME"]])
             for folder in folders]
    assert [p.wait(60) for p in procs] == [0] * 20
    assert sorted(map(str, projects(environ))) == sorted(str(f) for f in folders)


def test_the_list_stays_bounded_and_drops_what_is_gone(tmp_path):
    environ = {"XDG_STATE_HOME": str(tmp_path / "state")}
    kept = tmp_path / "kept"
    kept.mkdir()
    register(kept, environ)
    register(tmp_path / "gone", environ)  # never made, or removed since
    register(kept, environ)
    assert projects(environ) == [kept]
    assert MAX_PROJECTS == 1000
