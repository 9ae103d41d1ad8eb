"""The frameworks' one interface: every registered framework answers each member, a job is
recognised from what its script imports or the program it runs, and a flag every training script
has never selects a framework."""

from __future__ import annotations

import inspect
import re
import shutil
from pathlib import Path

import pytest

from gpudoc.frameworks import registry
from gpudoc.frameworks.base import Framework, Resolved
from gpudoc.job.argv import parse_command
from gpudoc.job.knobs import COUNT_BOUNDS
from tests.job.scripts import ARGPARSE_LOOP, HF_TRAINER

CONFIGS = Path(__file__).parents[1] / "fixtures" / "real" / "configs"
_METHODS = [n for n, v in vars(Framework).items() if inspect.isfunction(v) and not n.startswith("_")]
_ATTRIBUTES = [n for n in Framework.__annotations__ if not n.startswith("_")]


def test_the_protocol_names_every_member_the_brief_asks_for():
    assert set(_METHODS) == {"recognise", "read", "defaults", "edit_args", "step_limit", "resume_switch",
                             "checkpoints", "launches",  # launches: a front-end that starts torchrun itself
                             "resolved",  # resolved: what the probe reported the framework resolved in the job
                             "observed_place",  # where the job reads a knob, found in the parsers the probe saw
                             "knob_values",  # the values a knob takes in the installed release
                             "named_configs"}  # config files its flags name for another framework to read
    assert set(_ATTRIBUTES) == {"name", "arg_names", "file_preset", "echo", "trial_switches"}


@pytest.mark.parametrize("adapter", registry.ADAPTERS, ids=lambda a: a.name)
def test_every_registered_framework_implements_each_member(adapter):
    assert isinstance(adapter, Framework)
    assert isinstance(adapter.name, str) and adapter.name
    assert isinstance(adapter.arg_names, tuple) and all(isinstance(n, str) for n in adapter.arg_names)
    for member in _METHODS:
        own = inspect.signature(getattr(adapter, member))
        declared = inspect.signature(getattr(Framework, member))
        assert list(own.parameters) == [p for p in declared.parameters if p != "self"], (adapter.name, member)


@pytest.mark.parametrize("adapter", registry.ADAPTERS, ids=lambda a: a.name)
def test_each_echo_line_names_a_knob_and_captures_its_value(adapter):
    for knob, pattern in adapter.echo:
        assert knob in COUNT_BOUNDS or knob in ("gradient_checkpointing", "precision"), knob
        assert re.compile(pattern).groups >= 1, pattern


def test_names_are_unique_and_an_arg_name_belongs_to_one_framework():
    names = [a.name for a in registry.ADAPTERS]
    assert len(names) == len(set(names))
    arg_names = [n for a in registry.ADAPTERS for n in a.arg_names]
    assert len(arg_names) == len(set(arg_names))
    assert registry.arg_preset_names() == sorted(arg_names)
    # The frameworks whose own flags gpudoc writes: a job read as one is bound through [bind] args.
    assert [a.name for a in registry.ADAPTERS if registry.takes_own_flags(a.name)] == \
        ["torchtune", "lightning", "litgpt", "trl", "megatron", "hf-trainer", "nanogpt"]
    # A profile's [bind.files."F"] = NAME: the framework's own config layout, under its own name.
    assert registry.file_preset_names() == ["accelerate", "axolotl", "deepspeed", "litgpt", "llama-factory", "nanogpt",
                                            "nemo", "torchtune"]
    assert all(registry.file_preset(n).name == n for n in registry.file_preset_names())
    with pytest.raises(KeyError):
        registry.file_preset("lightning")


def _write(cwd: Path, name: str, text: str) -> None:
    path = cwd / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


LIGHTNING_SCRIPT = "from lightning.pytorch.cli import LightningCLI\n\nLightningCLI()\n"
HYDRA_SCRIPT = ('import hydra\n\n\n@hydra.main(config_path="conf", config_name="config", version_base=None)\n'
                'def main(cfg):\n    print(cfg)\n\n\nmain()\n')
NANOGPT_SCRIPT = "batch_size = 12\nexec(open('configurator.py').read())\n"
TRAINER_CONFIG = "trainer:\n  max_epochs: 1\nmodel:\n  hidden: 8\n"


def _case(cwd: Path, case: str) -> list[str]:
    """A small real job of each kind: its files in ``cwd``, and its command."""
    if case == "hf-trainer":
        _write(cwd, "run_clm.py", HF_TRAINER)
        return ["torchrun", "--nproc_per_node=2", "run_clm.py", "--output_dir", "out"]
    if case == "lightning":
        _write(cwd, "train.py", LIGHTNING_SCRIPT)
        _write(cwd, "cfg.yaml", TRAINER_CONFIG)
        return ["python", "train.py", "--config", "cfg.yaml"]
    if case == "hydra":
        _write(cwd, "train.py", HYDRA_SCRIPT)
        _write(cwd, "conf/config.yaml", "batch_size: 8\n")
        return ["python", "train.py"]
    if case == "torchtune":
        shutil.copy(CONFIGS / "torchtune__recipes__configs__llama3_2__3B_full_single_device.yaml", cwd / "3B.yaml")
        return ["tune", "run", "full_finetune_single_device", "--config", "3B.yaml"]
    if case == "nanogpt":
        _write(cwd, "train.py", NANOGPT_SCRIPT)
        return ["torchrun", "--standalone", "--nproc_per_node=2", "train.py", "--batch_size=4"]
    if case == "deepspeed":
        shutil.copy(CONFIGS / "axolotl__deepspeed_configs__zero2.json", cwd / "ds.json")
        _write(cwd, "train.py", ARGPARSE_LOOP)
        return ["deepspeed", "train.py", "--deepspeed", "--deepspeed_config", "ds.json"]
    if case == "axolotl":
        shutil.copy(CONFIGS / "axolotl__examples__llama-3__fft-8b.yaml", cwd / "cfg.yml")
        return ["accelerate", "launch", "-m", "axolotl.cli.train", "cfg.yml"]
    if case == "litgpt":
        shutil.copy(CONFIGS / "litgpt__config_hub__finetune__llama-2-7b__lora.yaml", cwd / "lora.yaml")
        return ["litgpt", "finetune", "meta-llama/Llama-2-7b-hf", "--config", "lora.yaml"]
    if case == "megatron":
        _write(cwd, "pretrain_gpt.py", "from megatron.training import pretrain\n")
        return ["torchrun", "--nproc_per_node=2", "pretrain_gpt.py", "--micro-batch-size", "1"]
    if case == "trl":
        shutil.copy(CONFIGS / "trl__examples__cli_configs__example_config.yaml", cwd / "config.yaml")
        return ["trl", "sft", "--config", "config.yaml", "--output_dir", "test-sft"]
    if case == "llama-factory":
        shutil.copy(CONFIGS / "LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml", cwd / "sft.yaml")
        return ["llamafactory-cli", "train", "sft.yaml"]
    assert case == "accelerate"
    shutil.copy(CONFIGS / "trl__examples__accelerate_configs__deepspeed_zero3.yaml", cwd / "acc.yaml")
    _write(cwd, "loop.py", ARGPARSE_LOOP)
    return ["accelerate", "launch", "--config_file", "acc.yaml", "loop.py"]


@pytest.mark.parametrize("case", ["hf-trainer", "lightning", "hydra", "torchtune", "nanogpt", "deepspeed", "axolotl",
                                  "llama-factory", "litgpt", "trl", "megatron",
                                  "accelerate"])
def test_each_framework_is_recognised_from_its_own_job(tmp_path, case):
    command = _case(tmp_path, case)
    picked = registry.pick(parse_command(command), tmp_path)
    assert picked is not None and picked[0].name == case, picked
    # Only accelerate's config alone is a shape rather than evidence of a framework.
    assert picked[1].sure is (case != "accelerate")
    assert registry.read(parse_command(command), tmp_path).framework == case


GENERIC = [("--output_dir", "out"), ("--learning_rate", "3e-4"), ("--max_steps", "100"),
           ("--num_train_epochs", "1")]


@pytest.mark.parametrize("script", ["loop.py", "missing.py", "-m pkg.train"])
@pytest.mark.parametrize("flag", GENERIC, ids=lambda f: f[0])
def test_a_generic_flag_alone_never_selects_a_framework(tmp_path, script, flag):
    """A hand-written loop, a script that is not here and a module gpudoc cannot find: a flag every
    training script has says nothing of the framework, spelled ``--flag value`` or ``--flag=value``."""
    _write(tmp_path, "loop.py", ARGPARSE_LOOP)
    for spelled in ([flag[0], flag[1]], [f"{flag[0]}={flag[1]}"]):
        command = ["python", *script.split(), *spelled]
        assert registry.pick(parse_command(command), tmp_path) is None, command
        assert registry.read(parse_command(command), tmp_path).knobs == {}


STEP_LIMITS = {
    "hf-trainer": (["--output_dir", "out", "--max_steps", "500"], ["--output_dir", "out", "--max_steps", "3"]),
    "lightning": (["fit", "--config", "cfg.yaml"], ["fit", "--config", "cfg.yaml", "--trainer.max_steps", "3"]),
    "torchtune": (["--config", "x.yaml", "max_steps_per_epoch=100"], ["--config", "x.yaml", "max_steps_per_epoch=3"]),
    "nanogpt": (["config/train.py", "--max_iters=5000"], ["config/train.py", "--max_iters=3"]),
    "llama-factory": (["train", "sft.yaml"], ["train", "sft.yaml", "max_steps=3"]),
    "litgpt": (["finetune", "m", "--train.max_steps=100"], ["finetune", "m", "--train.max_steps=3"]),
    "trl": (["sft", "--config", "c.yaml"], ["sft", "--config", "c.yaml", "--max_steps", "3"]),
    "megatron": (["--train-iters", "500000"], ["--train-iters", "3"]),
}


@pytest.mark.parametrize("adapter", registry.ADAPTERS, ids=lambda a: a.name)
def test_the_step_limit_is_the_frameworks_own_switch(adapter):
    if adapter.name not in STEP_LIMITS:
        assert adapter.step_limit(["--x", "1"], 3) is None
        return
    before, after = STEP_LIMITS[adapter.name]
    assert adapter.step_limit(before, 3) == after
    assert adapter.step_limit(after, 3) == after  # set once, never twice


def test_resume_switches_are_the_frameworks_own():
    switches = {a.name: a.resume_switch("ckpt") for a in registry.ADAPTERS if registry.resumes(a.name)}
    assert switches == {"hf-trainer": ("--resume_from_checkpoint", "ckpt"), "lightning": ("--ckpt_path", "ckpt"),
                        "torchtune": ("resume_from_checkpoint=True",)}


# What the probe reported each framework resolved inside the job, read by that framework's adapter.
@pytest.mark.parametrize("name,settings,knobs,total", [
    ("hf-trainer", {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 8, "world_size": 2,
                    "bf16": True, "fp16": False, "gradient_checkpointing": True,
                    "optim": "OptimizerNames.ADAMW_TORCH_FUSED", "max_steps": -1, "total_steps": 750},
     {"micro_batch_size": 4, "gradient_accumulation_steps": 8, "world_size": 2, "precision": "bf16",
      "gradient_checkpointing": True, "optimizer": "adamw"}, 750),
    ("hf-trainer", {"bf16": False, "fp16": False, "optim": "adamw_bnb_8bit", "max_steps": 3},
     {"precision": "fp32", "optimizer": "adamw_8bit"}, 3),
    ("lightning", {"accumulate_grad_batches": 3, "world_size": 1, "precision": "bf16-true",
                   "max_steps": -1, "estimated_stepping_batches": 120},
     {"gradient_accumulation_steps": 3, "world_size": 1, "precision": "bf16-true"}, 120),
    ("lightning", {"precision": 16}, {"precision": "fp16"}, None),  # 1.x's integer
    ("deepspeed", {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 16, "train_batch_size": 64},
     {"micro_batch_size": 2, "gradient_accumulation_steps": 16}, None),
    ("torchtune", {"batch_size": 4, "gradient_accumulation_steps": 2, "tokenizer.max_seq_len": 512,
                   "enable_activation_checkpointing": False, "dtype": "bf16"},
     {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "max_seq_len": 512, "gradient_checkpointing": False,
      "precision": "bf16"}, None),
    ("nanogpt", {"batch_size": 12, "gradient_accumulation_steps": 40, "block_size": 1024, "dtype": "bfloat16",
                 "max_iters": 600000}, {"micro_batch_size": 12, "gradient_accumulation_steps": 40, "max_seq_len": 1024,
                                        "precision": "bf16"}, 600000),
])
def test_what_the_probe_reported_is_read_by_the_frameworks_adapter(name, settings, knobs, total):
    found = registry.resolved(name, settings)
    assert {knob: value for knob, (value, _key) in found.knobs.items()} == knobs
    assert all(key in settings for _value, key in found.knobs.values())  # each names the setting it came from
    assert found.total_steps == total


@pytest.mark.parametrize("adapter", registry.ADAPTERS, ids=lambda a: a.name)
def test_settings_the_job_wrote_are_never_believed_unchecked(adapter):
    # The probe's file is the job's to write: strings, booleans, negatives and nesting are not figures.
    hostile = {key: value for key in ("per_device_train_batch_size", "gradient_accumulation_steps", "batch_size",
                                      "train_micro_batch_size_per_gpu", "accumulate_grad_batches", "block_size",
                                      "world_size", "max_steps", "total_steps", "max_iters")
               for value in ("8", True, -4, [8], {"n": 8})}
    found = adapter.resolved({**hostile, "precision": ["bf16"], "dtype": {"x": 1}, "optim": 7, "bf16": "yes"})
    assert isinstance(found, Resolved) and found.knobs == {} and found.total_steps is None
    assert registry.resolved("not-a-framework", {"batch_size": 8}) == Resolved()


@pytest.mark.parametrize("config, framework", [
    ("DeepSpeedExamples__training__pipeline_parallelism__ds_config.json", "deepspeed"),
    ("axolotl__deepspeed_configs__zero3_bf16_cpuoffload_all.json", "deepspeed"),
    ("axolotl__examples__llama-2__qlora.yml", "axolotl"),
    ("LLaMA-Factory__examples__train_full__qwen3_full_sft.yaml", "llama-factory"),
    ("trl__examples__accelerate_configs__deepspeed_zero3.yaml", "accelerate"),
    ("torchtune__recipes__configs__llama3_1__8B_lora_single_device.yaml", "torchtune"),
    ("NeMo__examples__nlp__language_modeling__conf__megatron_gpt_config.yaml", "nemo"),
    ("nanoGPT__config__train_shakespeare_char.py", "nanogpt"),
    ("trl__examples__cli_configs__example_config.yaml", None),  # HfArgumentParser's YAML: no layout of its own
    ("litgpt__config_hub__finetune__llama-2-7b__lora.yaml", None),  # LitGPT's is only ever named
])
def test_a_config_file_is_recognised_by_its_frameworks_own_layout(config, framework):
    from gpudoc.edits import jsonedit, pyedit, yamledit

    text = (CONFIGS / config).read_text()
    suffix = Path(config).suffix
    data = {".json": jsonedit.load, ".py": pyedit.load}.get(suffix, yamledit.load)(text)
    assert registry.file_layout(data, suffix) == framework
    assert registry.file_layout([data], suffix) is None  # a list at the top is no framework's config


def test_a_python_file_is_never_taken_for_a_yaml_or_json_layout():
    assert registry.file_layout({"train_batch_size": 8, "zero_optimization": {}}, ".py") is None
    assert registry.file_layout({"batch_size": 8}, ".json") is None


def test_where_no_framework_was_recognised_the_adapter_that_finds_the_place_is_the_jobs():
    composed = [{"type": "hydra", "values": {"data.batch_size": 8, "model.batch_size": 2}}]
    adapter, place = registry.observed_place(None, composed, "micro_batch_size", 8, "batch_size")
    assert (adapter.name, place.key) == ("hydra", "data.batch_size")
    assert registry.observed_place(None, composed, "micro_batch_size", 4, "batch_size") is None  # none held 4
    ambiguous = [{"type": "hydra", "values": {"data.batch_size": 8, "model.batch_size": 8}}]
    assert registry.observed_place("hydra", ambiguous, "micro_batch_size", 8, "batch_size") is None
    configurator = [{"type": "configurator", "options": ["--batch_size", "--gradient_accumulation_steps"],
                     "values": {"batch_size": 12, "gradient_accumulation_steps": 5}}]
    adapter, place = registry.observed_place(None, configurator, "gradient_accumulation_steps", 5, None)
    assert (adapter.name, place.key) == ("nanogpt", "--gradient_accumulation_steps")
    # The job's own framework is asked alone: an HF job's parsers are not a configurator's.
    assert registry.observed_place("hf-trainer", configurator, "gradient_accumulation_steps", 5, None) is None


@pytest.mark.parametrize("adapter", registry.ADAPTERS, ids=lambda a: a.name)
def test_the_values_a_knob_takes_are_keyed_by_the_profiles_own_spellings(adapter):
    from gpudoc.profiles.schema import ENUMS

    for version in (None, "1.9.5", "2.5.0"):
        values = adapter.knob_values("precision", version)
        assert values is None or (values and set(values) <= set(ENUMS[("train", "precision")])), adapter.name
        assert adapter.knob_values("micro_batch_size", version) is None  # a count is written as it is


def test_the_values_a_knob_takes_follow_the_installed_release():
    lightning, torchtune, nanogpt = (registry.get(n) for n in ("lightning", "torchtune", "nanogpt"))
    assert lightning.knob_values("precision", "1.9.5") == {"fp32": 32, "fp16": 16, "bf16": "bf16"}
    assert lightning.knob_values("precision", "2.5.0")["bf16"] == "bf16-mixed"
    assert lightning.knob_values("precision", None)["bf16"] == "bf16-mixed"  # unknown: today's spelling
    assert "fp16" not in torchtune.knob_values("precision", None)  # its recipes refuse fp16
    assert nanogpt.knob_values("precision", None)["bf16"] == "bfloat16"


def test_a_config_file_a_flag_names_for_another_framework_is_found_by_the_frameworks_own_flag():
    assert registry.named_configs(["--deepspeed", "ds.json", "--bf16"]) == [("ds.json", "deepspeed", True)]
    assert registry.named_configs(["--deepspeed=ds.json"]) == [("ds.json", "deepspeed", True)]
    # Given twice, the Trainer's parser keeps the last: that JSON is the job's, and the only one followed.
    assert registry.named_configs(["--deepspeed", "a.json", "--deepspeed=b.json"]) == [("b.json", "deepspeed", True)]
    # A native DeepSpeed script's bare switch names no file.
    assert registry.named_configs(["--deepspeed", "--deepspeed_config", "ds.json"]) == []
    assert registry.named_configs(["--config", "x.yaml"]) == []
