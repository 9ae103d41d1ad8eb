"""A word when a run ends: the user's own command, a desktop notification, a bell."""

from __future__ import annotations

import os
import sys

import pytest

from gpudoc.commands.notify import tell_the_end
from gpudoc.profiles.model import Profile
from gpudoc.runs.record import RunRecord
from tests.conftest import captured_workspace, gpudoc_cli


def test_the_notify_command_is_told_about_the_run(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(
        '[run]\nnotify = "env | grep ^GPUDOC_RUN_ | sort > told.txt; echo ran >> told.txt"\n')
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "import sys; sys.exit(3)", cwd=isolated_home)
    assert done.returncode == 3  # the job's status, whatever the command does
    told = dict(line.split("=", 1) for line in (isolated_home / "told.txt").read_text().splitlines() if "=" in line)
    assert told["GPUDOC_RUN_STATUS"] == "failed" and told["GPUDOC_RUN_EXIT_CODE"] == "3"
    assert told["GPUDOC_RUN_CAUSE"] == "error" and float(told["GPUDOC_RUN_DURATION_S"]) >= 0
    assert told["GPUDOC_RUN_LOG"].endswith(f"{told['GPUDOC_RUN_ID']}/output.log")
    assert os.path.isfile(told["GPUDOC_RUN_LOG"])


def test_a_failing_notify_command_is_one_line_and_changes_nothing(isolated_home):
    (isolated_home / "gpudoc.toml").write_text('[run]\nnotify = "echo no webhook >&2; exit 7"\n')
    done = gpudoc_cli("run", "--no-check", "--", sys.executable, "-c", "pass", cwd=isolated_home)
    assert done.returncode == 0
    assert "gpudoc: [run] notify exited 7: no webhook" in done.stderr


def _record(duration: float) -> RunRecord:
    return RunRecord(id="20260101-000000000-abcdef", command=["python"], cwd="/", status="ok", duration_s=duration)


def test_a_long_run_rings_and_notifies_the_desktop_a_short_one_does_not(tmp_path):
    import pty

    fake = tmp_path / "bin"
    fake.mkdir()
    sender = fake / "notify-send"
    sender.write_text(f"#!/bin/sh\nprintf '%s|%s\\n' \"$1\" \"$2\" >> {tmp_path / 'desktop.txt'}\n")
    sender.chmod(0o755)
    master, slave = pty.openpty()
    with open(slave, "w", closefd=False) as terminal:
        ws = captured_workspace(tmp_path, environ={"PATH": f"{fake}:/usr/bin:/bin", "DISPLAY": ":0"})
        ws.console.err = terminal  # gpudoc's stderr is a terminal here
        profile = Profile(name="p", run={"bell_after_s": 10})
        tell_the_end(_record(3.0), profile, ws)
        assert not (tmp_path / "desktop.txt").exists()
        tell_the_end(_record(30.0), profile, ws)
    assert os.read(master, 16) == b"\a"
    assert (tmp_path / "desktop.txt").read_text() == "gpudoc: run 20260101-000000000-abcdef ok|\n"
    os.close(master)
    os.close(slave)


# -- the notify command is code run as the user (SPEC "Trust") -------------------------------------

NOBODY = 65534


def _notify(tmp_path, command: str, profile_file) -> str:
    ws = captured_workspace(tmp_path)
    tell_the_end(_record(1.0), Profile(name="p", path=profile_file, chain=(profile_file,), run={"notify": command}), ws)
    return ws.console.err.getvalue()


def test_a_profile_others_could_rewrite_while_the_job_ran_does_not_run_its_command(tmp_path):
    profile = tmp_path / "gpudoc.toml"
    profile.write_text('[run]\nnotify = "touch NOTIFIED"\n')
    assert _notify(tmp_path, "touch NOTIFIED", profile) == ""  # the user's own: it runs
    assert (tmp_path / "NOTIFIED").exists()
    (tmp_path / "NOTIFIED").unlink()
    os.chmod(profile, 0o666)  # by the end of the run, anybody could have put their command there
    said = _notify(tmp_path, "touch NOTIFIED", profile)
    assert said.startswith(f"gpudoc: [run] notify: {profile} (owner ") and "every user (mode 0666): refused, not run" in said
    assert said.count("\n") == 1 and not (tmp_path / "NOTIFIED").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file another owner needs root (CI is root)")
def test_a_notify_script_another_user_owns_is_refused_naming_its_owner(tmp_path):
    profile = tmp_path / "gpudoc.toml"
    profile.write_text('[run]\nnotify = "./hook.sh --quiet"\n')
    hook = tmp_path / "hook.sh"
    hook.write_text("#!/bin/sh\ntouch NOTIFIED\n")
    hook.chmod(0o755)
    os.chown(hook, NOBODY, NOBODY)
    said = _notify(tmp_path, "./hook.sh --quiet", profile)
    assert said == (f"gpudoc: [run] notify: {hook} belongs to nobody, not to you (root): refused, not run "
                    "(if you trust it, copy it to a file of your own and use that)\n")
    assert not (tmp_path / "NOTIFIED").exists()


# -- the notify command runs detached, within its own limit, and costs gpudoc a bounded tail ------

def _profile_file(tmp_path):
    profile = tmp_path / "gpudoc.toml"
    profile.write_text("[run]\n")
    return profile


def test_a_notify_command_that_backgrounds_a_process_does_not_hold_gpudoc(tmp_path):
    import time

    started = time.monotonic()
    said = _notify(tmp_path, f"sleep 20 & echo $! > {tmp_path / 'child'}; echo $$ > {tmp_path / 'shell'}",
                   _profile_file(tmp_path))
    assert said == "" and time.monotonic() - started < 5
    child, shell = int((tmp_path / "child").read_text()), int((tmp_path / "shell").read_text())
    assert os.getsid(child) == shell != os.getsid(0)  # detached: a session of its own, not gpudoc's terminal's
    os.kill(child, 9)


def test_a_notify_command_past_its_limit_is_stopped_with_everything_it_started(tmp_path, monkeypatch):
    import time

    from gpudoc.commands import notify
    from tests.procs.test_bounded import gone_soon

    monkeypatch.setattr(notify, "COMMAND_TIMEOUT_S", 1.0)
    started = time.monotonic()
    said = _notify(tmp_path, f"sleep 300 & echo $! > {tmp_path / 'child'}; sleep 300", _profile_file(tmp_path))
    assert said == "gpudoc: [run] notify: stopped after 1 s without finishing\n"
    assert time.monotonic() - started < 5
    child = int((tmp_path / "child").read_text())
    assert gone_soon(child), "the notify command's child lives on past its limit"


def test_a_notify_command_printing_hundreds_of_megabytes_costs_a_tail(tmp_path):
    import subprocess

    code = ("import sys\nfrom pathlib import Path\n"
            "from tests.commands.test_notify import _notify\n"
            "said = _notify(Path(sys.argv[1]), 'head -c 150000000 /dev/zero | tr \"\\\\0\" x >&2; echo >&2; "
            "echo the webhook said no >&2; exit 9', Path(sys.argv[1]) / 'gpudoc.toml')\n"
            "print(repr(said)); print(int(next(l.split()[1] for l in open('/proc/self/status') if l.startswith('VmHWM:'))))\n")
    _profile_file(tmp_path)
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    said, rss_kib = done.stdout.splitlines()[-2:]
    assert said == repr("gpudoc: [run] notify exited 9: the webhook said no\n"), done.stderr[-2000:]
    # VmHWM, the process's own peak (ru_maxrss would carry the forking pytest worker's across exec)
    assert int(rss_kib) < 150 * 1024, f"{int(rss_kib) // 1024} MiB for a notify command's 150 MB"
