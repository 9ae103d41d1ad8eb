"""Did a relaunch's change reach the job: the relaunch's probe first, then the job's own print, then the
OOM's figures."""

from __future__ import annotations

from gpudoc.diagnose.diagnosis import Diagnosis
from gpudoc.ladder.arrival import check_arrival, without_unreached
from gpudoc.ladder.model import LadderResult, Suggestion

GIB = 1 << 30


def _oom(requested: float, allocated: float) -> Diagnosis:
    return Diagnosis(cause="gpu_oom", summary="oom", requested_bytes=int(requested * GIB),
                     allocated_bytes=int(allocated * GIB))


HALVE = {"micro_batch_size": (8, 4), "gradient_accumulation_steps": (2, 4)}


def test_the_old_value_printed_again_is_a_change_that_did_not_arrive():
    arrival = check_arrival(HALVE, {"micro_batch_size": [8], "gradient_accumulation_steps": [2]},
                            _oom(4, 21), _oom(2, 21))
    assert set(arrival.missing) == {"micro_batch_size", "gradient_accumulation_steps"}
    assert arrival.missing["micro_batch_size"] == "the job printed micro_batch_size = 8 again, not 4"


def test_the_new_value_printed_confirms_it():
    arrival = check_arrival(HALVE, {"micro_batch_size": [4, 4], "gradient_accumulation_steps": [4]},
                            _oom(4, 21), _oom(4, 21))
    assert arrival.missing == {} and arrival.confirmed == ("micro_batch_size", "gradient_accumulation_steps")


def test_silent_job_with_the_same_oom_lost_the_knobs_that_move_memory():
    arrival = check_arrival(HALVE, {}, _oom(4, 21.12), _oom(4, 21.12))
    # Accumulation does not move the memory an OOM reports: the figures cannot speak for it.
    assert list(arrival.missing) == ["micro_batch_size"]
    assert arrival.missing["micro_batch_size"] == ("the out-of-memory error is the same as before the change "
                                                   "(asked for 4.0 GiB with 21.1 GiB allocated)")


def test_silent_job_whose_oom_moved_or_has_no_figures_is_not_accused():
    assert check_arrival(HALVE, {}, _oom(4, 21), _oom(2, 21)).missing == {}
    unknown = Diagnosis(cause="gpu_oom", summary="oom")
    assert check_arrival(HALVE, {}, unknown, unknown).missing == {}
    assert check_arrival(HALVE, {}, _oom(4, 21), Diagnosis(cause="error", summary="boom")).missing == {}


def test_what_the_probe_saw_decides_before_the_print_and_the_figures():
    # The probe saw the new micro batch; nothing of accumulation (an OOM before the first step).
    arrival = check_arrival(HALVE, {"gradient_accumulation_steps": [4]}, _oom(4, 21), _oom(4, 21),
                            observed={"micro_batch_size": 4})
    assert arrival.missing == {} and arrival.confirmed == ("micro_batch_size", "gradient_accumulation_steps")
    assert arrival.source == {"micro_batch_size": "probe", "gradient_accumulation_steps": "echo"}
    assert arrival.to_dict()["source"] == {"micro_batch_size": "probe", "gradient_accumulation_steps": "echo"}


def test_a_probe_that_contradicts_the_print_wins():
    # The banner printed the flag's new value, but the job trained with its own hard-coded batch.
    arrival = check_arrival(HALVE, {"micro_batch_size": [4], "gradient_accumulation_steps": [4]}, _oom(4, 21),
                            _oom(2, 21), observed={"micro_batch_size": 8, "gradient_accumulation_steps": 4})
    assert arrival.missing == {"micro_batch_size": "the probe saw the job still train with micro_batch_size = 8, not 4"}
    assert arrival.confirmed == ("gradient_accumulation_steps",)
    assert arrival.source == {"micro_batch_size": "probe", "gradient_accumulation_steps": "probe"}
    # Neither value: the change did not arrive as written either.
    assert check_arrival({"micro_batch_size": (8, 4)}, {"micro_batch_size": [4]}, None, None,
                         observed={"micro_batch_size": 6}).missing == {
        "micro_batch_size": "the probe saw the job train with micro_batch_size = 6, not 4"}


def test_a_probe_that_saw_nothing_leaves_the_print_and_the_figures_to_decide():
    for observed in (None, {}, {"precision": "fp32"}):
        arrival = check_arrival(HALVE, {}, _oom(4, 21), _oom(4, 21), observed=observed)
        assert arrival.missing == {"micro_batch_size": "the out-of-memory error is the same as before the change "
                                                       "(asked for 4.0 GiB with 21.0 GiB allocated)"}
        assert arrival.source == {"micro_batch_size": "oom-figures"}
    # A probe's True is not the knob's 1, nor its False the knob's 0.
    flipped = check_arrival({"gradient_checkpointing": (False, True)}, {}, None, None,
                            observed={"gradient_checkpointing": 1})
    assert list(flipped.missing) == ["gradient_checkpointing"]


def test_rungs_of_a_knob_that_did_not_arrive_are_taken_out_with_the_reason():
    halve = Suggestion("halve-micro-batch", {"micro_batch_size": [4, 2], "gradient_accumulation_steps": [4, 8]})
    checkpointing = Suggestion("gradient-checkpointing", {"gradient_checkpointing": [False, True]})
    shorter = Suggestion("shorter-sequences", {"max_seq_len": [1024, 768], "micro_batch_size": [4, 4]}, semantic=True)
    ladder = LadderResult(suggestions=[halve, checkpointing], semantic_held_back=[shorter])
    why = {"micro_batch_size": "run R: the job printed micro_batch_size = 8 again, not 4"}
    kept = without_unreached(ladder, why)
    assert kept.suggestions == [checkpointing] and kept.semantic_held_back == [] and not kept.exhausted
    assert [(s.rung, s.reason) for s in kept.skipped] == [
        ("halve-micro-batch", "micro_batch_size did not reach the job (run R: the job printed micro_batch_size = 8 "
                              "again, not 4)"),
        ("shorter-sequences", "micro_batch_size did not reach the job (run R: the job printed micro_batch_size = 8 "
                              "again, not 4)")]
    # Nothing else left: the ladder is exhausted for this job until the knob is bound.
    assert without_unreached(LadderResult(suggestions=[halve]), why).exhausted
    assert without_unreached(ladder, {}) is ladder
