"""The plan: install gpudoc from the carried wheels (on the GPU machine), run each section in a process
of its own under its own time limit, and write one JSON report and a short summary.

A section that finds its capability missing is ``skipped`` with the reason; one that crashes or runs
past its limit is ``fail`` with what it had measured by then. The kit never imports torch itself.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

from runner import KIT, LIMITS_S, REPO, SECTIONS, TOTAL_S, Kit, Result, SectionSkipped, end_group

# On the CPU the same plan has no device minutes to save, but a 2-core machine imports slowly.
CPU_LIMIT_S = 240
WHEELS = REPO / ".gpukit"
_VERSIONS = ("torch", "transformers", "peft", "accelerate", "lightning", "nvidia-ml-py", "psutil")


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="bench/gpu/validate",
        description="gpudoc's GPU validation kit: check, estimate, oom_chain, overhead, tune.")
    parser.add_argument("--cpu", action="store_true",
                        help="run the plan here in the running interpreter, every CUDA section skipped")
    parser.add_argument("--out", type=Path, default=None,
                        help="where report.json and summary.txt go (default: $OUT, else ./gpu-report)")
    parser.add_argument("--only", action="append", choices=SECTIONS, metavar="SECTION",
                        help=f"run only this section (again for more): {', '.join(SECTIONS)}")
    parser.add_argument("--wheels", type=Path, default=WHEELS,
                        help="the wheels bench/gpu/prepare made (default: .gpukit/ in the checkout)")
    parser.add_argument("--section", choices=SECTIONS, help=argparse.SUPPRESS)  # a section's own process
    parser.add_argument("--kit", help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def install(wheels: Path, site: Path) -> str | None:
    """gpudoc and what the machine lacks, from wheels, into a directory of their own; ``--no-deps``
    leaves the machine's torch and transformers as they are. Returns an error, or None."""
    found = sorted(str(p) for p in wheels.glob("*.whl")) if wheels.is_dir() else []
    if not any(Path(p).name.startswith("gpudoc-") for p in found):
        return f"no gpudoc wheel in {wheels}: run bench/gpu/prepare first, and carry {wheels.name}"
    done = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                           "--no-cache-dir", "--disable-pip-version-check", "--target", str(site), *found],
                          capture_output=True, text=True)
    return None if done.returncode == 0 else f"pip install of the wheels failed: {done.stderr.strip()[-400:]}"


def versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in _VERSIONS:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found[name] = None
    return found


def run_section(kit: Kit, name: str, limit: float) -> dict:
    """The section in its own process group, ended whole at its limit; its figures are what it saved."""
    kit.deadline = time.time() + limit
    state = kit.state / f"{name}.json"
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, str(KIT / "validate"), "--section", name, "--kit", kit.to_json()],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=limit + 5)
        stopped = False
    except subprocess.TimeoutExpired:
        end_group(proc.pid)
        output, _ = proc.communicate()
        stopped = True
    data = json.loads(state.read_text()) if state.exists() else {}
    data["seconds"] = round(time.monotonic() - start, 1)
    data["limit_s"] = limit
    if stopped:
        data["status"], data["reason"] = "fail", f"stopped at its time limit ({limit:.0f} s); figures so far kept"
    elif "status" not in data:
        data["status"] = "fail"
        data["reason"] = f"the section's process ended (exit {proc.returncode}) without a verdict"
    if output.strip() and (data["status"] == "fail" or proc.returncode):
        data["output_tail"] = output.strip()[-1500:]
    return data


def section_main(name: str, kit: Kit) -> int:
    """Inside a section's process: run it, and leave a verdict whatever happens."""
    sys.path.insert(0, str(KIT / "kit"))
    result = Result(kit.state / f"{name}.json")
    try:
        importlib.import_module(f"sec_{name}").run(kit, result)
    except SectionSkipped as reason:
        result.data.update(status="skipped", reason=str(reason))
    except Exception as exc:
        result.data.update(status="fail", reason=f"crashed: {type(exc).__name__}: {exc}"[:500],
                           traceback=traceback.format_exc()[-2000:])
    result.data.setdefault("status", "fail")
    result.data.setdefault("reason", "the section returned without a verdict")
    result.save()
    return 0


def summary(report: dict) -> str:
    lines = [f"gpudoc GPU kit ({report['kit']['mode']}), {report['kit']['seconds']:.0f} s; "
             f"device: {report['kit'].get('device') or 'none'}"]
    for name, section in report["sections"].items():
        lines.append(f"{name:<10} {section['status']:<8} {section.get('reason', '')} ({section.get('seconds', 0)} s)")
        est = section.get("formula")
        if name == "estimate" and est:
            sim = (section.get("simulation") or {}).get("steady_state") or {}
            lines.append(f"           formula median |error| {_pct(est['median_abs_error'])}, "
                         f"{est['under_by_more_than_10pct']} under >10%; simulation (steady state) "
                         f"{_pct(sim.get('median_abs_error'))}, {sim.get('under_by_more_than_10pct')} under >10%")
        if name == "overhead" and section.get("variants"):
            lines.append("           " + ", ".join(f"{v}: {e['ratio']:.3f}x" for v, e in section["variants"].items()))
        if name == "oom_chain" and section.get("attempts"):
            lines.append("           micro batches " + " -> ".join(str(a["micro_batch_size"]) for a in section["attempts"])
                         + f"; {section.get('probe', '')}")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1%}"


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.section:
        return section_main(args.section, Kit.from_json(args.kit))
    out = args.out or Path(os.environ.get("OUT") or "gpu-report")
    out.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="gpudoc-kit-") as tmp:
        work = Path(tmp)
        state = work / "state"
        state.mkdir()
        pythonpath = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        error = None
        if not args.cpu:
            site = work / "site"
            error = install(args.wheels, site)
            pythonpath = os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))
        kit = Kit(args.cpu, work, state, pythonpath)
        report: dict = {"kit": {"mode": "cpu" if args.cpu else "gpu", "versions": versions(),
                                "gpudoc": None, "install_error": error}, "sections": {}}
        if error is None:
            kit.deadline = time.time() + 30
            report["kit"]["gpudoc"] = kit.gpudoc("--version").stdout.strip() or None
        for name in args.only or SECTIONS:
            if error is not None:
                report["sections"][name] = {"status": "fail", "reason": error}
                continue
            left = (CPU_LIMIT_S * len(SECTIONS) if args.cpu else TOTAL_S) - (time.time() - started)
            limit = min(CPU_LIMIT_S if args.cpu else LIMITS_S[name], left)
            if limit <= 1:
                report["sections"][name] = {"status": "fail", "reason": "no time left in the plan"}
                continue
            report["sections"][name] = run_section(kit, name, limit)
            print(f"validate: {name}: {report['sections'][name]['status']} "
                  f"({report['sections'][name]['seconds']} s)", file=sys.stderr, flush=True)
        gpus = report["sections"].get("check", {}).get("gpus") or []
        report["kit"]["device"] = ", ".join(f"{g.get('name')} ({(g.get('memory_total_bytes') or 0) / 2**30:.0f} GiB)"
                                            for g in gpus) or None
        report["kit"]["seconds"] = round(time.time() - started, 1)
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str) + "\n")
    text = summary(report)
    (out / "summary.txt").write_text(text)
    sys.stdout.write(text)
    return 1 if any(s["status"] == "fail" for s in report["sections"].values()) else 0
