"""``check --json`` on real NVML, and a stray found, classified and ended.

Two processes of the kit hold memory: a 10 GiB one orphaned (its parent has exited: a stray) and a
1 GiB one that stays the section's child (a live job). ``check`` must name the stray, ``clean
--dry-run`` must plan to end it and only it, and ``clean --yes`` must end it while the live one runs on.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from runner import JOBS, Kit, Result, SectionSkipped, end_group

STRAY_GIB = 10
LIVE_GIB = 1


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie is gone for every purpose here (it holds no memory).
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _wait_ready(path: Path, limit: float) -> int | None:
    until = time.monotonic() + limit
    while time.monotonic() < until:
        if path.exists():
            return int(path.read_text())
        time.sleep(0.2)
    return None


def _findings_about(check: dict, pid: int) -> list[dict]:
    return [f for f in check.get("findings", []) if f"pid:{pid}" in (f.get("affects") or [])]


def run(kit: Kit, result: Result) -> None:
    first = kit.gpudoc("check", "--json", timeout=20)
    doc = first.json()
    facts = doc["facts"]
    result["check_seconds"] = round(first.seconds, 2)
    result["exit_code"] = first.returncode
    result["summary"] = doc.get("summary")
    result["driver_version"] = facts.get("driver_version")
    result["cuda_driver_version"] = facts.get("cuda_driver_version")
    result["gpus"] = [{k: g.get(k) for k in ("index", "name", "memory_total_bytes", "memory_used_bytes",
                                              "memory_free_bytes", "compute_capability", "persistence_mode")}
                      for g in facts.get("gpus") or []]
    result["gpu_processes_before"] = [p.get("pid") for g in facts.get("gpus") or [] for p in g.get("processes") or []]
    result["failing_findings"] = [f["id"] + ": " + f["title"] for f in doc.get("findings", [])
                                  if f.get("severity") in ("fail", "error")]
    if kit.cpu or not facts.get("gpus"):
        raise SectionSkipped("no GPU visible to NVML: check --json ran, the stray test needs a GPU"
                             + ("" if kit.cpu else f" ({facts.get('nvml_error')})"))

    ready_stray, ready_live = kit.work / "stray.pid", kit.work / "live.pid"
    # The stray: holder.py forks and its first process exits at once, so the holder is an orphan.
    # Their output goes to a file: an orphan holding the section's pipe would hold the section open.
    log = (kit.work / "holders.log").open("ab")
    launcher = subprocess.run([kit.python, str(JOBS / "holder.py"), "--gib", str(STRAY_GIB), "--ready",
                               str(ready_stray), "--orphan", "--seconds", "90"], env=kit.env(), timeout=10,
                              stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    live = subprocess.Popen([kit.python, str(JOBS / "holder.py"), "--gib", str(LIVE_GIB), "--ready",
                             str(ready_live), "--seconds", "90"], env=kit.env(), start_new_session=True,
                            stdin=subprocess.DEVNULL, stdout=log, stderr=log)
    stray_pid = live_pid = None
    try:
        stray_pid = _wait_ready(ready_stray, 20) if launcher.returncode == 0 else None
        live_pid = _wait_ready(ready_live, 15)
        result["stray_pid"], result["live_pid"] = stray_pid, live_pid
        if stray_pid is None or live_pid is None:
            result["status"] = "fail"
            result["reason"] = "the kit's holders did not take their memory in time"
            result["holders_log"] = (kit.work / "holders.log").read_text(errors="replace")[-1000:]
            return
        second = kit.gpudoc("check", "--json", timeout=15).json()
        about = _findings_about(second, stray_pid)
        result["stray_findings"] = [{k: f.get(k) for k in ("severity", "title", "detail", "remedy")} for f in about]
        result["live_findings"] = [{k: f.get(k) for k in ("severity", "title")} for f in _findings_about(second, live_pid)]
        result["nvml_lists"] = {str(g.get("index")): [(p.get("pid"), p.get("used_memory_bytes")) for p in g.get("processes") or []]
                                for g in second["facts"].get("gpus") or []}
        plan = kit.gpudoc("clean", "--dry-run", "--json", timeout=15).json()
        targets = plan.get("targets") or []
        result["planned"] = [{"pid": t.get("pid"), "kind": t.get("kind"), "bytes": t.get("bytes")} for t in targets]
        cleaned = kit.gpudoc("clean", "--yes", "--json", timeout=25)
        result["clean_exit_code"] = cleaned.returncode
        result["clean_seconds"] = round(cleaned.seconds, 2)
        ended = cleaned.json().get("result") or {}
        result["clean_result"] = ended
        time.sleep(0.5)
        result["stray_alive_after"] = _alive(stray_pid)
        result["live_alive_after"] = live.poll() is None
        planned_pids = {t.get("pid") for t in targets}
        checks = {
            "check names the stray": bool(about),
            "classified as an orphan": any(t.get("pid") == stray_pid and t.get("kind") in ("own_other", "orphan_of_run")
                                           for t in targets),
            "only the stray planned": planned_pids == {stray_pid},
            # The stray shares the section's process group, whose leader (the section) runs on: a
            # group signal would end the kit itself.
            "the remedy signals the stray alone": bool(about) and all("kill -TERM -" not in (f.get("remedy") or "")
                                                                       for f in about),
            "stray ended": not result["stray_alive_after"],
            "live job left running": result["live_alive_after"],
        }
        result["checks"] = checks
        failed = [name for name, ok in checks.items() if not ok]
        result["status"] = "fail" if failed else "pass"
        result["reason"] = ("not: " + "; ".join(failed)) if failed else "stray found, classified and ended; live job kept"
    finally:
        if stray_pid is not None and _alive(stray_pid):
            os.kill(stray_pid, 9)  # the kit's own process: never left behind
        if live.poll() is None:
            end_group(live.pid)
        live.wait()
        log.close()
