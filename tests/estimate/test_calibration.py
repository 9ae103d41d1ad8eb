"""The model against 42 published measurements (tests/fixtures/memory/cases.jsonl).

Compared like with like: ``peak_bytes`` against max_memory_allocated; plus the modelled allocator
slack against max_memory_reserved; plus slack and CUDA context against nvidia-smi and against the
VRAM budget of "largest that fits" boundaries; OOM rows must be predicted over the card's capacity.
Exclusions are listed with their reason in ``cases.EXCLUDED``. Run with ``-s`` to see the table.

Two harnesses: the record -> inputs one (``cases``) reads every fact a record states, free text
included; the user's path (``user_path``) writes the profile a user would — the SPEC's keys only —
and runs it through ``gpudoc estimate --json``, by the formula and by the simulation.
"""

from __future__ import annotations

import statistics

import pytest

from tests.conftest import MEMORY_CASES
from tests.estimate.cases import EXCLUDED, compare, load_records
from tests.estimate.user_path import Result, profile_toml, run_case, summary, table

RECORDS = load_records(MEMORY_CASES)
_BY_ID = {r["id"]: r for r in RECORDS}
COMPARISONS = [compare(r) for r in RECORDS if r["id"] not in EXCLUDED]
NUMERIC = [c for c in COMPARISONS if c.error is not None]


def _table() -> str:
    lines = [f"{'case':<12} {'metric':<9} {'predicted':>10} {'measured':>10} {'error':>8}"]
    for c in COMPARISONS:
        if c.error is None:
            verdict = "OOM ok" if c.predicted > c.capacity else "OOM MISSED"
            lines.append(f"{c.id:<12} {c.kind:<9} {c.predicted / 1e9:>9.2f}G {c.capacity / 1e9:>9.2f}G {verdict:>8}")
        else:
            lines.append(f"{c.id:<12} {c.kind:<9} {c.predicted / 1e9:>9.2f}G {c.measured / 1e9:>9.2f}G "
                         f"{100 * c.error:>+7.1f}%")
    errors = [abs(c.error) for c in NUMERIC]
    lines.append(f"median |error| {100 * statistics.median(errors):.1f}%, within 25%: "
                 f"{100 * sum(e <= 0.25 for e in errors) / len(errors):.0f}%, "
                 f"under {sum(c.error < 0 for c in NUMERIC)} / over {sum(c.error > 0 for c in NUMERIC)}, "
                 f"excluded {sorted(EXCLUDED)}")
    return "\n".join(lines)


def test_every_record_is_compared_or_excluded_with_a_reason():
    ids = {r["id"] for r in RECORDS}
    assert len(ids) == len(RECORDS) == 42
    assert set(EXCLUDED) <= ids
    assert all(len(reason) > 40 for reason in EXCLUDED.values())
    assert len(EXCLUDED) <= 4


def test_a_torchtune_row_of_an_era_whose_configs_all_name_torchs_loss_is_written_with_it():
    """Up to 0.2 every torchtune config but DPO's names torch.nn.CrossEntropyLoss, which gpudoc reads from
    the job's config (``loss._component_``) as the model's fp32 logits: the README rows of that era, which
    give no loss_impl, are written with it; the 0.3 rows with the chunked loss their source states."""
    for case in ("tt2-01", "tt2-04", "tt2-07"):
        assert 'loss = "fp32_logits"' in profile_toml(_BY_ID[case])
    assert 'loss = "chunked"' in profile_toml(_BY_ID["tt3-04"])
    assert "\nloss = " not in profile_toml(_BY_ID["lit-13"])  # no torchtune release: the config gpudoc reads


def test_calibration_error_bounds():
    print("\n" + _table())
    errors = [abs(c.error) for c in NUMERIC]
    assert len(NUMERIC) >= 30
    assert statistics.median(errors) <= 0.15
    assert sum(e <= 0.25 for e in errors) >= 0.9 * len(errors)
    under = sum(c.error < 0 for c in NUMERIC)
    over = sum(c.error > 0 for c in NUMERIC)
    assert under < over, "under-predictions cause OOMs: they must be the rarer side"


@pytest.mark.parametrize("comparison", [c for c in COMPARISONS if c.kind == "oom"], ids=lambda c: c.id)
def test_oom_rows_are_predicted_over_capacity(comparison):
    assert comparison.predicted > comparison.capacity


def test_fitting_rows_are_predicted_under_the_card():
    """A run that fit on its GPU must not be predicted as impossible there (beyond 10%)."""
    for c in NUMERIC:
        if c.capacity and c.kind != "boundary":
            assert c.peak <= 1.1 * c.capacity, c.id


# --- through the user's path: profiles with the SPEC's keys, run by `gpudoc estimate --json` -------

# Shown in the table, not bounded: titan-13 (TP 8 x PP 8 x FSDP 8) states neither its pipeline micro
# batch (its local batch of 32 is written as torchtitan's default, 32 micro batches of 1; 8 of 4 would
# hold four times the activations) nor its Float8 / AsyncTP buffers. The LitGPT FSDP rows are bounded:
# lit-gpt's finetune/lora.py at their table's commit (8641822) wraps and checkpoints every Block
# (``FSDPStrategy(auto_wrap_policy={Block}, activation_checkpointing_policy={Block})``), and Fabric's
# ``no_backward_sync`` holds every block's gradient unsharded until the last micro batch (``fsdp``).
_UNBOUNDED = {"titan-13"}
# Always run: the smallest case of each family the simulation rebuilds (GPT-2, BERT, GPT-NeoX, Llama,
# Phi, T5), seconds each; bench/calibrate.py runs every case (minutes).
# The LitGPT rows run LitGPT's own model and step under Fabric, as their user's factory
# (tests/estimate/jobs/litgpt_lora.py).
SIMULATED_SUBSET = ("adan-01", "hf-bert-07", "lit-10", "tt-lora-01", "lit-01", "peft-01")
# Measured on this subset: median |error| 2.2%, none under by more than 10% (2.7% and one, hf-bert-07 at
# -19.1%, before the BERT rows' torch 1.10 was stated and LitGPT's step held its logits through backward;
# 7.0% with the allocator's slack on the whole peak, not only on what is freed and requested again).
# peft-01 (+18%) measured weights, gradients and AdamW's states with no foreach copy at the step: the
# for-loop AdamW of torch before 2.0 (early 2023), a version its record does not state.
SUBSET_MEDIAN, SUBSET_UNDER = 0.035, 0


def test_the_profile_carries_the_loss_and_lora_dropout_the_record_states():
    """The torchtune 0.3 rows give no loss_impl, but their record says the default configs' chunked
    cross-entropy ran; LitGPT's rows state their adapters' dropout. A profile that left either out
    would be estimated with the full-vocabulary loss and an assumed dropout instead."""
    assert 'loss = "chunked"' in profile_toml(_BY_ID["tt3-01"])
    assert "lora_dropout = 0.05" in profile_toml(_BY_ID["lit-13"])
    assert "lora_dropout" not in profile_toml(_BY_ID["tt-lora-01"])  # its record does not say
    # torchtune's recipes train torchtune's own (bf16) LoRA layers, not peft's fp32 ones.
    assert '[bind]\nargs = "torchtune"' in profile_toml(_BY_ID["tt-lora-01"])
    assert "[bind]" not in profile_toml(_BY_ID["peft-01"])
    assert 'loss = "classification"' in profile_toml(_BY_ID["hf-bert-01"])  # BertForSequenceClassification
    # The PyTorch release the record's software names, whose defaults moved memory (``estimate.stack``).
    assert '[estimate]\ntorch = "1.10"' in profile_toml(_BY_ID["hf-bert-01"])
    assert '[estimate]\ntorch = "2.1"' in profile_toml(_BY_ID["lit-13"])
    assert "[estimate]" not in profile_toml(_BY_ID["adan-01"])  # "not stated"
    # torchtune 0.1's requirements.txt pins torchao 0.1, whose NF4 load quantizes whole weights.
    assert '[estimate]\ntorch = "2.2"\ntorchao = "0.1"' in profile_toml(_BY_ID["tt-qlora-01"])
    assert "torchao" not in profile_toml(_BY_ID["tt3-01"])  # torchtune 0.3


# Rows measured on an old stack, each under-predicted for what its profile's ``[estimate]`` releases
# (torch 1.10 for the BERT rows, torchao 0.1 for torchtune 0.1's) do not describe:
_OLD_STACK = {
    # torchtune 0.1 pins torchao 0.1, which quantizes each whole weight at load (68 bytes a weight of the
    # largest matrix: ``[estimate] torchao = "0.1"``, -32% to -21%). Even so the load's allocated peak is
    # 6.97 GB, where the source measured 9.13 GB reserved right after the model's init: the allocator's cache
    # of those per-weight temporaries (1.4 GB blocks, split by the packed weights between them).
    "tt-qlora-01": "torchao 0.1's load, reserved by the caching allocator",
    # BERT-large under AMP on torch 1.10: with the eager scores saved as CUDA autocast keeps them (fp32 softmax,
    # mask, the PV matmul's half copy: 7 B an element, not 11) both paths put it 1.5-1.7 GB below the fp32 row
    # (the simulation's 13.08 GB, -10.5%, already did), where the source measured 1.06 GB below by nvidia-smi;
    # its fp32 row is 7.0-7.6% under in both paths as well. Not explained by what autograd saves.
    "hf-bert-04": "AMP 1.06 GB under fp32 by nvidia-smi on torch 1.10, 1.5-1.7 GB in both paths",
}
# Rows whose published figure the source's own maintainers could not reproduce at the row's setting:
_UNREPRODUCED = {
    # pytorch/torchtune#961 (2024-05-10), on the README table of 0217d44c2: llama2/7B_full_low_memory at batch
    # 4 x 2048 peaked at 20.2 GB allocated "and similar for reserved" (22.3 GB on an A100), not 24.1 GB.
    "tt2-04": "torchtune README's 24.1 GB, not reproduced (torchtune#961)",
}


def _user_path(tmp_path, records, **kw) -> list[Result]:
    return [run_case(r, tmp_path / r["id"], **kw) for r in records]


def _bounded(results: list[Result]) -> list[Result]:
    return [x for x in results if x.error is not None and x.id not in _UNBOUNDED]


@pytest.mark.parametrize("with_config", [True, False], ids=["config.json", "shapes"])
def test_the_formula_through_the_users_path(tmp_path, with_config):
    """Every case as its user writes the profile — the model's config.json (its family's config class,
    the case's shapes) or the shapes alone — through `gpudoc estimate --json`. Run with -s for the
    table."""
    results = _user_path(tmp_path, RECORDS, with_config=with_config)
    print("\n" + table(f"formula, model from {'config.json' if with_config else 'shapes'}", results))
    assert all(x.source == "formula" for x in results)
    for x in results:
        if x.kind == "oom":
            assert x.capacity and x.predicted > x.capacity, f"{x.id}: an OOM predicted to fit"
        elif x.capacity and x.kind != "boundary":
            assert x.predicted <= 1.6 * x.capacity, f"{x.id}: a run that fit predicted far over its card"
    s = summary(_bounded(results))
    assert s["n"] >= 35
    # Toward the target through the user's path; measured 4.3% / 4.3% (4.4% before a compiled
    # block without checkpointing was counted as torch.compile's partition keeps it, tt3-04 then +28.6%;
    # 4.3% before FSDP's sharded gradients were counted in the allocator's reserve, tt2-07 then under by
    # 16%; 4.7% while a checkpointed block's
    # recompute was counted on top of the loss's buffers, which are freed before it, and torchtitan's compiled
    # blocks kept what eager ones keep; 4.4% with the LitGPT FSDP rows bounded, 4.6% before a LitGPT job's loss
    # and blocks were counted as LitGPT's code keeps them; 6.5% before the 0.1-0.2 torchtune rows' loss was
    # written as their configs name it; 8.1% / 8.1% with the allocator's slack on the
    # whole peak, weights and optimizer states included; 7.9% / 8.9% before the adapters were counted as
    # their library keeps them and the BERT rows' classifier's head was written down).
    assert s["median"] <= 0.05
    assert s["within25"] >= 0.80
    # Under-prediction lets a job through the gate into an OOM: no row is under by more than 10% but
    # those whose stack a profile cannot state (``_OLD_STACK``) or whose figure was not reproduced
    # (``_UNREPRODUCED``); the cheapest readings of silent profiles gave 5 (with config.json) and 15 (from shapes).
    assert {x.id for x in _bounded(results) if x.error < -0.10} <= set(_OLD_STACK) | set(_UNREPRODUCED)
    # The sharded rows (zero_stage = 3 in their profiles: FSDP's and DeepSpeed's regime alike) are not
    # under-predicted on average; measured +4.5% (titan-01/04/10, tt2-07, tt3-07, lit-22/25/28).
    sharded = [x for x in _bounded(results) if (_BY_ID[x.id]["parallelism"] or {}).get("zero_stage")]
    assert len(sharded) >= 5 and summary(sharded)["mean"] >= 0


def _simulated(tmp_path, ids) -> list[Result]:
    # Every case through the simulation takes minutes: bench/calibrate.py runs them all.
    by_id = {r["id"]: r for r in RECORDS}
    return _user_path(tmp_path, [by_id[i] for i in ids], simulate=True)


def test_the_simulation_through_the_users_path_on_small_cases(tmp_path):
    results = _simulated(tmp_path, SIMULATED_SUBSET)
    print("\n" + table("simulation, subset", results))
    assert all(x.source == "simulation" for x in results), [(x.id, x.notes) for x in results]
    litgpt = [x for x in results if x.id.startswith("lit-")]
    assert litgpt and all(any("litgpt_lora:build" in n for n in x.notes) for x in litgpt)  # LitGPT's code ran
    s = summary(results)
    assert s["median"] <= SUBSET_MEDIAN
    assert s["under10"] <= SUBSET_UNDER
