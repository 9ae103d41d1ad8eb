"""Config files as the framework readers read them: leniently, and never what is not a file."""

from __future__ import annotations

import os

from gpudoc.job.knobs import JobReading
from gpudoc.job.sources import cli_options, load_config
from tests.conftest import call_beside_fifo


def test_a_config_that_is_a_fifo_is_a_note_and_never_read(tmp_path):
    # `--config <(...)`: reading it would block, or take the bytes the job should get.
    os.mkfifo(tmp_path / "cfg.yaml")
    reading = JobReading()
    assert call_beside_fifo(tmp_path / "cfg.yaml", lambda: load_config(tmp_path / "cfg.yaml", "cfg.yaml", reading)) is None
    assert reading.notes == ["cfg.yaml: not read (not a regular file: its bytes are the job's to read)"]


def test_a_regular_config_is_read(tmp_path):
    (tmp_path / "cfg.yaml").write_text("batch_size: 8\n")
    reading = JobReading()
    assert load_config(tmp_path / "cfg.yaml", "cfg.yaml", reading) == {"batch_size": 8} and reading.notes == []


def test_cli_options_take_a_value_each_or_read_a_switch_as_fire_does():
    args = ["--bf16", "--micro-batch-size", "2", "--lr=1e-4", "cfg.yml", "--load-in-4bit"]
    # jsonargparse: every option takes the token after it, even one spelled as an option.
    assert cli_options(args) == [(0, "--bf16", "--micro-batch-size"), (2, "2", "2"), (3, "--lr", "1e-4"),
                                 (4, "cfg.yml", "cfg.yml"), (5, "--load-in-4bit", "")]
    # fire (axolotl's -m axolotl.cli.train): an option before another option, or last, is a switch.
    assert cli_options(args, switches=True) == [(0, "--bf16", ""), (1, "--micro-batch-size", "2"),
                                                (3, "--lr", "1e-4"), (4, "cfg.yml", "cfg.yml"),
                                                (5, "--load-in-4bit", "")]
    assert cli_options(["--seed", "-1"], switches=True) == [(0, "--seed", "-1")]  # a negative number is a value
