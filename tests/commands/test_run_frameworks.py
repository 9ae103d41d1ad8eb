"""The job as it is, with the real frameworks: no profile, the user's own command line and config
files. Each job builds a tiny model from a config and raises CUDA's OOM error (as torch words it)
above a per-device batch threshold; `gpudoc run --retry-oom` must make it fit by editing the place
the framework reads, and the framework itself prints the batch, accumulation and world size it ran
with. The HF Trainer's chain runs under `torchrun --nproc_per_node=2` (gloo) so that the world size
takes part in the arithmetic; the others run one process, torchtune through its own `tune run`. A
set-up test_observed_frameworks.py asks about too is one chain, run once (tests/commands/chains.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpudoc.runs.store import RunStore
from tests.commands import chains
from tests.commands.chains import LIGHTNING_CFG
from tests.conftest import CONFIGS, gpudoc_cli, shared_once

JOBS = chains.FRAMEWORK_JOBS
pytestmark = pytest.mark.slow

HF_FLAGS = ["--output_dir", "out", "--max_steps", "1", "--use_cpu", "--report_to", "none", "--log_level", "info",
            "--save_strategy", "no", "--disable_tqdm", "True", "--per_device_train_batch_size", "8",
            "--gradient_accumulation_steps", "2"]


def _launch(nproc: int, script: str, *args: str) -> list[str]:
    head = ["torchrun", "--standalone", f"--nproc_per_node={nproc}", "--monitor-interval=0.1"] if nproc > 1 else ["python"]
    return [*head, script, *args]


def _job_dir(tmp_path: Path) -> Path:
    for job in JOBS.glob("*.py"):
        shutil.copy(job, tmp_path / job.name)
    return tmp_path


def _retry(tmp_path: Path, command: list[str], *, oom_above: int, retries: int = 2, **env: str):
    done = gpudoc_cli("run", "--no-check", "--retry-oom", str(retries), "--", *command, cwd=tmp_path,
                      env={"OOM_ABOVE": str(oom_above), "OMP_NUM_THREADS": "1", **env}, timeout=300)
    records = sorted(RunStore(tmp_path / ".gpudoc").records(), key=lambda r: r.started_at or "")
    return done, records


def _last_log(tmp_path: Path, records) -> str:
    return RunStore(tmp_path / ".gpudoc").log_path(records[-1].id).read_text(errors="replace")


def _hf_chain(tmp_path_factory, nproc: int) -> tuple[Path, subprocess.CompletedProcess, list]:
    """The HF Trainer's --retry-oom chain from HF_FLAGS under ``nproc`` processes, run once per test
    session (tests/conftest.py shared_once): the test of the halving and the test of `profile new
    --from-run` read the same chain. Its directory, gpudoc's answer and its records, oldest first."""
    def make(where: Path) -> None:
        (where / "job").mkdir()
        done, _ = _retry(_job_dir(where / "job"), _launch(nproc, "hf_trainer.py", *HF_FLAGS), oom_above=4)
        (where / "done.json").write_text(json.dumps([done.returncode, done.stdout, done.stderr]))

    where = shared_once(tmp_path_factory, f"hf-trainer-chain-{nproc}", make)
    returncode, stdout, stderr = json.loads((where / "done.json").read_text())
    cwd = where / "job"
    records = sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")
    return cwd, subprocess.CompletedProcess([], returncode, stdout, stderr), records


def test_hf_trainer_flags_are_halved_on_the_command_line(tmp_path_factory):
    nproc = 2  # the other HF chains run one process
    cwd, done, records = _hf_chain(tmp_path_factory, nproc)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(records) == 2  # the allocator rung cannot cover the shortfall: it rides with the halving
    first, last = records
    assert first.profile["source"] == "command"
    assert first.profile["knobs"]["micro_batch_size"] == {"value": 8, "where": "argv:--per_device_train_batch_size"}
    assert first.cause == "gpu_oom" and last.cause == "ok"
    assert last.argv[last.argv.index("--per_device_train_batch_size") + 1] == "4"
    assert last.argv[last.argv.index("--gradient_accumulation_steps") + 1] == "4"
    log = _last_log(cwd, records)
    # The Trainer's own account of what it ran: the halved batch, the doubled accumulation, the
    # world torchrun gave it, and the global batch unchanged.
    assert re.search(r"Instantaneous batch size per device = 4\b", log)
    assert re.search(r"Gradient Accumulation steps = 4\b", log)
    assert re.search(rf"Total train batch size \(w\. parallel, distributed & accumulation\) = {16 * nproc}\b", log)
    assert not (cwd / "gpudoc.toml").exists()  # nothing written that the user did not ask for
    # What the probe saw in every rank: the same knobs, the global batch exact on both sides, the
    # relaunch's accumulation counted from its own backward passes, the OOM in the forward.
    seen = [{k: (v["value"], v["how"], v["ranks"]) for k, v in r.observed.items() if k != "model"} for r in records]
    assert seen[0]["micro_batch_size"] == (8, "input-shape", [0, 1])
    assert seen[0]["gradient_accumulation_steps"] == (2, "framework:hf-trainer", [0, 1])
    assert seen[0]["world_size"] == (2, "framework:hf-trainer", [0, 1])  # no step yet: the Trainer's own
    assert seen[1]["micro_batch_size"] == (4, "input-shape", [0, 1])
    assert seen[1]["gradient_accumulation_steps"] == (4, "backward-per-step", [0, 1])
    assert {r.oom["phase"] for r in records if r.oom} == {"forward"} and records[1].oom is None


def test_hf_trainer_that_ignores_its_flag_is_stopped_after_one_relaunch(tmp_path):
    cwd = _job_dir(tmp_path)
    done, records = _retry(cwd, _launch(1, "hf_trainer.py", *HF_FLAGS), oom_above=4, retries=3, HARD_CODED_BATCH="8")
    assert done.returncode == 1
    assert len(records) == 2
    # What the relaunch's probe saw it train with decides (over what the Trainer printed).
    assert ("gpudoc: micro_batch_size = 4 did not reach the job: the probe saw the job still train with "
            "micro_batch_size = 8, not 4; gpudoc wrote it to argv:--per_device_train_batch_size and the job did not "
            "use it") in done.stderr
    assert "--retry-oom 2/3" not in done.stderr
    # The accumulation did arrive (4 backward passes a step): only the batch is named.
    assert records[1].arrival == {
        "missing": {"micro_batch_size": "the probe saw the job still train with micro_batch_size = 8, not 4"},
        "confirmed": ["gradient_accumulation_steps"],
        "source": {"micro_batch_size": "probe", "gradient_accumulation_steps": "probe"}}


LIGHTNING_RUN_FALSE = """\
from lightning.pytorch.cli import LightningCLI
from lightning_cli import Numbers, Regressor

cli = LightningCLI(Regressor, Numbers, run=False, save_config_callback=None)
cli.trainer.fit(cli.model, cli.datamodule)
"""


def test_lightning_config_alone_is_read_where_the_batch_lives(tmp_path):
    # run=False: no subcommand at all, the config is everything the command says. (The edit of
    # data.batch_size in that file: the chain of the config-file test below.)
    cwd = _job_dir(tmp_path)
    (cwd / "lightning_run_false.py").write_text(LIGHTNING_RUN_FALSE)
    (cwd / "cfg.yaml").write_text(LIGHTNING_CFG)
    dry = gpudoc_cli("run", "--dry-run", "--", *_launch(1, "lightning_run_false.py", "--config", "cfg.yaml"), cwd=cwd)
    assert dry.returncode == 0, dry.stderr
    [read] = [line for line in dry.stderr.splitlines() if line.startswith("gpudoc: read from the command (lightning): ")]
    assert "gradient_accumulation_steps = 2 (file:cfg.yaml:trainer.accumulate_grad_batches)" in read
    assert "micro_batch_size = 8 (file:cfg.yaml:data.batch_size)" in read


def test_lightning_config_before_the_subcommand_is_read_and_edited(tmp_path):
    # A config before the subcommand is the top-level parser's: its keys sit under "fit".
    cwd = _job_dir(tmp_path)
    (cwd / "cfg.yaml").write_text("fit:\n" + "".join(f"  {line}\n" for line in LIGHTNING_CFG.splitlines()))
    command = _launch(1, "lightning_cli.py", "--config", "cfg.yaml", "fit")
    done, records = _retry(cwd, command, oom_above=4)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "no knobs" not in done.stderr
    assert [r.cause for r in records] == ["gpu_oom", "ok"]
    assert records[0].profile["knobs"]["micro_batch_size"] == {"value": 8, "where": "file:cfg.yaml:fit.data.batch_size"}
    assert records[-1].argv == command
    text = (cwd / "cfg.yaml").read_text()
    assert "batch_size: 4\n" in text and "accumulate_grad_batches: 4   # per optimizer step\n" in text
    log = _last_log(cwd, records)
    assert "lightning: batch_size=4 accumulate_grad_batches=4 precision=32-true world_size=1" in log


def test_hydra_override_is_edited_not_the_file_it_beats(tmp_path):
    cwd = _job_dir(tmp_path)
    (cwd / "conf" / "data_loader").mkdir(parents=True)
    (cwd / "conf" / "config.yaml").write_text(
        "defaults:\n  - data_loader: default\n  - _self_\ntrainer:\n  accumulate_grad_batches: 5\n")
    (cwd / "conf" / "data_loader" / "default.yaml").write_text("batch_size: 32\nnum_workers: 0\n")
    done, records = _retry(cwd, _launch(1, "hydra_job.py", "data_loader.batch_size=45"), oom_above=16)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r.cause for r in records] == ["gpu_oom", "ok"]
    # 45 x 5 = 225 kept exact: 15 x 15, not 22 x 10.
    assert records[-1].argv[-1] == "data_loader.batch_size=15"
    assert (cwd / "conf" / "data_loader" / "default.yaml").read_text() == "batch_size: 32\nnum_workers: 0\n"
    assert "  accumulate_grad_batches: 15\n" in (cwd / "conf" / "config.yaml").read_text()
    log = _last_log(cwd, records)
    assert "hydra: batch_size=15 accumulate_grad_batches=15 world_size=1 global_batch=225" in log


def test_torchtune_override_is_edited_and_the_config_file_where_it_holds_the_knob(tmp_path_factory):
    chain = chains.torchtune(tmp_path_factory)  # the one test_observed_frameworks.py reads
    assert chain.status == 0, chain.said[-3000:]
    cwd = chain.cwd
    records = sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")
    assert [r.cause for r in records] == ["gpu_oom", "gpu_oom", "ok"]
    assert records[0].knob_places["micro_batch_size"] == "argv:batch_size"
    # 16 -> 8 -> 4: the second halving goes below the file's own 8, and the override still wins.
    assert [r.knobs["micro_batch_size"] for r in records] == [16, 8, 4]
    assert "hard-codes" not in chain.said and "the profile" not in chain.said
    assert records[-1].argv[-1] == "batch_size=4"
    edited = chains.TORCHTUNE_CFG.replace("accumulation_steps: 2", "accumulation_steps: 8")
    assert (cwd / "cfg.yaml").read_text() == edited  # the comment beside the value kept
    log = _last_log(cwd, records)
    assert "torchtune: batch_size=4 gradient_accumulation_steps=8 world_size=1" in log
    # torchtune's own resolved-config dump confirms both changes arrived.
    assert records[-1].arrival["missing"] == {}
    assert sorted(records[-1].arrival["confirmed"]) == ["gradient_accumulation_steps", "micro_batch_size"]


def test_profile_new_from_run_writes_what_was_read(tmp_path_factory, tmp_path):
    shared, done, records = _hf_chain(tmp_path_factory, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    cwd = tmp_path / "job"
    shutil.copytree(shared, cwd, symlinks=True)  # the chain's own directory stays as it ran: this test writes
    command = _launch(2, "hf_trainer.py", *HF_FLAGS)
    made = gpudoc_cli("profile", "new", "mine", "--from-run", cwd=cwd)
    assert made.returncode == 0, made.stderr
    text = (cwd / ".gpudoc" / "profiles" / "mine.toml").read_text()
    schema, header = text.splitlines()[:2]  # the schema editors read, then what the run launched
    assert schema.startswith("#:schema /") and schema.endswith("gpudoc-profile.schema.json")
    assert header.startswith(f"# Read by gpudoc from run {records[-1].id}: ")
    assert " --per_device_train_batch_size 4 " in header and " --per_device_train_batch_size 8 " not in header
    assert "micro_batch_size = 4 # argv:--per_device_train_batch_size" in text
    assert 'args = "hf-trainer"' in text and 'PYTORCH_ALLOC_CONF = "expandable_segments:True"' in text
    # The profile now describes the job: run with it as typed, it launches the halved batch.
    dry = gpudoc_cli("run", "--dry-run", "--json", "-p", "mine", "--", *command, cwd=cwd)
    assert dry.returncode == 0, dry.stderr
    argv = json.loads(dry.stdout)["argv"]
    assert argv[argv.index("--per_device_train_batch_size") + 1] == "4"
    wrong = gpudoc_cli("profile", "new", "other", "--from-run", "nosuchrun", cwd=cwd)
    assert wrong.returncode == 2 and "nosuchrun" in wrong.stderr and "Traceback" not in wrong.stderr


def _complete(folder: Path) -> Path:
    """A checkpoint directory gpudoc takes for a whole save (its trainer state and weights)."""
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": int(folder.name.split("-")[1])}))
    (folder / "model.safetensors").write_bytes(b"\0" * 64)
    return folder


def test_lightning_config_file_is_edited_where_the_batch_lives_the_relaunch_resumes_and_restore_undoes_it(tmp_path):
    cwd = _job_dir(tmp_path)
    config = LIGHTNING_CFG.replace("max_steps: 1", "max_steps: 4").replace("  enable_checkpointing: false\n", "")
    config = config.replace("data:\n", "  callbacks:\n    - class_path: lightning.pytorch.callbacks.ModelCheckpoint\n"
                            "      init_args:\n        dirpath: ckpts\n        every_n_train_steps: 2\n"
                            "        save_top_k: -1\ndata:\n")
    (cwd / "cfg.yaml").write_text(config)
    command = _launch(1, "lightning_cli.py", "fit", "--config", "cfg.yaml")
    # Steps 1 and 2 go through and are saved; step 3 runs out of memory.
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "2", "--", *command, cwd=cwd,
                      env={"OOM_ABOVE": "4", "OOM_AFTER": "4", "OMP_NUM_THREADS": "1"}, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = sorted(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")
    assert [r.cause for r in records] == ["gpu_oom", "ok"]
    # The config file holds the knobs: it is edited there, and the command only gains the resume.
    assert records[0].profile["knobs"]["micro_batch_size"]["where"] == "file:cfg.yaml:data.batch_size"
    text = (cwd / "cfg.yaml").read_text()
    assert "  batch_size: 4\n" in text and "  accumulate_grad_batches: 4   # per optimizer step\n" in text
    assert (cwd / "cfg.yaml.gpudoc.bak").read_text() == config  # the original, kept
    assert "gpudoc: resuming from ckpts/epoch=0-step=2.ckpt (step 2): --ckpt_path ckpts/epoch=0-step=2.ckpt" in done.stderr
    assert records[-1].argv == [*command, "--ckpt_path", "ckpts/epoch=0-step=2.ckpt"]
    log = _last_log(cwd, records)
    assert "Restored all states from the checkpoint at ckpts/epoch=0-step=2.ckpt" in log
    # Lightning's own account of what it ran: the halved batch, the doubled accumulation, from step 2.
    assert "lightning: batch_size=4 accumulate_grad_batches=4 precision=32-true world_size=1 global_step=2" in log
    # The chain's edits of the config are undone byte for byte.
    restored = gpudoc_cli("restore", cwd=cwd)
    assert restored.returncode == 0, restored.stderr
    assert (cwd / "cfg.yaml").read_text() == config


def test_fix_with_no_profile_offers_the_flags_writes_no_profile_and_its_rerun_resumes(tmp_path):
    cwd = _job_dir(tmp_path)
    # Two checkpoint directories a killed save left half-written, numbered above the real one: one
    # without its trainer state, one whose trainer state was cut short.
    (cwd / "out" / "checkpoint-6").mkdir(parents=True)
    (cwd / "out" / "checkpoint-6" / "model.safetensors").write_bytes(b"\0" * 64)
    (cwd / "out" / "checkpoint-8").mkdir()
    (cwd / "out" / "checkpoint-8" / "model.safetensors").write_bytes(b"\0" * 64)
    (cwd / "out" / "checkpoint-8" / "trainer_state.json").write_text('{"global_step": 8, "log_hi')
    # Two complete ones no run of the chain wrote, stamped as if written while it ran: another job's
    # save into the same output_dir, and a link into a directory outside it (SPEC "Trust").
    future = time.time() + 3600
    os.utime(_complete(cwd / "out" / "checkpoint-9") / "trainer_state.json", (future, future))
    os.utime(_complete(cwd / "elsewhere" / "checkpoint-7") / "trainer_state.json", (future, future))
    (cwd / "out" / "checkpoint-7").symlink_to(cwd / "elsewhere" / "checkpoint-7")
    flags = [*HF_FLAGS, "--max_steps", "4", "--save_strategy", "steps", "--save_steps", "2"]
    env = {"OOM_ABOVE": "4", "OOM_AFTER": "4", "OMP_NUM_THREADS": "1"}
    # Steps 1 and 2 (two forwards each) go through and checkpoint-2 is saved; step 3 runs out of memory.
    first = gpudoc_cli("run", "--no-check", "--", *_launch(1, "hf_trainer.py", *flags), cwd=cwd, env=env, timeout=300)
    assert first.returncode == 1
    [failed] = RunStore(cwd / ".gpudoc").records()
    assert [stamp["path"] for stamp in failed.checkpoints] == ["out/checkpoint-2"]  # what the run wrote
    shown = gpudoc_cli("fix", cwd=cwd)
    assert shown.returncode == 0, shown.stderr
    assert "micro_batch_size (argv:--per_device_train_batch_size)" in shown.stdout
    assert "halve-micro-batch" in shown.stdout and "the profile declares no [train] knobs" not in shown.stdout
    applied = gpudoc_cli("fix", "--apply", "--json", cwd=cwd)
    assert applied.returncode == 0, applied.stderr
    body = json.loads(applied.stdout)
    assert body["applied"]["rung"] == "expandable-segments+halve-micro-batch"
    new = body["applied"]["command"]
    assert new[new.index("--per_device_train_batch_size") + 1] == "4"
    # The next command keeps the failed run's own switches (--no-check), as --rerun would.
    assert any(note.startswith("run next: PYTORCH_ALLOC_CONF=expandable_segments:True gpudoc run --no-check -- "
                               "python") for note in body["notes"])
    assert not (cwd / "gpudoc.toml").exists()
    # --rerun relaunches the changed command from the newest checkpoint the failed run saved, and it fits.
    rerun = gpudoc_cli("fix", "--rerun", cwd=cwd, env=env, timeout=300)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    # The relaunch is announced as it will run: the halved flag, not the command as first typed.
    [line] = [ln for ln in rerun.stdout.splitlines() if ln.startswith("Relaunching in")]
    assert "--per_device_train_batch_size 4" in line and "--per_device_train_batch_size 8" not in line
    assert "gpudoc: not resuming from out/checkpoint-9: no run of this chain wrote it" in rerun.stderr
    assert f"gpudoc: not resuming from out/checkpoint-7: {cwd / 'out' / 'checkpoint-7'} (owner " in rerun.stderr
    assert "leads out of the output folder" in rerun.stderr
    assert "gpudoc: resuming from out/checkpoint-2 (step 2): --resume_from_checkpoint out/checkpoint-2" in rerun.stderr
    latest = max(RunStore(cwd / ".gpudoc").records(), key=lambda r: r.started_at or "")
    assert latest.cause == "ok" and latest.knobs["micro_batch_size"] == 4
    assert latest.resumed_from == {"framework": "hf-trainer", "path": "out/checkpoint-2", "step": 2,
                                   "switch": ["--resume_from_checkpoint", "out/checkpoint-2"]}
    assert "--resume_from_checkpoint" not in latest.command  # the user's command
    assert latest.argv[latest.argv.index("--resume_from_checkpoint") + 1] == "out/checkpoint-2"
    log = _last_log(cwd, [latest])
    # The Trainer's own account: it continued at step 2 with the halved batch, and finished at step 4.
    assert "Resuming training from checkpoint with epoch 0 and global step 2" in log
    assert re.search(r"Instantaneous batch size per device = 4\b", log)
    assert json.loads((cwd / "out" / "checkpoint-4" / "trainer_state.json").read_text())["global_step"] == 4
    shown = gpudoc_cli("runs", "show", latest.id, cwd=cwd)
    assert "resumed from: out/checkpoint-2 (hf-trainer, step 2)" in shown.stdout


# -- CLIs not installed here (deepspeed, axolotl, llamafactory-cli; and torchtune's real recipes, which
# need model weights): a stand-in on PATH reads the real config file as the CLI does, prints what it
# ran with, and fails with CUDA's OOM above OOM_ABOVE samples per device (or, with
# OOM_UNLESS_EXPANDABLE, until the allocator has expandable segments).
STAND_IN = """#!{python}
import json, os, sys
import yaml

args = sys.argv[1:]
if os.path.basename(sys.argv[0]) == "deepspeed":
    flag = next(a for a in args if a.startswith("--deepspeed_config"))
    path = flag.partition("=")[2] or args[args.index(flag) + 1]
    cfg = json.load(open(path))
    micro, accum = cfg["train_micro_batch_size_per_gpu"], cfg["gradient_accumulation_steps"]
elif os.path.basename(sys.argv[0]) == "tune":
    cfg = yaml.safe_load(open(args[args.index("--config") + 1]))
    if cfg.get("optimizer_in_bwd") and cfg["gradient_accumulation_steps"] != 1:
        sys.exit("RuntimeError: Gradient accumulation is not supported with optimizer in bwd")
    micro, accum = cfg["batch_size"], cfg["gradient_accumulation_steps"]
else:  # axolotl train cfg.yml / llamafactory-cli train cfg.yaml key=value...
    extra = args[2:]
    if [a for a in extra if a.startswith("-")]:
        sys.exit(f"stand-in: {{extra}}: not an option after the config")
    cfg = {{**yaml.safe_load(open(args[1])), **dict(a.split("=", 1) for a in extra)}}
    micro = int(cfg.get("micro_batch_size") or cfg.get("per_device_train_batch_size"))
    accum = int(cfg["gradient_accumulation_steps"])
alloc = os.environ.get("PYTORCH_CUDA_ALLOC_CONF", "") + os.environ.get("PYTORCH_ALLOC_CONF", "")
print(f"stand-in: argv={{args}} micro={{micro}} accum={{accum}} alloc={{alloc}}", flush=True)
if micro > int(os.environ.get("OOM_ABOVE", "1000")) or (
        os.environ.get("OOM_UNLESS_EXPANDABLE") and "expandable_segments:True" not in alloc):
    sys.exit("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
             "of 23.68 GiB of which 1.00 GiB is free. Including non-PyTorch memory, this process has 22.10 GiB "
             "memory in use. Of the allocated memory 21.30 GiB is allocated by PyTorch, and 18.50 MiB is reserved "
             "by PyTorch but unallocated.")
print("stand-in: done")
"""


def _stand_in(tmp_path: Path, name: str) -> dict[str, str]:
    """``name`` on PATH (ahead of the venv's own), and the environment that finds it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    script = bin_dir / name
    script.write_text(STAND_IN.format(python=sys.executable))
    script.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _copy(name: str, to: Path) -> str:
    to.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONFIGS / name, to)
    return to.read_text()


def test_native_deepspeed_fix_apply_edits_its_json_not_the_flags(tmp_path):
    env = _stand_in(tmp_path, "deepspeed")
    original = _copy("DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json",
                     tmp_path / "ds.json")
    command = ["deepspeed", "--num_gpus", "1", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    first = gpudoc_cli("run", "--no-check", "--", *command, cwd=tmp_path, env={**env, "OOM_ABOVE": "4"})
    assert first.returncode == 1, first.stderr[-3000:]
    [record] = RunStore(tmp_path / ".gpudoc").records()
    assert record.knob_places == {"micro_batch_size": "file:ds.json", "gradient_accumulation_steps": "file:ds.json",
                                  "precision": "file:ds.json", "zero_stage": "file:ds.json",
                                  # no offload section under ZeRO-3: DeepSpeed's default, none
                                  "offload_optimizer": "file:ds.json", "offload_params": "file:ds.json"}
    applied = gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path, env=env)
    assert applied.returncode == 0, applied.stderr
    body = json.loads(applied.stdout)
    assert body["applied"]["command"] == command and body["applied"]["files"] == [str(tmp_path / "ds.json")]
    written = json.loads((tmp_path / "ds.json").read_text())
    assert (written["train_micro_batch_size_per_gpu"], written["gradient_accumulation_steps"]) == (4, 2)
    assert {**written, "train_micro_batch_size_per_gpu": 8, "gradient_accumulation_steps": 1} == json.loads(original)
    rerun = gpudoc_cli("fix", "--rerun", cwd=tmp_path, env={**env, "OOM_ABOVE": "4"})
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "stand-in: argv=['--num_gpus', '1', 'train.py', '--deepspeed', '--deepspeed_config', 'ds.json'] " \
           "micro=4 accum=2" in rerun.stdout


@pytest.mark.parametrize(("program", "config", "launch"), [
    ("axolotl", "axolotl__examples__llama-3__fft-8b.yaml", ["axolotl", "train", "cfg.yml"]),
    ("llamafactory-cli", "LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml",
     ["llamafactory-cli", "train", "cfg.yml"]),
])
def test_trainer_yaml_retry_oom_adds_no_trainer_flags(tmp_path, program, config, launch):
    # fft-8b: bf16: auto (axolotl decides at launch); qwen3_full_sft: LLaMA-Factory checkpoints by
    # default. Neither has a precision or checkpointing rung to take, and neither CLI takes the
    # Trainer's --bf16 / --gradient_checkpointing after its YAML.
    env = _stand_in(tmp_path, program)
    text = _copy(config, tmp_path / "cfg.yml")
    _copy("LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json",
          tmp_path / "examples" / "deepspeed" / "ds_z3_config.json")
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "1", "--", *launch, cwd=tmp_path,
                      env={**env, "OOM_UNLESS_EXPANDABLE": "1"})
    assert done.returncode == 0, done.stderr[-3000:]
    records = sorted(RunStore(tmp_path / ".gpudoc").records(), key=lambda r: r.started_at or "")
    assert [r.cause for r in records] == ["gpu_oom", "ok"]
    assert records[-1].argv == launch and (tmp_path / "cfg.yml").read_text() == text
    knobs = records[0].profile["knobs"]
    if program == "axolotl":
        assert "precision" not in knobs
    else:
        assert knobs["gradient_checkpointing"] == {"value": True, "where": "default:llama-factory"}
        assert knobs["zero_stage"] == {"value": 3, "where": "file:examples/deepspeed/ds_z3_config.json"}


def test_torchtune_optimizer_in_bwd_fix_apply_leaves_accumulation_at_one(tmp_path):
    env = _stand_in(tmp_path, "tune")
    text = _copy("torchtune__recipes__configs__llama3_2__3B_full_single_device.yaml", tmp_path / "cfg.yaml")
    command = ["tune", "run", "full_finetune_single_device", "--config", "cfg.yaml"]
    first = gpudoc_cli("run", "--no-check", "--", *command, cwd=tmp_path, env={**env, "OOM_ABOVE": "2"})
    assert first.returncode == 1, first.stderr[-3000:]
    assert "note: torchtune: optimizer_in_bwd is on (cfg.yaml): gradient accumulation stays at 1" in first.stderr
    applied = gpudoc_cli("fix", "--apply", "--json", cwd=tmp_path, env=env)
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout)["applied"]["rung"] == "expandable-segments+halve-micro-batch"
    # The batch halves; accumulation stays 1 (torchtune would raise at 2), so the global batch falls.
    assert (tmp_path / "cfg.yaml").read_text() == text.replace("batch_size: 4", "batch_size: 2")
    rerun = gpudoc_cli("fix", "--rerun", cwd=tmp_path, env={**env, "OOM_ABOVE": "2"})
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "micro=2 accum=1" in rerun.stdout
