"""What the job's own source says: a script that builds the HF Trainer, a hand-written loop with the
same generic flags, and a Trainer reached through the job's own package (as LLaVA's train_mem.py)."""

from __future__ import annotations

from gpudoc.frameworks.hf_trainer import uses_hf_trainer
from gpudoc.job.argv import parse_command
from gpudoc.job.knobs import read_job
from tests.job.scripts import ARGPARSE_LOOP, write_hf_script

GENERIC = ["--output_dir", "out", "--learning_rate", "3e-4", "--max_steps", "10", "--num_train_epochs", "1"]


def test_the_trainer_script_is_hf_and_the_hand_written_loop_is_not(tmp_path):
    write_hf_script(tmp_path, "hf.py")
    (tmp_path / "loop.py").write_text(ARGPARSE_LOOP)
    assert uses_hf_trainer(parse_command(["python", "hf.py"]), tmp_path) is True
    assert uses_hf_trainer(parse_command(["python", "loop.py", *GENERIC]), tmp_path) is False
    assert uses_hf_trainer(parse_command(["python", "absent.py"]), tmp_path) is None


def test_generic_flags_alone_select_no_framework_and_no_defaults(tmp_path):
    (tmp_path / "loop.py").write_text(ARGPARSE_LOOP)
    reading = read_job(["python", "loop.py", *GENERIC], tmp_path)
    assert reading.framework is None and reading.knobs == {}
    # `--output_dir=out` is no nanoGPT `--key=value` either: the script has no configurator.py.
    reading = read_job(["python", "loop.py", "--output_dir=out", "--batch_size=4"], tmp_path)
    assert reading.framework is None and reading.knobs == {}


def test_a_trainer_flag_on_a_hand_written_script_is_read_and_the_rest_is_unknown(tmp_path):
    (tmp_path / "loop.py").write_text(ARGPARSE_LOOP)
    reading = read_job(["python", "loop.py", "--per_device_train_batch_size", "4", *GENERIC], tmp_path)
    assert reading.values == {"micro_batch_size": 4}  # no Trainer default for accumulation or precision
    assert any("loop.py: read as HF Trainer flags" in note and "not assumed" in note for note in reading.notes)


def test_the_trainer_reached_through_the_jobs_own_package(tmp_path):
    package = tmp_path / "llava" / "train"
    package.mkdir(parents=True)
    (tmp_path / "llava" / "__init__.py").write_text("")
    (package / "__init__.py").write_text("")
    (package / "train_mem.py").write_text("from llava.train.train import train\n\nif __name__ == '__main__':\n"
                                          "    train()\n")
    (package / "train.py").write_text("import transformers\n\nfrom .llava_trainer import LLaVATrainer\n\n"
                                      "def train():\n    parser = transformers.HfArgumentParser(())\n")
    (package / "llava_trainer.py").write_text("from transformers import Trainer\n\nclass LLaVATrainer(Trainer):\n"
                                              "    pass\n")
    command = ["deepspeed", "llava/train/train_mem.py", "--output_dir", "out", "--learning_rate", "2e-5"]
    assert uses_hf_trainer(parse_command(command), tmp_path) is True
    reading = read_job(command, tmp_path)
    assert reading.framework == "hf-trainer" and reading.places["micro_batch_size"] == "default:hf-trainer"
    assert uses_hf_trainer(parse_command(["python", "-m", "llava.train.train_mem"]), tmp_path) is True


def test_a_hand_written_script_with_trainer_flags_takes_its_own_parsers_defaults(tmp_path):
    """examples/hf_style/train.py: argparse with the Trainer's flag names, some declared in a loop."""
    import shutil

    from tests.conftest import REPO

    shutil.copy(REPO / "examples" / "hf_style" / "train.py", tmp_path / "train.py")
    command = ["python", "train.py", "--per_device_train_batch_size", "16"]
    reading = read_job(command, tmp_path)
    assert reading.values == {"micro_batch_size": 16, "gradient_accumulation_steps": 1,
                              "gradient_checkpointing": False, "max_seq_len": 32, "precision": "fp32"}
    assert reading.places["gradient_checkpointing"] == "default:train.py"  # the script's own, not the Trainer's
    assert reading.places["micro_batch_size"] == "argv:--per_device_train_batch_size"
