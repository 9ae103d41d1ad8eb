"""The ladder follows its evidence: an attempt whose change never reached the job tried nothing, a
rung expected to use more memory never comes first, a change that arrived and left the OOM as it
was rules out the rungs acting on the same memory, and the probe's phase picks the family."""

from __future__ import annotations

from types import SimpleNamespace

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder import suggest
from gpudoc.ladder.evidence import ACTIVATIONS, Attempt, Evidence, family_of, same_breakdown
from gpudoc.runs.record import RunRecord
from gpudoc.units import GIB, MIB
from tests.ladder.helpers import by_rung, fake_estimate, no_estimate, oom, profile

SEED_004 = {"micro_batch_size": 2, "gradient_accumulation_steps": 8, "max_seq_len": 1024,
            "gradient_checkpointing": True, "precision": "fp16", "offload_optimizer": False}
SAME = "asked for 2.0 MiB with 15.3 GiB allocated"


def _seed_004_oom() -> Diagnosis:
    # Seed 004's figures: 2 MiB asked with 2.44 MiB free of 15.57 GiB, 15.27 GiB allocated.
    return oom(requested=2 * MIB, free=int(2.44 * MIB), total=int(15.57 * GIB), allocated=int(15.27 * GIB),
               frag=int(164.52 * MIB))


def test_a_halving_that_arrived_and_left_the_oom_as_it_was_rules_out_the_activation_rungs():
    halved = Attempt("r2", {"micro_batch_size": (4, 2), "gradient_accumulation_steps": (4, 8)}, {}, SAME)
    result = suggest(_seed_004_oom(), profile(SEED_004, env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}),
                     evidence=Evidence((halved,)), estimate=no_estimate, allow_semantic=True)
    assert [s.rung for s in result.suggestions] == ["offload-optimizer"]  # not 2 -> 1, not shorter sequences
    reasons = {s.rung: s.reason for s in result.skipped}
    assert reasons["halve-micro-batch"] == (
        f"micro_batch_size 4 -> 2 reached the job in run r2 and the out-of-memory error stayed the same ({SAME}): "
        "the memory is not in the activations; halve-micro-batch acts on the activations")
    assert reasons["shorter-sequences"].startswith("micro_batch_size 4 -> 2 reached the job in run r2")


def test_a_change_that_did_not_arrive_rules_nothing_out():
    lost = Attempt("r2", {"micro_batch_size": (4, 2)}, {"micro_batch_size": "the job printed 4 again"}, SAME)
    assert Evidence((lost,)).ruled_out() == {}
    moved = Attempt("r2", {"micro_batch_size": (4, 2)}, {}, None)  # the OOM changed: the memory moved
    assert Evidence((moved,)).ruled_out() == {}


def test_an_oom_in_the_optimizer_step_goes_to_the_optimizer_rungs():
    train = {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "gradient_checkpointing": False,
             "zero_stage": 1, "offload_optimizer": False}
    result = suggest(oom(), profile(train, launch={"nproc_per_node": 4}), evidence=Evidence(phase="optimizer"),
                     estimate=no_estimate)
    order = [s.rung for s in result.suggestions]
    assert order == ["expandable-segments", "zero-stage", "offload-optimizer"]
    assert {s.rung: s.reason for s in result.skipped}["gradient-checkpointing"].startswith(
        "the out-of-memory error came in the optimizer step (the probe saw it), after the activations were freed")
    forward = suggest(oom(), profile(train, launch={"nproc_per_node": 4}), evidence=Evidence(phase="backward"),
                      estimate=no_estimate)
    assert [s.rung for s in forward.suggestions][1:3] == ["halve-micro-batch", "gradient-checkpointing"]


def test_the_probes_breakdown_tells_the_same_memory_apart():
    before = {"parameters": GIB, "gradients": GIB, "optimizer_states": 2 * GIB, "other": 3 * GIB}
    assert same_breakdown(before, dict(before, reserved_unallocated=5)) == (
        "the probe saw parameters 1.0 GiB, gradients 1.0 GiB, optimizer states 2.0 GiB, other 3.0 GiB")
    assert same_breakdown(before, dict(before, other=2 * GIB)) is None
    assert same_breakdown(None, before) is None
    nothing = dict.fromkeys(before, 0)  # a probe that saw no memory held: nothing proven the same
    assert same_breakdown(nothing, nothing) is None
    assert same_breakdown({"parameters": GIB}, {"parameters": GIB}) is None  # the rest unseen
    assert family_of("fewer-negatives", {"n_negatives": [24, 16]}) is None
    assert family_of("my-batch", {"micro_batch_size": [4, 2]}) == ACTIVATIONS


def _record(run_id, knobs, *, missing=None):
    return RunRecord(id=run_id, command=["python", "train.py"], cwd="/", profile={"knobs": knobs, "env": {}},
                     cause="gpu_oom", status="failed", exit_code=1, diagnosis=Diagnosis(cause="gpu_oom", summary=""),
                     arrival={"missing": missing or {}, "confirmed": []})


SEED_002 = {"micro_batch_size": 45, "gradient_accumulation_steps": 5, "gradient_checkpointing": True,
            "precision": "fp16"}


def test_seed_002_a_batch_the_job_never_saw_is_not_already_tried():
    # --retry-oom wrote 15 x 15, the job kept its own 45; the user bound the knob and ran 45 again.
    ignored = _record("r2", {"micro_batch_size": 15, "gradient_accumulation_steps": 15},
                      missing={"micro_batch_size": "the job printed micro_batch_size = 45 again, not 15"})
    ignored.profile["knobs"].update(gradient_checkpointing=True, precision="fp16")
    result = suggest(oom(), profile(SEED_002), history=[ignored], estimate=no_estimate)
    assert by_rung(result)["halve-micro-batch"].changes == {"micro_batch_size": [45, 15],
                                                           "gradient_accumulation_steps": [5, 15]}
    assert not result.exhausted
    # The same run, its change arrived: that configuration ran out of memory, so it is not proposed.
    ran = _record("r2", dict(ignored.profile["knobs"]))
    again = suggest(oom(), profile(SEED_002), history=[ran], estimate=no_estimate)
    assert "halve-micro-batch" not in by_rung(again)


def _zero3_costs_more(p, **kw):
    """Seed 001's situation: ZeRO-3's gathered parameters and buffers cost more than they shard."""
    if int(p.knobs.get("zero_stage", 0)) >= 3:
        estimate = fake_estimate(p.with_train({"zero_stage": 2}), **kw)
        return SimpleNamespace(peak_bytes=estimate.peak_bytes + int(591.3 * MIB), breakdown=estimate.breakdown)
    return fake_estimate(p, **kw)


def test_seed_001_a_rung_expected_to_use_more_memory_is_listed_after_one_expected_to_fit():
    train = {"zero_stage": 2, "offload_optimizer": False}
    # The estimate is below what the run needed: nothing is skipped by its saving, the order decides.
    result = suggest(oom(requested=int(3.91 * GIB), free=int(3.8 * GIB), allocated=int(17.89 * GIB)),
                     profile(train, launch={"nproc_per_node": 4}), estimate=_zero3_costs_more)
    order = [s.rung for s in result.suggestions]
    assert order.index("offload-optimizer") < order.index("zero-stage") == len(order) - 1
    assert by_rung(result)["zero-stage"].expected_saving_bytes == -int(591.3 * MIB)
    assert "zero-stage is expected to use about 591.3 MiB more per GPU: listed after the rungs expected to free " \
           "memory" in result.notes
    assert result.first_profile_change().rung != "zero-stage"


def test_a_breakdown_with_almost_no_activations_sends_the_ladder_to_the_other_rungs():
    train = {"micro_batch_size": 4, "gradient_accumulation_steps": 2, "gradient_checkpointing": False,
             "zero_stage": 1, "offload_optimizer": False}
    held = {"parameters": 6 * GIB, "gradients": 6 * GIB, "optimizer_states": 12 * GIB, "other": 300 * MIB}
    result = suggest(oom(), profile(train, launch={"nproc_per_node": 4}), evidence=Evidence(phase="forward",
                     breakdown=held), estimate=no_estimate)
    assert [s.rung for s in result.suggestions] == ["expandable-segments", "zero-stage", "offload-optimizer"]
    reason = {s.rung: s.reason for s in result.skipped}["halve-micro-batch"]
    assert reason.startswith("at the OOM the activations and temporaries held 300.0 MiB of the 24.3 GiB allocated "
                             "(parameters 6.0 GiB, gradients 6.0 GiB, optimizer states 12.0 GiB; the probe saw it)")
    # Activations that matter, or figures the probe could not give (a CPU job has no allocator's view): no rule.
    for breakdown in ({**held, "other": 4 * GIB}, {k: v for k, v in held.items() if k != "other"}, None):
        assert Evidence(phase="forward", breakdown=breakdown).ruled_out() == {}
