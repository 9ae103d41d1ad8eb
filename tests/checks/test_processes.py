"""proc.stray over real captures; the classification of live PIDs is tested in tests/procs/."""

from dataclasses import replace

from gpudoc.checks._common import CheckContext
from gpudoc.checks.processes import check_stray
from gpudoc.facts.model import DeviceOpener, DeviceUsers, ProcessInfo
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A5000, DOCKER, H100_MIG_CSV, HOST, RTX3080, T4, only, snap


def test_snapshot_processes_are_info_grouped_per_gpu():
    findings = check_stray(snap(A5000), EMPTY, CheckContext())
    assert [f.severity for f in findings] == [Severity.INFO, Severity.INFO]
    assert findings[0].title == "GPU 0: 1 process(es) of the snapshot's machine hold 21.9 GiB"
    assert "ps -o user,pid,ppid,cmd -p 100477" in findings[0].remedy


def test_memory_with_no_process_in_a_container_is_for_the_host_to_look_at():
    findings = check_stray(snap(DOCKER, host=replace(HOST, in_container=True)), EMPTY, CheckContext())
    f = only(findings, Severity.WARN)
    assert f.title == "GPU 0: 10.7 GiB in use with no process listed"
    assert "outside this container" in f.remedy and "fuser" not in f.remedy
    assert f.affects == ("gpu:0",)


def test_memory_with_no_process_on_bare_metal_is_looked_for_with_fuser():
    # Bare metal, and gpudoc could not look at the device files itself (facts from elsewhere).
    f = only(check_stray(snap(DOCKER), EMPTY, CheckContext()), Severity.WARN)
    assert f.remedy.startswith("sudo fuser -v /dev/nvidia*") and "container" not in f.remedy + f.detail


def test_memory_with_no_process_where_gpudoc_cannot_tell_names_both_places():
    f = only(check_stray(snap(DOCKER, host=replace(HOST, in_container=None)), EMPTY, CheckContext()), Severity.WARN)
    assert "on the host if this is a container" in f.remedy and "sudo fuser -v /dev/nvidia*" in f.remedy


def test_bare_metal_device_file_holders_are_named_with_what_to_do():
    mine = ProcessInfo(pid=4242, visible=True, user="me", uid=1000, name="python", ppid=1, pgid=4242,
                       create_time=1.0, orphaned=True)
    facts = replace(snap(DOCKER, live=True), processes=(mine,),
                    device_users=DeviceUsers((DeviceOpener(4242, None),)))
    findings = check_stray(facts, EMPTY, CheckContext())
    unlisted = next(f for f in findings if f.affects == ("gpu:0",))
    assert "PID 4242 has the GPU's device file open" in unlisted.detail
    assert unlisted.remedy == "stop the processes listed as holding the GPU open, then check again"
    holder = next(f for f in findings if "pid:4242" in f.affects)
    assert holder.title == "GPU 0: your orphaned process holds memory (N/A)"
    assert "device file open" in holder.detail
    assert holder.remedy.startswith("kill -TERM 4242")


def test_bare_metal_with_no_holder_found_says_whether_root_would_see_more():
    hidden = replace(snap(DOCKER, live=True), device_users=DeviceUsers((), unreadable=3))
    f = only(check_stray(hidden, EMPTY, CheckContext()), Severity.WARN)
    assert f.remedy == "sudo fuser -v /dev/nvidia*  # 3 other users' processes need root to see"
    seen_all = replace(hidden, device_users=DeviceUsers())
    f = only(check_stray(seen_all, EMPTY, CheckContext()), Severity.WARN)
    assert f.remedy.startswith("sudo nvidia-smi --gpu-reset -i 0")
    assert "no process on this machine has the GPU open" in f.detail


def test_desktop_processes_are_not_worth_a_warning():
    findings = check_stray(snap(RTX3080, live=True), EMPTY, CheckContext())
    # Xorg (550 MiB) and firefox (541 MiB) are PIDs this namespace cannot see: flagged; the
    # small ones (gnome-shell 18 MiB, edge 79 MiB, code 159 MiB) are invisible too and still listed.
    assert all(f.severity is Severity.WARN for f in findings)
    assert {f.affects[1] for f in findings} == {"pid:835", "pid:4044", "pid:1481", "pid:2214", "pid:42416"}


def test_another_users_job_is_never_killed_and_names_the_owner():
    facts = snap(T4, live=True)
    facts = replace(facts, processes=(
        ProcessInfo(pid=5762, visible=True, user="alice", uid=1001, name="python", ppid=5000, create_time=1.0),
        ProcessInfo(pid=675, visible=True, user="root", uid=0, name="Xorg", ppid=1, create_time=1.0),
    ))
    findings = check_stray(facts, EMPTY, CheckContext())
    f = only(findings, Severity.WARN)  # Xorg's 22 MiB is ignored
    assert f.title == "GPU 0: alice's process holds 1005.0 MiB"
    assert f.remedy.startswith("ask alice to stop PID 5762") and "kill" not in f.remedy.split("(")[0]


def test_leftover_of_a_gpudoc_run_points_at_clean():
    facts = snap(T4, live=True)
    facts = replace(facts, processes=(
        ProcessInfo(pid=5762, visible=True, user="me", uid=1000, name="python", ppid=1, pgid=5700,
                    create_time=1_700_000_100.0, orphaned=True, gpudoc_run_id="20240101-000000-abcdef",
                    gpudoc_run_live=False),
    ))
    findings = check_stray(facts, EMPTY, CheckContext())
    f = next(x for x in findings if "pid:5762" in x.affects)
    assert f.severity is Severity.WARN
    assert f.title == "GPU 0: leftover of gpudoc run 20240101-000000-abcdef holds 1005.0 MiB"
    assert f.remedy == "gpudoc clean --gpus 0"


def test_zombie_remedy_signals_the_parent():
    facts = replace(snap(T4, live=True), processes=(
        ProcessInfo(pid=5762, visible=True, user="me", uid=1000, ppid=4242, status="zombie", zombie=True),))
    f = next(x for x in check_stray(facts, EMPTY, CheckContext()) if "pid:5762" in x.affects)
    assert f.remedy.startswith("kill -TERM 4242")


def test_source_without_processes_skips():
    [f] = check_stray(snap(H100_MIG_CSV), EMPTY, CheckContext())
    assert f.severity is Severity.SKIP and "--query-compute-apps" in f.remedy
