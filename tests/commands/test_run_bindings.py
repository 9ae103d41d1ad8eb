"""`gpudoc run` and `run --dry-run` with [bind.files]: every binding checked before launch, shown
by the dry run, and every changed flag or file said on the terminal, one line each."""

from __future__ import annotations

import json

from tests.bind.test_plan import _seed_004_config
from tests.commands.test_check import A5000
from tests.conftest import gpudoc_cli
from tests.launch.helpers import last_record, run_dirs

PROFILE = """\
[train]
micro_batch_size = 2
gradient_accumulation_steps = 8
max_seq_len = 512
precision = "fp16"

[bind.files."config.json"]
micro_batch_size = "vram.batch_size"
gradient_accumulation_steps = "vram.gradient_accumulation_steps"
max_seq_len = ["model.max_seq_len", "vram.max_seq_len"]
"""

# The job: what it read from the config, so the test sees what the framework would.
JOB = ("import json; c = json.load(open('config.json')); v = c['vram']; "
       "print('batch', v['batch_size'], 'accum', v['gradient_accumulation_steps'], 'fp16', v['use_fp16'])")


def test_a_binding_that_does_not_fit_refuses_the_dry_run_and_the_launch_and_changes_nothing(isolated_home):
    cfg = _seed_004_config(isolated_home)
    before = cfg.read_bytes()
    (isolated_home / "gpudoc.toml").write_text(PROFILE + 'precision = "vram.use_fp16"\n')
    for switches in (["--dry-run"], ["--no-check"]):
        done = gpudoc_cli("run", *switches, "--", "python", "-c", "open('launched', 'w')")
        assert done.returncode == 125, done.stderr
        assert done.stderr == ('gpudoc: config.json: vram.use_fp16 holds the boolean true; precision = "fp16" is a '
                               'string, not a boolean; say how with a value map: precision = {key = "vram.use_fp16", '
                               'map = {fp16 = true, ...}}\n')
        assert cfg.read_bytes() == before
        assert not (isolated_home / "launched").exists() and not run_dirs(isolated_home)
    # Loading the profile alone (check, estimate) is exit 2 for a binding that cannot be read.
    (isolated_home / "gpudoc.toml").write_text(PROFILE + 'precision = {key = "vram.use_fp16", map = {fp61 = true}}\n')
    checked = gpudoc_cli("check", "--snapshot", A5000)
    assert checked.returncode == 2 and "map.fp61: precision is never 'fp61' (did you mean 'fp16'?)" in checked.stderr


def test_the_dry_run_shows_each_binding_and_the_run_says_each_changed_file(isolated_home):
    cfg = _seed_004_config(isolated_home)
    before = cfg.read_text()
    (isolated_home / "gpudoc.toml").write_text(
        PROFILE + 'precision = {key = "vram.use_fp16", map = {fp16 = true, bf16 = false, fp32 = false}}\n')
    dry = gpudoc_cli("run", "--dry-run", "--", "python", "-c", JOB)
    assert dry.returncode == 0, dry.stderr
    shown = dry.stdout.split("bindings:\n", 1)[1].split("(dry run", 1)[0]
    assert shown == ("  micro_batch_size -> config.json:vram.batch_size  1 -> 2\n"
                     "  gradient_accumulation_steps -> config.json:vram.gradient_accumulation_steps  16 -> 8\n"
                     "  max_seq_len -> config.json:model.max_seq_len  256 -> 512\n"
                     "  max_seq_len -> config.json:vram.max_seq_len  256 -> 512\n"
                     "  precision -> config.json:vram.use_fp16  = true (unchanged)\n")
    doc = json.loads(gpudoc_cli("run", "--dry-run", "--json", "--", "python", "-c", JOB).stdout)
    assert {"knob": "precision", "file": "config.json", "key": "vram.use_fp16", "old": True, "new": True,
            "added": False} in doc["bindings"]
    assert cfg.read_text() == before

    done = gpudoc_cli("run", "--no-check", "--", "python", "-c", JOB)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "batch 2 accum 8 fp16 True\n"
    said = [line for line in done.stderr.splitlines() if line.startswith("gpudoc: config.json")]
    assert said == ["gpudoc: config.json: vram.batch_size 1 -> 2, vram.gradient_accumulation_steps 16 -> 8, "
                    "model.max_seq_len 256 -> 512, vram.max_seq_len 256 -> 512"]
    assert last_record(isolated_home)["file_edits"][0]["changes"][0] == {"key": "vram.batch_size", "old": 1, "new": 2}


def test_a_flag_the_user_typed_and_the_profile_replaces_is_said(isolated_home):
    (isolated_home / "gpudoc.toml").write_text('[train]\nmicro_batch_size = 8\n[bind]\nargs = "hf-trainer"\n')
    done = gpudoc_cli("run", "--no-check", "--", "python", "-c", "import sys; print(sys.argv[1:])",
                      "--per_device_train_batch_size", "2")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "['--per_device_train_batch_size', '8']\n"
    assert "gpudoc: command: --per_device_train_batch_size 2 -> 8\n" in done.stderr


OOMS_ABOVE_4 = """\
import sys
mbs = int(sys.argv[sys.argv.index("--per_device_train_batch_size") + 1])
print(f"knobs: micro_batch_size={mbs}", flush=True)
if mbs > 4:
    sys.stderr.write("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                     "capacity of 23.68 GiB of which 1.00 GiB is free.\\n")
    sys.exit(1)
"""


def test_each_relaunch_says_a_flag_from_the_value_the_attempt_before_it_ran(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(
        '[train]\nmicro_batch_size = 16\ngradient_accumulation_steps = 1\n[bind]\nargs = "hf-trainer"\n')
    (isolated_home / "train.py").write_text(OOMS_ABOVE_4)
    done = gpudoc_cli("run", "--no-check", "--retry-oom", "3", "--", "python", "train.py",
                      "--per_device_train_batch_size", "16")
    assert done.returncode == 0, done.stderr
    # The allocator rung first (the OOM gives no reserved figure to rule it out), then two halvings.
    assert [int(line.rpartition("=")[2]) for line in done.stdout.splitlines() if line.startswith("knobs:")] \
        == [16, 16, 8, 4]
    said = [line for line in done.stderr.splitlines() if line.startswith("gpudoc: command: ")]
    assert "next: gpudoc fix" not in done.stderr  # each failed attempt was relaunched, the last one fit
    # As a config file edited in place would say it: 16 -> 8, then 8 -> 4 (not 16 -> 4 again).
    assert said == ["gpudoc: command: --gradient_accumulation_steps 1 added",
                    "gpudoc: command: --per_device_train_batch_size 16 -> 8",
                    "gpudoc: command: --gradient_accumulation_steps 1 -> 2",
                    "gpudoc: command: --per_device_train_batch_size 8 -> 4",
                    "gpudoc: command: --gradient_accumulation_steps 2 -> 4"]


def test_a_process_count_the_profile_contradicts_is_refused_by_the_dry_run(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[train]\nmicro_batch_size = 8\n[launch]\nnproc_per_node = 4\n")
    done = gpudoc_cli("run", "--dry-run", "--", "torchrun", "--nproc_per_node=2", "train.py")
    assert done.returncode == 125
    assert done.stderr == (f"gpudoc: {isolated_home / 'gpudoc.toml'}: the command starts 2 processes per node "
                           f"(torchrun) but the profile's [launch] nproc_per_node = 4\n")
