"""The probe inside real jobs (CPU torch, real `gpudoc run`, real torchrun): what it observes, what it
records at an OOM, and that the job cannot tell it is there."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path

import pytest

from gpudoc.runs import probe
from tests.conftest import REPO, gpudoc_cli, needs_root

JOB = Path(__file__).resolve().parent / "jobs" / "custom_loop.py"
AGENT = REPO / "gpudoc" / "probe" / "agent.py"
PARAMS = 100 * 32 + 32 * 16 * 100 + 100  # the job's model: embedding, then a linear layer with bias

pytestmark = pytest.mark.slow


def run(work: Path, *job_args: str, switches: tuple[str, ...] = (), launcher: tuple[str, ...] = ("python",),
        env: dict | None = None) -> tuple[int, dict]:
    done = gpudoc_cli("run", "--no-check", *switches, "--", *launcher, str(JOB), *job_args, cwd=work, env=env)
    shown = gpudoc_cli("runs", "show", "--json", cwd=work)
    return done.returncode, json.loads(shown.stdout)["run"]


def test_a_custom_loop_is_observed_as_it_trains(isolated_home):
    code, record = run(isolated_home, "--batch", "4", "--accum", "3", "--steps", "2")
    assert code == 0
    observed = record["observed"]
    assert {k: (v["value"], v["how"]) for k, v in observed.items() if k != "model"} == {
        "micro_batch_size": (4, "input-shape"), "max_seq_len": (16, "input-shape"),
        "gradient_accumulation_steps": (3, "backward-per-step"), "world_size": (1, "single-process"),
        "precision": ("fp32", "parameter-dtype"), "optimizer": ("adamw", "optimizer-step")}
    assert observed["model"] == {"parameters": PARAMS, "trainable": PARAMS, "optimizer_state_dtype": "float32"}
    assert record["steps"]["count"] == 2 and record["steps"]["seconds_per_step"] > 0
    assert record["oom"] is None and record["probe_errors"] is None
    # The flags the job's own parser declares: the only ones gpudoc may ever write into its command.
    [parser] = record["parsers"]
    assert parser["options"] == ["--accum", "--batch", "--bf16", "--compile", "--config", "--help", "--oom-above",
                                 "--oom-at", "--output_dir", "--progress", "--seq", "--steps", "-h"]
    assert parser["values"] == {"batch": 4, "accum": 3, "steps": 2, "seq": 16, "bf16": False, "oom_at": "",
                                "config": "", "output_dir": "out", "oom_above": 0, "progress": False, "compile": False}


def test_a_compiled_job_is_observed_and_compiles_as_it_would_without_the_probe(isolated_home):
    # torch.compile traces the model: the probe's hooks must not break its graph nor make it warn.
    code, record = run(isolated_home, "--batch", "4", "--accum", "2", "--steps", "2", "--compile")
    assert code == 0, record.get("diagnosis")
    observed = record["observed"]
    assert (observed["micro_batch_size"]["value"], observed["gradient_accumulation_steps"]["value"]) == (4, 2)
    assert record["steps"]["count"] == 2 and record["probe_errors"] is None
    log = (isolated_home / ".gpudoc" / "runs" / record["id"] / "output.log").read_text()
    assert log.splitlines() == [line for line in log.splitlines() if re.fullmatch(r"step \d loss [\d.]+", line)]


def test_a_job_refused_by_its_own_parser_leaves_no_probe_file(isolated_home):
    code, record = run(isolated_home, "--batch", "eight")
    assert code == 2 and record["parsers"] is None
    assert not (isolated_home / ".gpudoc" / "runs" / record["id"] / "probe").exists()


def test_every_rank_under_torchrun_reports_and_agrees(isolated_home):
    code, record = run(isolated_home, "--batch", "2", "--accum", "2", "--steps", "2",
                       launcher=("torchrun", "--nproc_per_node", "2"))
    assert code == 0
    observed = record["observed"]
    assert observed["world_size"] == {"value": 2, "how": "process-group", "ranks": [0, 1], "others": {}}
    assert observed["micro_batch_size"]["value"] == 2 and observed["micro_batch_size"]["ranks"] == [0, 1]
    assert observed["gradient_accumulation_steps"]["value"] == 2
    # Only the ranks wrote: not torchrun, which imports torch too.
    assert sorted(p.name for p in (isolated_home / ".gpudoc" / "runs" / record["id"] / "probe").iterdir()) == [
        "rank-0.jsonl", "rank-1.jsonl"]


def test_autocast_is_read_inside_the_forward(isolated_home):
    code, record = run(isolated_home, "--bf16", "--steps", "1")
    assert code == 0 and record["observed"]["precision"] == {"value": "bf16", "how": "autocast", "ranks": [0],
                                                             "others": {}}


@pytest.mark.parametrize(("where", "step"), [("forward", 1), ("backward", 0), ("optimizer", 1)])
def test_an_oom_is_recorded_with_its_phase_step_and_breakdown(isolated_home, where, step):
    code, record = run(isolated_home, "--oom-at", f"{where}:{step}")
    assert code == 1 and record["cause"] == "gpu_oom"
    oom = record["oom"]
    assert (oom["rank"], oom["phase"], oom["step"]) == (0, where, step)
    assert oom["breakdown"]["parameters"] == PARAMS * 4
    # AdamW's two fp32 states per parameter exist once a step has completed (plus its step counters).
    assert (oom["breakdown"]["optimizer_states"] >= 2 * PARAMS * 4) == (step > 0)


def test_an_oom_a_framework_catches_in_backward_is_recorded_with_its_phase(isolated_home):
    # Hydra catches the error, prints it and exits: no exception reaches sys.excepthook.
    done = gpudoc_cli("run", "--no-check", "--", "python", str(JOB.with_name("hydra_job.py")), "+oom_in=backward",
                      cwd=isolated_home)
    record = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]
    assert done.returncode == 1 and record["cause"] == "gpu_oom"
    assert record["oom"] == {"rank": 0, "step": 0, "phase": "backward", "breakdown": {}, "snapshot": None, "top": []}


def test_a_backward_or_step_an_error_left_is_written_once_and_a_completed_one_never(tmp_path):
    import torch

    agent = _agent()
    writer = _writer(agent, tmp_path / "probe")
    writer.torch, writer.ts = torch, agent._sibling("torchstate")
    x = torch.ones(3, requires_grad=True)

    def backward(*then) -> None:
        out = x * 2
        for hook in (writer._backward_begins, *then):
            out.register_hook(hook)
        out.sum().backward()

    def fails(grad):
        raise torch.OutOfMemoryError("CUDA out of memory.")

    backward()  # completed: the engine's callback closed it
    writer._left()
    with pytest.raises(torch.OutOfMemoryError):  # caught, as HF's auto_find_batch_size catches it
        backward(fails)
    writer._forward_begins(torch.nn.Linear(1, 1), (), {})  # the next micro batch: the last backward was abandoned
    writer._step_begins(torch.optim.SGD([x], lr=0.1), (), {})  # an error in the step, then the exit
    writer._left()
    writer._left()
    lines = [json.loads(line) for line in (tmp_path / "probe" / "rank-0.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["step"]) for e in lines if e["event"] == "interrupted"] == [("backward", 0), ("optimizer", 0)]


def test_the_job_cannot_tell_the_probe_is_there(isolated_home):
    outputs = {}
    for switches in ((), ("--no-probe",)):
        work = isolated_home / (switches[0].strip("-") if switches else "probed")
        work.mkdir()
        done = gpudoc_cli("run", "--no-check", *switches, "--", "python", str(JOB), "--oom-at", "backward:2",
                          "--steps", "3", "--progress", cwd=work)
        code, record = done.returncode, json.loads(gpudoc_cli("runs", "show", "--json", cwd=work).stdout)["run"]
        log = (work / ".gpudoc" / "runs" / record["id"] / "output.log").read_bytes()
        outputs[switches] = (code, log.replace(str(work).encode(), b"WORK"))
        assert (record["oom"] is None) == bool(switches)
        assert (work / ".gpudoc" / "runs" / record["id"] / "probe").exists() != bool(switches)
        # What a step cost: the probe's figures, else the job's own tqdm bar; its total (3) from the bar.
        steps = record["steps"]
        assert (steps["source"], steps["count"], steps["total"]) == ("log:tqdm" if switches else "probe", 2, 3)
        assert steps["seconds_per_step"] > 0 and 1 <= len(steps["series"]) <= 2
        assert "  at this pace the 3 steps take " in done.stderr and "; 1 left: " in done.stderr  # the run's end
    # tqdm's clock and rate, and the spaces it pads a shorter line with over the longer one before it.
    outputs = {k: (code, re.sub(rb"\[[^]]*\] *", b"[TIMES]", log)) for k, (code, log) in outputs.items()}
    assert outputs[()] == outputs[("--no-probe",)]
    assert b"Traceback" in outputs[()][1] and b"OutOfMemoryError" in outputs[()][1]


def test_the_users_own_sitecustomize_still_runs_once(isolated_home, tmp_path):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "sitecustomize.py").write_text("import sys\nprint('their sitecustomize ran', file=sys.stderr)\n")
    code, record = run(isolated_home, "--steps", "1", env={"PYTHONPATH": os.pathsep.join([str(theirs), str(REPO)])})
    assert code == 0 and record["observed"]["micro_batch_size"]["value"] == 4
    log = (isolated_home / ".gpudoc" / "runs" / record["id"] / "output.log").read_text()
    assert log.count("their sitecustomize ran") == 1


def test_a_job_that_isolates_its_interpreter_is_simply_not_observed(isolated_home):
    done = gpudoc_cli("run", "--no-check", "--", "python", "-I", str(JOB), "--steps", "1", cwd=isolated_home)
    record = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]
    assert done.returncode == 0 and record["observed"] is None and record["oom"] is None
    said = [line for line in done.stderr.splitlines() if "probe cannot" in line]
    assert said == ["gpudoc: python -I ignores PYTHONPATH: the probe cannot observe this job (nothing else changes)"]
    # What was read before launch (nothing, from this script's flags) does not offer a probe that cannot see.
    assert "read no knob from the command" in done.stderr and "let the probe observe" not in done.stderr
    offered = gpudoc_cli("run", "--dry-run", "--", "python", str(JOB), "--steps", "1", cwd=isolated_home)
    assert "let the probe observe this first run" in offered.stderr
    off = gpudoc_cli("run", "--dry-run", "--no-probe", "--", "python", str(JOB), "--steps", "1", cwd=isolated_home)
    assert "read no knob from the command" in off.stderr and "let the probe observe" not in off.stderr


def test_a_wrapper_script_that_resets_pythonpath_is_said_before_and_after(isolated_home):
    # The job would be observed (the test above without -I); its wrapper drops gpudoc's PYTHONPATH.
    (isolated_home / "run.sh").write_text(f"set -e\nexport PYTHONPATH={REPO}\nexec python {JOB} --steps 1\n")
    done = gpudoc_cli("run", "--no-check", "--", "bash", "run.sh", cwd=isolated_home)
    record = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]
    assert done.returncode == 0 and record["observed"] is None and record["parsers"] is None
    log = (isolated_home / ".gpudoc" / "runs" / record["id"] / "output.log").read_text()
    assert "step 1 loss" in log  # it trained, unobserved
    said = [line for line in done.stderr.splitlines() if "the probe " in line]
    where = f"run.sh, line 2 (export PYTHONPATH={REPO}), resets PYTHONPATH or starts Python ignoring it"
    assert said == [f"gpudoc: {where}: the probe may not observe this job (nothing else changes)",
                    f"gpudoc: the probe saw nothing: no rank of the job wrote ({where})"]
    assert "let the probe observe" not in done.stderr  # what was read before launch offers no probe that may not see


def test_probe_off_in_the_profile(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[run]\nprobe = false\n")
    code, record = run(isolated_home, "--steps", "1")
    assert code == 0 and record["observed"] is None


def test_the_probe_environment_is_the_childs_alone(tmp_path):
    env = probe.child_environment({"PYTHONPATH": "/theirs"}, tmp_path)
    assert env["PYTHONPATH"].split(os.pathsep) == [str(probe.site_dir()), "/theirs"]
    assert (probe.site_dir() / "sitecustomize.py").is_file()
    assert "gpudoc/probe/site" not in os.environ.get("PYTHONPATH", "")


def _agent():
    spec = importlib.util.spec_from_file_location("_gpudoc_probe_agent_test", AGENT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _writer(agent, directory: Path):
    return agent._Probe(str(directory), agent._sibling("settings"))


def test_the_probe_file_is_capped_with_a_last_line_saying_so(tmp_path, monkeypatch):
    agent = _agent()
    monkeypatch.setattr(agent, "CAP_BYTES", 64 * 1024)
    writer = _writer(agent, tmp_path / "probe")
    for n in range(10_000):  # about 1 MB of events
        writer.write("step", n=n, padding="x" * 80)
    path = tmp_path / "probe" / "rank-0.jsonl"
    lines = path.read_text().splitlines()
    assert path.stat().st_size <= 64 * 1024 + 200
    assert json.loads(lines[-1])["event"] == "truncated"


def test_ten_megabytes_of_events_stay_within_the_cap_and_are_read_back(tmp_path):
    agent = _agent()
    writer = _writer(agent, tmp_path / "probe")
    for n in range(1, 10_001):  # 10 MB of events, at the real cap
        writer.write("step", n=n, padding="x" * 1000)
    path = tmp_path / "probe" / "rank-0.jsonl"
    assert path.stat().st_size <= agent.CAP_BYTES
    assert json.loads(path.read_text().splitlines()[-1])["event"] == "truncated"
    read = probe.read(tmp_path)
    assert 3000 < read["steps"]["count"] < 4000 and read["probe_errors"] is None  # the steps within the cap


@needs_root
def test_a_read_only_probe_directory_leaves_the_job_as_it_was(isolated_home):
    # The job mounts a read-only file system where the probe writes (a read-only run directory seen
    # from inside the job): the probe cannot write, and the job runs on to its own OOM and status.
    job = isolated_home / "job.py"
    job.write_text("import os, runpy, subprocess, sys\nprobe = os.environ['GPUDOC_PROBE_DIR']\nos.makedirs(probe)\n"
                   "done = subprocess.run(['mount', '-t', 'tmpfs', '-o', 'ro,size=64k', 'tmpfs', probe])\n"
                   "print('read-only:', done.returncode == 0, flush=True)\n"
                   f"sys.argv = [{str(JOB)!r}, '--oom-at', 'backward:0']\nrunpy.run_path({str(JOB)!r}, run_name='__main__')\n")
    done = gpudoc_cli("run", "--no-check", "--", "python", str(job), cwd=isolated_home)
    probe_dir = next((isolated_home / ".gpudoc" / "runs").glob("*/probe"))
    __import__("subprocess").run(["umount", str(probe_dir)], capture_output=True)
    output = done.stdout + done.stderr  # the job's, passed through, and gpudoc's
    if "read-only: True" not in output:
        pytest.skip("cannot mount a tmpfs here (root without CAP_SYS_ADMIN)")
    assert done.returncode == 1, output
    assert output.count("Traceback") == 1 and "torch.OutOfMemoryError: CUDA out of memory" in output
    assert "_gpudoc_probe" not in output and "agent.py" not in output
    record = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]
    assert record["cause"] == "gpu_oom" and record["observed"] is None


def test_an_unwritable_run_directory_leaves_the_job_unobserved(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    writer = _writer(_agent(), blocker / "probe")
    writer.write("step", n=1)  # never raises into the job
    assert writer.closed


def test_a_hook_that_fails_goes_quiet_after_one_line(tmp_path):
    writer = _writer(_agent(), tmp_path / "probe")
    hook = writer.guarded("demo", lambda: 1 / 0)
    assert hook() is None and hook() is None
    events = [json.loads(line) for line in (tmp_path / "probe" / "rank-0.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "error"] and events[1]["hook"] == "demo"


def test_the_agent_never_imports_torch_itself():
    done = __import__("subprocess").run(
        [sys.executable, "-c", "import sys, os; os.environ['GPUDOC_PROBE_DIR'] = '/nonexistent';"
         f"import importlib.util as u; s = u.spec_from_file_location('a', {str(AGENT)!r}); m = u.module_from_spec(s);"
         "s.loader.exec_module(m); m.install(); print('torch' in sys.modules)"], capture_output=True, text=True)
    assert done.stdout.strip() == "False", done.stderr


HF_JOB = Path(__file__).resolve().parent / "jobs" / "hf_trainer.py"


def test_an_hf_trainer_job_out_of_memory_before_its_first_step_is_read_from_the_trainer(isolated_home):
    # The seed guides' commonest failure: the first micro batch does not fit, so no optimizer step
    # ever completes; the Trainer's own resolved arguments say what the steps would have.
    done = gpudoc_cli("run", "--no-check", "--", "python", str(HF_JOB), "--output_dir", "out",
                      "--per_device_train_batch_size", "4", "--gradient_accumulation_steps", "8", "--max_steps", "2",
                      "--report_to", "none", "--save_strategy", "no", "--oom_in_forward", "--use_cpu",
                      cwd=isolated_home, timeout=300)
    record = json.loads(gpudoc_cli("runs", "show", "--json", cwd=isolated_home).stdout)["run"]
    assert done.returncode == 1 and record["cause"] == "gpu_oom", done.stderr[-2000:]
    observed = {k: (v["value"], v["how"]) for k, v in record["observed"].items() if k != "model"}
    assert observed["micro_batch_size"] == (4, "input-shape")
    assert observed["max_seq_len"] == (32, "input-shape")
    assert observed["gradient_accumulation_steps"] == (8, "framework:hf-trainer")
    assert observed["precision"] == ("fp32", "framework:hf-trainer")
    assert observed["gradient_checkpointing"] == (False, "framework:hf-trainer")
    assert observed["optimizer"][0] == "adamw"
    assert (record["oom"]["phase"], record["oom"]["step"]) == ("forward", 0)
    # The Trainer's own count of the steps it would run (state.max_steps), heard at on_train_begin.
    lines = (isolated_home / ".gpudoc" / "runs" / record["id"] / "probe" / "rank-0.jsonl").read_text().splitlines()
    assert probe.total_from_settings(json.loads(line) for line in lines) == 2
    # HfArgumentParser is an ArgumentParser: the flags it declares are the Trainer's and the job's.
    options = record["parsers"][0]["options"]
    assert {"--per_device_train_batch_size", "--max_seq_length", "--oom_in_forward"} <= set(options)
    assert "--batch_size" not in options


def test_the_probe_code_is_gpudocs_own_never_what_the_jobs_folder_holds(tmp_path):
    """Another user's shared folder holds a `sitecustomize.py` and a `gpudoc/` package beside the
    job: what the probe runs is gpudoc's installation (its sitecustomize, its agent, loaded by
    path), never those, and it still observes the job."""
    import shutil
    import subprocess

    work = tmp_path / "shared"
    work.mkdir()
    shutil.copy(JOB, work / "job.py")
    planted = tmp_path / "planted"
    (work / "sitecustomize.py").write_text(f"open({str(planted)!r} + '-sitecustomize', 'w').write('ran')\n")
    (work / "gpudoc").mkdir()
    for name in ("__init__.py", "agent.py"):
        (work / "gpudoc" / name).write_text(f"open({str(planted)!r} + '-gpudoc', 'w').write('ran')\n")
    (work / "gpudoc" / "probe").mkdir()
    (work / "gpudoc" / "probe" / "agent.py").write_text(f"open({str(planted)!r} + '-agent', 'w').write('ran')\n")
    gpudoc = Path(sys.executable).with_name("gpudoc")  # as the user runs it: its own directory first on sys.path
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"} | {"GPUDOC_HOME": str(tmp_path / "home")}
    done = subprocess.run([str(gpudoc), "run", "--no-check", "--", sys.executable, "job.py", "--steps", "1"],
                          cwd=work, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("planted")) == []
    shown = subprocess.run([str(gpudoc), "runs", "show", "--json"], cwd=work, env=env, capture_output=True,
                           text=True, timeout=120)
    record = json.loads(shown.stdout)["run"]
    assert record["observed"]["micro_batch_size"]["value"] == 4 and record["probe_errors"] is None


def test_the_probe_keeps_no_batch_or_loss_of_the_job_alive(tmp_path):
    # Measured on a GPU: one micro batch of input ids and one 0-dim tensor more at the allocator's
    # peak with the probe on. Reading the loop's frames (the frameworks' settings, at the first step
    # and at an OOM before it) must not keep its variables, nor those of an OOM the loop recovers from.
    import weakref

    import torch

    writer, model, opt = _armed(tmp_path)
    model.register_forward_pre_hook(lambda m, args: _oom_above(torch, args[0], 2))
    freed = []
    for size in (4, 2, 2, 2):  # HF's auto_find_batch_size: the OOM caught, the batch halved
        batch = torch.ones(size, 4)
        try:
            loss = model(batch).sum()
        except torch.OutOfMemoryError:
            refs = [weakref.ref(batch)]
        else:
            loss.backward()
            opt.step()
            refs = [weakref.ref(batch), weakref.ref(loss)]
            del loss
        del batch
        freed.append([ref() is None for ref in refs])
    assert freed == [[True], [True, True], [True, True], [True, True]]
    assert writer.steps == 3 and writer.broken == set()
    events = [json.loads(line) for line in (tmp_path / "probe" / "rank-0.jsonl").read_text().splitlines()]
    assert [(e["phase"], e["step"]) for e in events if e["event"] == "oom"] == [("forward", 0)]


def _oom_above(torch, batch, size: int) -> None:
    if batch.shape[0] > size:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 MiB")


def _armed(tmp_path):
    """The probe armed on a model and its optimizer in this process, through the hooks of those two
    objects only (arming torch's global hooks would outlive the test)."""
    import torch

    agent = _agent()
    writer = _writer(agent, tmp_path / "probe")
    writer.torch, writer.ts, writer._quiet = torch, agent._sibling("torchstate"), None
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    writer._global = model.register_forward_pre_hook(writer.guarded("top", writer._find_top))  # removed once found
    opt.register_step_pre_hook(writer.guarded("step-pre", writer._step_begins))
    opt.register_step_post_hook(writer.guarded("step-post", writer._step_ends))
    return writer, model, opt


def test_an_oom_the_job_recovers_from_in_backward_is_recorded_with_each_batch_it_tried(tmp_path):
    # accelerate's find_executable_batch_size (HF's auto_find_batch_size): the OOM caught, garbage
    # collected inside the except block, the batch halved, the loop started again.
    import gc

    import torch

    writer, model, opt = _armed(tmp_path)
    # Out of memory in the first layer's backward: the last layer's gradients are in by then.
    def fails_in_backward(module, args, out) -> None:
        out.register_hook(lambda grad: _oom_above(torch, grad, 2))

    model[0].register_forward_hook(fails_in_backward)
    hook = writer.guarded("recovery", writer._collecting)
    gc.callbacks.append(hook)
    try:
        for size in (8, 4, 2, 2):
            try:
                model(torch.ones(size, 4)).sum().backward()
            except torch.OutOfMemoryError:
                gc.collect()
                continue
            opt.step()
    finally:
        gc.callbacks.remove(hook)
    events = [json.loads(line) for line in (tmp_path / "probe" / "rank-0.jsonl").read_text().splitlines()]
    assert [(e["event"], e.get("shape", e.get("phase")), e.get("step", e.get("n"))) for e in events
            if e["event"] in ("input", "oom", "step", "interrupted")] == [
        ("input", [8, 4], None), ("oom", "backward", 0), ("input", [4, 4], None), ("oom", "backward", 0),
        ("input", [2, 4], None), ("step", None, 1), ("step", None, 2)]
    # The backward passes of the abandoned micro batches are no accumulation.
    assert [e["backward"] for e in events if e["event"] == "step"] == [1, 1]


def test_autocast_a_wrapper_enters_inside_the_forward_is_the_precision(tmp_path):
    # accelerate (HF's --bf16, Lightning's bf16-mixed) wraps the model's forward in autocast: the top
    # module's pre-hook runs before the wrapper enters it, with the parameters in fp32. Seen on an
    # H100, the relaunch of a --bf16 HF job was observed as fp32.
    import functools

    import torch

    writer, model, opt = _armed(tmp_path)
    assert writer.autocast is None
    inner = model.forward

    @functools.wraps(inner)
    def autocast_forward(*args, **kwargs):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return inner(*args, **kwargs)

    model.forward = autocast_forward
    for _ in range(2):
        model(torch.ones(2, 4)).float().sum().backward()
        opt.step()
    steps = [json.loads(line) for line in (tmp_path / "probe" / "rank-0.jsonl").read_text().splitlines()]
    assert [e["autocast"] for e in steps if e["event"] == "step"] == ["bfloat16", "bfloat16"]
    assert all(not child._forward_pre_hooks for child in model.children())  # read once, then gone
