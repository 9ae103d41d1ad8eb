"""`gpudoc estimate` through the real CLI in a fresh interpreter."""

from __future__ import annotations

import json

from tests.conftest import gpudoc_cli

PROFILE = """
[gpu]
memory_gib = 24

[train]
micro_batch_size = 1
max_seq_len = 2048
precision = "bf16"
gradient_checkpointing = true
lora_rank = 16
quantization = "nf4"

[model]
hf_config = "config.json"
"""
CONFIG = {"model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
          "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 128256, "tie_word_embeddings": False}


def test_table_and_json(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    (isolated_home / "config.json").write_text(json.dumps(CONFIG))
    text = gpudoc_cli("estimate", cwd=isolated_home)
    assert text.returncode == 0, text.stderr
    for row in ("weights", "gradients", "optimizer states", "activations", "logits + loss", "overhead",
                "total on the GPU", "largest micro_batch_size within the target"):
        assert row in text.stdout
    doc = gpudoc_cli("estimate", "--json", "--micro-batch-size", "2", "--gpu-memory", "48", cwd=isolated_home)
    assert doc.returncode == 0, doc.stderr
    data = json.loads(doc.stdout)
    assert data["micro_batch_size"] == 2 and data["gpu_total_bytes"] == 48 * 1024**3
    assert isinstance(data["peak_bytes"], int) and isinstance(data["max_micro_batch_size"], int)
    assert data["phases"]["forward_backward"] >= data["phases"]["optimizer_step"]
    # QLoRA 8B: an NF4 base of ~4 GiB plus embeddings (fp32 under autocast, as peft's kbit preparation
    # leaves them), far below a bf16 model's 15 GiB.
    assert data["breakdown"]["weights"] < 8 * 1024**3


def test_missing_key_is_one_line_and_exit_2(isolated_home):
    (isolated_home / "gpudoc.toml").write_text("[train]\nmax_seq_len = 512\n[model]\nlayers = 2\nheads = 2\nvocab = 10\n")
    result = gpudoc_cli("estimate", cwd=isolated_home)
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        'gpudoc: [model] hidden is missing: set [model] hf_config = "ORG/NAME" (a config.json, its directory, '
        'or a model id in the local Hugging Face cache) or hidden = N']


def test_usage_error(isolated_home):
    result = gpudoc_cli("estimate", "--micro-batch-size", "zero", cwd=isolated_home)
    assert result.returncode == 2 and "Traceback" not in result.stderr


def _one_line_error(result, *words: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr
    for word in words:
        assert word in result.stderr


def test_a_config_json_that_is_not_an_object_is_named(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    for text, kind in (("[1, 2]", "list"), ('"llama"', "str")):
        (isolated_home / "config.json").write_text(text)
        _one_line_error(gpudoc_cli("estimate", cwd=isolated_home), "config.json holds a JSON " + kind)
    (isolated_home / "config.json").write_bytes(b"\xff\xfe{")
    _one_line_error(gpudoc_cli("estimate", cwd=isolated_home), "cannot read", "config.json")


def test_switch_values_out_of_bounds_are_usage_errors(isolated_home):
    (isolated_home / "gpudoc.toml").write_text(PROFILE)
    (isolated_home / "config.json").write_text(json.dumps(CONFIG))
    for value in ("nan", "inf", "-1", "0", "1e300"):
        _one_line_error(gpudoc_cli("estimate", "--gpu-memory", value, cwd=isolated_home), "--gpu-memory", "GiB")
    _one_line_error(gpudoc_cli("estimate", "--micro-batch-size", "99999999999", cwd=isolated_home),
                    "--micro-batch-size 99999999999")
    assert gpudoc_cli("estimate", "--gpu-memory", "80", cwd=isolated_home).returncode in (0, 1)


def test_the_jobs_command_after_dashes_names_the_model(isolated_home, tmp_path):
    from tests.estimate.hf_configs import CONFIGS
    from tests.estimate.test_model_source import cache_model

    (isolated_home / "gpudoc.toml").write_text("[gpu]\nmemory_gib = 24\n[train]\nmax_seq_len = 512\nlora_rank = 16\n")
    env = {"HF_HOME": str(tmp_path / "hf")}
    cache_model(tmp_path / "hf" / "hub", "google/gemma-2-2b", CONFIGS["google/gemma-2-2b"])
    result = gpudoc_cli("estimate", "--json", "--", "torchrun", "--nproc_per_node", "2", "train.py",
                        "--model_name_or_path", "google/gemma-2-2b", cwd=isolated_home, env=env)
    assert result.returncode == 0, result.stderr
    assert "--model_name_or_path = google/gemma-2-2b" in json.loads(result.stdout)["notes"][0]
    _one_line_error(gpudoc_cli("estimate", "--", "python", "train.py", "--model", "google/gemma-7b",
                               cwd=isolated_home, env=env),
                    "the job's --model = \"google/gemma-7b\"", "Hugging Face cache", "huggingface-cli download")
    usage = gpudoc_cli("estimate", "--help", cwd=isolated_home)
    assert "-- COMMAND" in usage.stdout and "never the network" in usage.stdout
