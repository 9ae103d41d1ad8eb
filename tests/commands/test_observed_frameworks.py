"""gpudoc believes the job, proved on real framework jobs (CPU torch, one process): per framework
one real `gpudoc run --retry-oom` chain, shared by the tests below and by the other files that ask
about the same set-up (tests/commands/chains.py: once per session). Each job builds a tiny model from a config in the test and raises a real
``torch.OutOfMemoryError`` inside its forward, sized from the micro batch it was given, while that
holds more tokens than it allows: the chain must read what the job really trains with from the
probe (every observed knob right), converge with the global batch exact, write nothing the job's
own parser lacks, and name the phase of the OOM in the record."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.commands import chains
from tests.commands.chains import Chain

JOBS = Path(__file__).resolve().parents[1] / "probe" / "jobs"
pytestmark = pytest.mark.slow


def _global(chain: Chain, record: dict) -> int:
    knobs = chain.knobs(record)
    return knobs["micro_batch_size"][0] * knobs["gradient_accumulation_steps"][0]


def _added(chain: Chain) -> list[str]:
    """The tokens the relaunch's command has that the first command had not."""
    return [a for a in chain.last["argv"] if a not in chain.first["argv"]]


# -- nanoGPT's configurator.py ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def nanogpt(tmp_path_factory) -> Chain:
    # The accumulation is train.py's own global (4): no config file or flag of the command says it.
    return chains.chain(tmp_path_factory, "nanogpt", {
        "train.py": JOBS / "nanogpt" / "train.py", "configurator.py": JOBS / "nanogpt" / "configurator.py",
        "oom_words.py": JOBS / "oom_words.py",
        "config/tiny.py": "batch_size = 16\nblock_size = 8\nmax_iters = 1\noom_above = 32\n"},
        ["python", "train.py", "config/tiny.py", "--batch_size=8"])


# -- a TRL-style TrainingArguments subclass under the HF Trainer ----------------------------------------

@pytest.fixture(scope="module")
def sft(tmp_path_factory) -> Chain:
    return chains.chain(tmp_path_factory, "sft", {name: JOBS / name for name in ("sft_config_job.py", "oom_words.py")},
                  ["python", "sft_config_job.py", "--output_dir", "out", "--max_steps", "1", "--use_cpu",
                   "--report_to", "none", "--save_strategy", "no", "--oom_above", "32"])


# -- LightningCLI ------------------------------------------------------------------------------------

LIGHTNING_CLI_CFG = """\
trainer:
  accelerator: cpu
  max_steps: 1
  logger: false
  enable_checkpointing: false
  enable_progress_bar: false
  enable_model_summary: false
model:
  oom_above: 32
"""


@pytest.fixture(scope="module")
def lightning_cli(tmp_path_factory) -> Chain:
    return chains.chain(tmp_path_factory, "lightning-cli", {
        "lightning_cli_job.py": JOBS / "lightning_cli_job.py", "oom_words.py": JOBS / "oom_words.py",
        "cfg.yaml": LIGHTNING_CLI_CFG},
        ["python", "lightning_cli_job.py", "fit", "--config", "cfg.yaml", "--trainer.accumulate_grad_batches=3",
         "--data.batch_size", "8"])


# -- Lightning under Hydra, with a config group picked on the command line ------------------------------

@pytest.fixture(scope="module")
def hydra_lightning(tmp_path_factory) -> Chain:
    return chains.chain(tmp_path_factory, "hydra-lightning", {
        **{name: JOBS / name for name in ("hydra_lightning_job.py", "lightning_cli_job.py", "oom_words.py",
                                          "hydra_lightning_conf")}},
        ["python", "hydra_lightning_job.py", "trainer=big", "oom_above=32"])


# -- torchtune, through its own `tune run` (the chain test_run_frameworks.py reads too) ------------------

@pytest.fixture(scope="module")
def torchtune(tmp_path_factory) -> Chain:
    return chains.torchtune(tmp_path_factory)


FRAMEWORKS = ["nanogpt", "sft", "lightning_cli", "hydra_lightning", "torchtune"]
# What the first attempt was observed to train with (before any optimizer step: its OOM came first).
OBSERVED = {
    "nanogpt": {"micro_batch_size": (8, "input-shape"), "max_seq_len": (8, "input-shape"),
                "gradient_accumulation_steps": (4, "framework:nanogpt"), "precision": ("fp32", "framework:nanogpt")},
    # The subclass's own defaults, not the HF Trainer's (8, 1, off).
    "sft": {"micro_batch_size": (4, "input-shape"), "max_seq_len": (16, "input-shape"),
            "gradient_accumulation_steps": (2, "framework:hf-trainer"),
            "gradient_checkpointing": (True, "framework:hf-trainer"), "precision": ("fp32", "framework:hf-trainer")},
    "lightning_cli": {"micro_batch_size": (8, "input-shape"), "max_seq_len": (8, "input-shape"),
                      "gradient_accumulation_steps": (3, "framework:lightning"), "precision": ("fp32", "framework:lightning")},
    # big.yaml's, the group the command composed: not small.yaml's (2, 1), the default group's.
    "hydra_lightning": {"micro_batch_size": (8, "input-shape"), "max_seq_len": (8, "input-shape"),
                        "gradient_accumulation_steps": (3, "framework:lightning")},
    "torchtune": {"micro_batch_size": (16, "input-shape"), "max_seq_len": (16, "input-shape"),
                  "gradient_accumulation_steps": (2, "framework:torchtune"), "precision": ("fp32", "framework:torchtune")},
}
GLOBAL = {"nanogpt": 32, "sft": 8, "lightning_cli": 24, "hydra_lightning": 24, "torchtune": 32}
# One halving fits each job; torchtune's (16 -> 8 -> 4) takes two.
CAUSES = {"torchtune": ["gpu_oom", "gpu_oom", "ok"]}


def _declared(chain: Chain) -> set[str]:
    return {o for p in chain.first["parsers"] or () for o in p["options"]}


# Each framework's own syntax for what the relaunch added: what its parser takes, nothing else.
WRITTEN: dict[str, Callable[[Chain], None]] = {}


def _nanogpt_written(chain: Chain) -> None:
    added = _added(chain)
    assert added == ["--batch_size=4", "--gradient_accumulation_steps=8"]
    assert all(a.split("=")[0] in _declared(chain) for a in added)  # the keys its configurator takes


def _sft_written(chain: Chain) -> None:
    argv = chain.last["argv"]
    assert argv[argv.index("--per_device_train_batch_size") + 1] == "2"
    assert argv[argv.index("--gradient_accumulation_steps") + 1] == "4"
    assert "--gradient_checkpointing" not in argv  # already on in the subclass: no rung sets it again
    assert {a for a in _added(chain) if a.startswith("--")} <= _declared(chain)


def _lightning_cli_written(chain: Chain) -> None:
    # LightningCLI's own syntax, each flag where the command had it; no file edited.
    assert _added(chain) == ["--trainer.accumulate_grad_batches=6", "4"]
    assert chain.last["argv"][-2:] == ["--data.batch_size", "4"]
    assert {"--trainer.accumulate_grad_batches", "--data.batch_size"} <= _declared(chain)
    assert (chain.cwd / "cfg.yaml").read_text() == LIGHTNING_CLI_CFG


def _hydra_lightning_written(chain: Chain) -> None:
    # Overrides of the config Hydra composed (after trainer=big): neither group file is edited.
    assert _added(chain) == ["trainer.accumulate_grad_batches=6", "trainer.batch_size=4"]
    [hydra] = [p for p in chain.first["parsers"] if p["type"] == "hydra"]
    assert {a.split("=")[0] for a in _added(chain)} <= set(hydra["options"])
    for group in ("small", "big"):
        path = Path("hydra_lightning_conf") / "trainer" / f"{group}.yaml"
        assert (chain.cwd / path).read_text() == (JOBS / path).read_text()
    assert "small.yaml: " not in chain.said  # nothing written there


def _torchtune_written(chain: Chain) -> None:
    # torchtune's override on the command line; its config file holds the accumulation.
    assert _added(chain) == ["batch_size=4"]
    [parsed] = [p for p in chain.first["parsers"] if p["type"] == "torchtune"]
    assert "batch_size" in parsed["options"]
    edited = chains.TORCHTUNE_CFG.replace("accumulation_steps: 2", "accumulation_steps: 8")
    assert (chain.cwd / "cfg.yaml").read_text() == edited


WRITTEN.update(nanogpt=_nanogpt_written, sft=_sft_written, lightning_cli=_lightning_cli_written,
               hydra_lightning=_hydra_lightning_written, torchtune=_torchtune_written)


@pytest.fixture(params=FRAMEWORKS)
def chain(request) -> Chain:
    found = request.getfixturevalue(request.param)
    assert found.status == 0, found.said[-3000:]
    return found


def test_every_knob_the_first_attempt_trained_with_is_observed_right(chain, request):
    name = request.node.callspec.params["chain"]
    assert {k: v for k, v in chain.knobs(chain.first).items() if k in OBSERVED[name]} == OBSERVED[name]


def test_the_chain_converges_with_the_global_batch_exact_on_both_sides(chain, request):
    name = request.node.callspec.params["chain"]
    assert [r["cause"] for r in chain.records] == CAUSES.get(name, ["gpu_oom", "ok"])
    assert _global(chain, chain.first) == _global(chain, chain.last) == GLOBAL[name]
    # The relaunch's own accumulation is counted from its steps: the probe saw the change arrive.
    assert chain.knobs(chain.last)["gradient_accumulation_steps"][1] == "backward-per-step"


def test_the_relaunchs_probe_saw_its_changes_arrive(chain):
    # Decided by what the relaunched job trained with, not by its print or its OOM's figures.
    arrival = chain.last["arrival"]
    assert arrival["missing"] == {}
    assert {"micro_batch_size", "gradient_accumulation_steps"} <= set(arrival["confirmed"])
    assert arrival["source"] == dict.fromkeys(arrival["confirmed"], "probe")


def test_the_relaunch_writes_only_what_the_jobs_parser_takes(chain, request):
    WRITTEN[request.node.callspec.params["chain"]](chain)


def test_the_records_oom_names_the_phase_and_what_filled_memory(chain):
    oom = chain.first["oom"]
    assert (oom["phase"], oom["step"]) == ("forward", 0)
    assert oom["breakdown"]["parameters"] == chain.first["observed"]["model"]["parameters"] * 4  # fp32
    assert chain.last["oom"] is None
