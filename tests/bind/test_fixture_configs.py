"""Every real config in tests/fixtures/real/configs/ edited through a binding.

For each file: bind sensible knobs, then (1) the new values parse back as intended with the
format's own reader (json / ruamel / exec for nanoGPT / shlex for shell scripts), (2) every line
that is not a bound line is byte-identical (difflib over lines), (3) planning wrote nothing,
(4) applying writes exactly the planned text and leaves the original as the backup.
"""

from __future__ import annotations

import difflib
import io
import json
import shlex
import shutil
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from gpudoc.bind import apply_file_edits, plan_bindings
from gpudoc.errors import InputError
from gpudoc.profiles.model import Profile
from tests.conftest import CONFIGS

MISSING = object()


def _parse(path: Path, text: str):
    if path.suffix == ".json":
        return json.loads(text)
    if path.suffix in (".yaml", ".yml"):
        return YAML(typ="rt").load(io.StringIO(text))
    if path.suffix == ".py":
        namespace: dict = {}
        exec(compile(text, str(path), "exec"), namespace)  # nanoGPT itself exec()s these files
        return namespace
    if path.suffix == ".sh":
        return _shell_flags(text)
    raise AssertionError(path)


def _shell_flags(text: str) -> dict:
    """``--flag value`` / bare ``--flag`` of the script's main command, as the shell would split it."""
    joined = text.replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
    argv = max(commands, key=lambda c: sum(1 for t in c if t.startswith("--")))
    flags: dict = {}
    for i, tok in enumerate(argv):
        if tok.startswith("--"):
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            flags[tok] = nxt if nxt is not None and not nxt.startswith("--") else True
    return flags


def _get(data, dotted: str):
    if isinstance(data, dict) and dotted in data and dotted.startswith("--"):
        return data[dotted]
    node = data
    for key in dotted.split("."):
        if isinstance(node, dict) and key in node:
            node = node[key]
        else:
            return MISSING
    return node


def _changed_lines(old: str, new: str) -> list[str]:
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag != "equal":
            out.extend(a[i1:i2] + b[j1:j2])
    return out


# (fixture, target name in the work dir, binding, knobs, launch, expected values, extra files,
#  substrings a changed line may contain)
CASES = [
    ("DeepSpeedExamples__Megatron-LM-v1.1.5-ZeRO3__examples__ds_zero_stage_3_config.json", "ds.json",
     "deepspeed",
     {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "zero_stage": 2, "offload_optimizer": True,
      "precision": "bf16"},
     {"nproc_per_node": 1},
     {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2, "zero_optimization.stage": 2,
      "zero_optimization.offload_optimizer.device": "cpu", "fp16.enabled": False, "bf16.enabled": True},
     {}, ("contiguous_gradients", "offload_optimizer", "zero_allow_untested_optimizer", "bf16", "}")),
    ("DeepSpeedExamples__Megatron-LM__scripts__ds_zero-offload_10B_config.json", "ds.json", "deepspeed",
     {"micro_batch_size": 5, "gradient_accumulation_steps": 3, "offload_optimizer": False, "zero_stage": 2},
     {"nproc_per_node": 2},
     {"train_micro_batch_size_per_gpu": 5, "zero_optimization.cpu_offload": False, "train_batch_size": 30},
     {}, ("train_micro_batch_size_per_gpu", "{")),
    # 2 pipeline stages of 4 ranks: 4 x 32 x 2 data-parallel ranks keeps its train_batch_size 256.
    ("DeepSpeedExamples__training__pipeline_parallelism__ds_config.json", "ds.json", "deepspeed",
     {"micro_batch_size": 4, "gradient_accumulation_steps": 32}, {"nproc_per_node": 4, "pipeline_parallel": 2},
     {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 32, "train_batch_size": 256},
     {}, ("train_micro_batch_size_per_gpu", "{")),
    # TRL's CLI YAML (TrlParser's defaults for its dataclasses): a key written where it has none.
    ("trl__examples__cli_configs__example_config.yaml", "cfg.yaml",
     {"micro_batch_size": "per_device_train_batch_size"}, {"micro_batch_size": 4}, {"nproc_per_node": 1},
     {"per_device_train_batch_size": 4, "learning_rate": 0.0001}, {}, ()),
    ("LLaMA-Factory__examples__deepspeed__ds_z2_offload_config.json", "ds.json", "deepspeed",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 16, "zero_stage": 1, "offload_optimizer": False,
      "precision": "fp16"},
     {"nproc_per_node": 8},
     {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 16, "zero_optimization.stage": 1,
      "zero_optimization.offload_optimizer.device": "none", "fp16.enabled": True, "bf16.enabled": False,
      "train_batch_size": "auto", "zero_optimization.allgather_bucket_size": 5e8},
     {}, ()),
    ("LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json", "ds.json", "deepspeed",
     {"micro_batch_size": 1, "zero_stage": 3, "offload_params": False, "offload_optimizer": True},
     {"nproc_per_node": 4},
     {"train_micro_batch_size_per_gpu": 1, "zero_optimization.offload_param.device": "none",
      "zero_optimization.offload_optimizer.device": "cpu", "zero_optimization.sub_group_size": 1e9},
     {}, ()),
    ("LLaVA__scripts__zero3_offload.json", "zero3.json", "deepspeed",
     {"precision": "fp16", "gradient_accumulation_steps": 4, "offload_params": False},
     {"nproc_per_node": 8},
     {"bf16.enabled": False, "fp16.enabled": True, "gradient_accumulation_steps": 4,
      "zero_optimization.offload_param.device": "none", "steps_per_print": 1e5},
     {}, ()),
    ("axolotl__deepspeed_configs__zero2.json", "zero2.json", "deepspeed",
     {"zero_stage": 3, "offload_params": True, "micro_batch_size": 2},
     {"nproc_per_node": 2},
     {"zero_optimization.stage": 3, "zero_optimization.offload_param.device": "cpu",
      "train_micro_batch_size_per_gpu": 2},
     {}, ("overlap_comm", "offload_param", "}")),
    ("axolotl__deepspeed_configs__zero3_bf16_cpuoffload_all.json", "zero3.json", "deepspeed",
     {"offload_optimizer": False, "offload_params": False, "precision": "bf16", "gradient_accumulation_steps": 8},
     {"nproc_per_node": 2},
     {"zero_optimization.offload_optimizer.device": "none", "zero_optimization.offload_param.device": "none",
      "bf16.enabled": True, "gradient_accumulation_steps": 8},
     {}, ()),
    ("FastChat__scripts__train_vicuna_13b.sh", "train.sh", "hf-trainer",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 2, "gradient_checkpointing": False,
      "precision": "fp16", "max_seq_len": 1024},
     {"nproc_per_node": 8},
     {"--per_device_train_batch_size": "2", "--gradient_accumulation_steps": "2",
      "--gradient_checkpointing": "False", "--bf16": MISSING, "--fp16": "True", "--model_max_length": "1024",
      "--per_device_eval_batch_size": "1"},
     {}, ("--fp16",)),
    ("FastChat__scripts__train_vicuna_7b.sh", "train.sh", "hf-trainer",
     {"micro_batch_size": 1, "gradient_accumulation_steps": 32, "precision": "bf16", "gradient_checkpointing": True},
     {"nproc_per_node": 16},
     {"--per_device_train_batch_size": "1", "--gradient_accumulation_steps": "32", "--fp16": MISSING,
      "--bf16": "True", "--gradient_checkpointing": "True"},
     {}, ("--bf16",)),
    ("LLaMA-Factory__examples__train_lora__qwen3_lora_sft.sh", "train.sh", "hf-trainer",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "lora_rank": 16, "max_seq_len": 1024,
      "precision": "fp32", "gradient_checkpointing": True},
     {"nproc_per_node": 1},
     {"--per_device_train_batch_size": "2", "--gradient_accumulation_steps": "4", "--lora_rank": "16",
      "--cutoff_len": "1024", "--bf16": MISSING, "--gradient_checkpointing": "True",
      "--model_name_or_path": "${MODEL_PATH}"},
     {}, ("--gradient_checkpointing",)),
    ("LLaVA__scripts__v1_5__finetune.sh", "finetune.sh", "hf-trainer",
     {"micro_batch_size": 4, "gradient_accumulation_steps": 4, "zero_stage": 3, "offload_params": False,
      "precision": "bf16", "max_seq_len": 4096},
     {"nproc_per_node": 8},
     {"--per_device_train_batch_size": "4", "--gradient_accumulation_steps": "4", "--model_max_length": "4096",
      "--bf16": "True", "--deepspeed": "./scripts/zero3.json"},
     {"scripts/zero3.json": "LLaVA__scripts__zero3_offload.json"}, ()),
    ("LLaMA-Factory__examples__accelerate__fsdp_config.yaml", "fsdp.yaml", "accelerate",
     {"precision": "fp16", "offload_params": True},
     {"nproc_per_node": 2},
     {"mixed_precision": "fp16", "fsdp_config.fsdp_offload_params": True, "num_processes": 2},
     {}, ()),
    ("LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml", "sft.yaml", "llama-factory",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "max_seq_len": 1024, "precision": "fp16",
      "gradient_checkpointing": False, "zero_stage": 2},
     {"nproc_per_node": 4},
     {"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "cutoff_len": 1024, "bf16": False,
      "fp16": True, "disable_gradient_checkpointing": True, "learning_rate": 1.0e-5},
     {"examples/deepspeed/ds_z3_config.json": "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json"},
     ("fp16", "disable_gradient_checkpointing")),
    ("LLaMA-Factory__examples__train_lora__qwen3_lora_sft_ds3.yaml", "lora.yaml", "llama-factory",
     {"micro_batch_size": 4, "lora_rank": 32, "precision": "bf16-true", "zero_stage": 3},
     {"nproc_per_node": 4},
     {"per_device_train_batch_size": 4, "lora_rank": 32, "bf16": True, "pure_bf16": True},
     {"examples/deepspeed/ds_z3_config.json": "LLaMA-Factory__examples__deepspeed__ds_z3_offload_config.json"},
     ("pure_bf16",)),
    # LitGPT derives accumulation: global_batch_size = micro 1 x accumulation 8 x 2 devices.
    ("litgpt__config_hub__finetune__llama-2-7b__lora.yaml", "lora.yaml", "litgpt",
     {"micro_batch_size": 1, "gradient_accumulation_steps": 8, "max_seq_len": 1024, "precision": "bf16",
      "lora_rank": 16},
     {"nproc_per_node": 2},
     {"train.micro_batch_size": 1, "train.global_batch_size": 16, "train.max_seq_length": 1024,
      "precision": "bf16-mixed", "lora_r": 16, "train.max_steps": None},
     {}, ()),
    ("NeMo__examples__nlp__language_modeling__conf__megatron_gpt_config.yaml", "megatron_gpt.yaml", "nemo",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 4, "max_seq_len": 1024, "precision": "bf16",
      "gradient_checkpointing": True},
     {"nproc_per_node": 1},
     {"model.micro_batch_size": 2, "model.global_batch_size": 8, "model.encoder_seq_length": 1024,
      "trainer.precision": "bf16", "model.activations_checkpoint_granularity": "full",
      "model.activations_checkpoint_method": "uniform", "model.activations_checkpoint_num_layers": 1,
      "model.max_position_embeddings": "${.encoder_seq_length}", "model.data.data_prefix": "???"},
     {}, ()),
    ("axolotl__examples__llama-2__qlora.yml", "qlora.yml", "axolotl",
     {"micro_batch_size": 1, "gradient_accumulation_steps": 8, "max_seq_len": 2048, "lora_rank": 16,
      "precision": "bf16", "gradient_checkpointing": True},
     {"nproc_per_node": 1},
     {"micro_batch_size": 1, "gradient_accumulation_steps": 8, "sequence_len": 2048, "lora_r": 16,
      "bf16": True, "gradient_checkpointing": True, "fp16": MISSING},
     {}, ()),
    ("axolotl__examples__llama-3__fft-8b.yaml", "fft.yaml", "axolotl",
     {"micro_batch_size": 2, "precision": "fp16", "gradient_checkpointing": False},
     {"nproc_per_node": 8},
     {"micro_batch_size": 2, "bf16": False, "fp16": True, "gradient_checkpointing": False,
      "gradient_checkpointing_kwargs.use_reentrant": False, "special_tokens.pad_token": "<|end_of_text|>"},
     {}, ("fp16",)),
    ("axolotl__examples__llama-3__qlora-fsdp-70b.yaml", "qlora70.yaml", "axolotl",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 2, "max_seq_len": 1024, "lora_rank": 4},
     {"nproc_per_node": 2},
     {"micro_batch_size": 2, "gradient_accumulation_steps": 2, "sequence_len": 1024, "lora_r": 4,
      "fsdp_config.fsdp_offload_params": True},
     {}, ()),
    ("nanoGPT__config__finetune_shakespeare.py", "finetune.py", "nanogpt",
     {"micro_batch_size": 2, "gradient_accumulation_steps": 16, "max_seq_len": 512, "precision": "fp16"},
     {"nproc_per_node": 1},
     {"batch_size": 2, "gradient_accumulation_steps": 16, "block_size": 512, "dtype": "float16",
      "init_from": "gpt2-xl"},
     {}, ("block_size", "dtype")),
    ("nanoGPT__config__train_gpt2.py", "train_gpt2.py", "nanogpt",
     {"micro_batch_size": 6, "gradient_accumulation_steps": 10, "max_seq_len": 1024},
     {"nproc_per_node": 8},
     {"batch_size": 6, "gradient_accumulation_steps": 80, "block_size": 1024, "weight_decay": 1e-1},
     {}, ()),
    ("nanoGPT__config__train_shakespeare_char.py", "char.py", "nanogpt",
     {"micro_batch_size": 32, "max_seq_len": 128, "gradient_accumulation_steps": 2},
     {"nproc_per_node": 1},
     {"batch_size": 32, "block_size": 128, "gradient_accumulation_steps": 2, "n_layer": 6},
     {}, ()),
    ("trl__examples__accelerate_configs__deepspeed_zero3.yaml", "zero3.yaml", "accelerate",
     {"zero_stage": 2, "gradient_accumulation_steps": 4, "offload_optimizer": True, "precision": "bf16"},
     {"nproc_per_node": 8},
     {"deepspeed_config.zero_stage": 2, "deepspeed_config.gradient_accumulation_steps": 4,
      "deepspeed_config.offload_optimizer_device": "cpu", "deepspeed_config.offload_param_device": "none",
      "mixed_precision": "bf16", "downcast_bf16": "no"},
     {}, ()),
]

TORCHTUNE = [
    ("torchtune__recipes__configs__llama3_1__70B_full.yaml", {}),
    ("torchtune__recipes__configs__llama3_1__8B_full.yaml", {}),
    ("torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", {"lora_rank": 16}),
    # optimizer_in_bwd: True, which "Requires gradient_accumulation_steps=1" (its own comment).
    ("torchtune__recipes__configs__llama3_2__3B_full_single_device.yaml", {"gradient_accumulation_steps": 1}),
]
for _name, _extra in TORCHTUNE:
    _accumulation = _extra.get("gradient_accumulation_steps", 2)
    _expect = {"batch_size": 4, "gradient_accumulation_steps": _accumulation, "tokenizer.max_seq_len": 2048,
               "enable_activation_checkpointing": False, "dtype": "fp32",
               "checkpointer.output_dir": "${output_dir}"}
    if "lora_rank" in _extra:
        _expect["model.lora_rank"] = 16
    CASES.append((_name, "tt.yaml", "torchtune",
                  {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "max_seq_len": 2048,
                   "gradient_checkpointing": False, "precision": "fp32", **_extra},
                  {"nproc_per_node": 1}, _expect, {}, ()))


def test_every_fixture_config_is_covered():
    covered = {case[0] for case in CASES}
    assert covered == {p.name for p in CONFIGS.iterdir()}


@pytest.mark.parametrize("case", CASES, ids=[c[0].split("__")[0] + ":" + c[0].split("__")[-1] for c in CASES])
def test_fixture_binding_changes_only_bound_values(case, isolated_home):
    fixture, target, binding, knobs, launch, expected, extra_files, allowed = case
    work = isolated_home
    dest = work / target
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(CONFIGS / fixture, dest)
    for rel, source in extra_files.items():
        (work / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(CONFIGS / source, work / rel)
    originals = {p: p.read_bytes() for p in work.rglob("*") if p.is_file()}
    profile = Profile(name="t", train=knobs, launch=launch, bind={"env": False, "files": {target: binding}})

    plan = plan_bindings(profile, ["python", "train.py"], cwd=work)

    assert {p: p.read_bytes() for p in work.rglob("*") if p.is_file()} == originals, "planning wrote a file"
    edit = next(e for e in plan.file_edits if Path(e.path).name == Path(target).name)
    old, new = edit.old_text, edit.new_text
    assert old == (CONFIGS / fixture).read_text()
    data = _parse(dest, new)
    for key, want in expected.items():
        got = _get(data, key)
        if want is MISSING:
            assert got is MISSING, f"{key} should be absent, is {got!r}"
        else:
            assert (got == want and type(got) is type(want)) or (isinstance(want, float) and got == want), \
                f"{key}: {got!r} != {want!r}"
    # Only bound lines differ: each changed line names a key whose value changed (or the
    # structure around a created key).
    names = {c["key"].split(".")[-1] for c in edit.changes} | {c["key"].split(".")[0] for c in edit.changes}
    names |= {str(c["new"]) for c in edit.changes if c["key"] == "(appended)"}
    names |= {str(c["old"]) for c in edit.changes}
    names |= set(allowed)
    changed = _changed_lines(old, new)
    assert changed, "nothing changed"
    for line in changed:
        assert any(n and n in line for n in names), f"unexpected changed line {line!r} (keys: {sorted(names)})"
    assert len([ln for ln in changed if ln in old.splitlines(keepends=True)]) <= len(edit.changes) + 2
    # Whitespace details outside the edit survive: trailing spaces and a missing final newline.
    assert old.endswith("\n") == new.endswith("\n")
    for line in old.splitlines(keepends=True):
        if line.rstrip("\n") != line.rstrip() and not any(n in line for n in names):
            assert line in new
    assert edit.diff.startswith(f"--- a/{target}\n+++ b/{target}\n")

    records = apply_file_edits(plan)
    assert dest.read_text() == new
    rec = next(r for r in records if Path(r["path"]).name == Path(target).name)
    assert Path(rec["backup"]).read_text() == old
    assert rec["changes"] == edit.changes


def test_a_real_deepspeed_config_with_a_repeated_key_is_refused_as_a_duplicate(tmp_path):
    text = (CONFIGS / "axolotl__deepspeed_configs__zero2.json").read_text()
    last = '  "train_micro_batch_size_per_gpu": "auto",\n'
    assert last in text
    (tmp_path / "ds.json").write_text(text.replace(last, last + '  "train_micro_batch_size_per_gpu": 2,\n'))
    before = (tmp_path / "ds.json").read_bytes()
    profile = Profile(name="t", train={"micro_batch_size": 4}, bind={"files": {"ds.json": "deepspeed"}})
    with pytest.raises(InputError, match=r"^ds.json: 'train_micro_batch_size_per_gpu' appears twice \(lines 25 and "
                                         r"26\); readers disagree on which counts"):
        plan_bindings(profile, ["python", "train.py"], cwd=tmp_path)
    assert (tmp_path / "ds.json").read_bytes() == before
