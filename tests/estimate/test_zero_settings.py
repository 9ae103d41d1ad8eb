"""The job's DeepSpeed ZeRO settings, one reader for every stage: DeepSpeed's defaults where its JSON
is silent, "auto" as the HF Trainer fills it, a bad value refused in one line; read from verbatim
DeepSpeed JSONs, they move the formula's ZeRO-1/2 buckets as they move DeepSpeed's."""

from __future__ import annotations

import json

import pytest

from gpudoc.errors import ProfileError
from gpudoc.estimate import estimate, zero_settings
from gpudoc.job.knobs import read_job
from gpudoc.profiles.model import Profile
from tests.conftest import CONFIGS, FIXTURES

HELDOUT = FIXTURES / "real" / "heldout"
MODEL = {"layers": 16, "hidden": 2048, "heads": 32, "kv_heads": 8, "ffn": 8192, "vocab": 128256}
TRAIN = {"micro_batch_size": 2, "max_seq_len": 512, "precision": "bf16"}


def test_the_settings_are_deepspeeds_defaults_unless_the_json_sets_them():
    s = zero_settings.settings((), 4096)
    assert (s.max_live, s.reuse_distance, s.prefetch_bucket, s.persistence_threshold, s.reduce_bucket,
            s.sub_group, s.contiguous_gradients) == (1e9, 1e9, 5e7, 1e5, 5e8, 1e9, True)
    # overlap_comm is DeepSpeed's "dynamic default": on at stage 3 only (overlap_comm_valid).
    assert (s.overlap_comm, zero_settings.settings((), 4096, stage=2).overlap_comm) == (True, False)
    given = zero_settings.job_settings([("accelerate.yaml", {"deepspeed_config": {}}),
                                        ("ds.json", {"zero_optimization": {"stage": 3, "stage3_max_live_parameters": 3e9,
                                                                           "reduce_bucket_size": "auto",
                                                                           "stage3_prefetch_bucket_size": "auto"}})])
    assert given == (("reduce_bucket_size", "auto"), ("stage3_max_live_parameters", 3e9),
                     ("stage3_prefetch_bucket_size", "auto"))
    s = zero_settings.settings(given, 1000)
    assert (s.max_live, s.prefetch_bucket, s.reduce_bucket, s.reuse_distance) == (3e9, 900_000, 1e6, 1e9)
    assert zero_settings.job_settings([("train.yaml", {"lr": 1})]) == ()


def test_the_stage_1_and_2_settings_of_verbatim_deepspeed_jsons():
    # transformers' tests/deepspeed/ds_config_zero2.json: 2e8-element buckets, two of them.
    zero2 = json.loads((HELDOUT / "transformers__tests__deepspeed__ds_config_zero2.json").read_text())
    given = zero_settings.job_settings([("ds_config_zero2.json", zero2)])
    assert dict(given) == {"reduce_bucket_size": 2e8, "allgather_bucket_size": 2e8, "overlap_comm": True,
                           "contiguous_gradients": True}
    s = zero_settings.settings(given, 2048, stage=2)
    assert (s.reduce_bucket, s.buckets, s.contiguous_gradients) == (2e8, 2, True)
    # axolotl's zero1.json turns overlap_comm on; LLaMA-Factory's ds_z2_offload_config.json writes round robin.
    zero1 = json.loads((HELDOUT / "axolotl__deepspeed_configs__zero1.json").read_text())
    assert zero_settings.job_settings([("zero1.json", zero1)]) == (("overlap_comm", True),)
    offload = json.loads((CONFIGS / "LLaMA-Factory__examples__deepspeed__ds_z2_offload_config.json").read_text())
    assert dict(zero_settings.job_settings([("ds_z2_offload_config.json", offload)]))["round_robin_gradients"] is True


@pytest.mark.parametrize(("key", "value", "said"), [
    ("sub_group_size", "lots", "'lots' is not a count of elements"),
    ("allgather_bucket_size", "auto", "'auto' is not a count of elements"),  # the HF Trainer fills no such "auto"
    ("overlap_comm", "yes", "'yes' is not true or false"),
    ("contiguous_gradients", 1, "1 is not true or false"),
])
def test_a_bad_setting_names_the_file_key_and_value(key, value, said):
    with pytest.raises(ProfileError, match=rf"^ds\.json: zero_optimization\.{key} = {said} \(DeepSpeed refuses it too\)$"):
        zero_settings.job_settings([("ds.json", {"zero_optimization": {key: value}})])


def _zero2_estimate(tmp_path, ds: dict, **train: object):
    (tmp_path / "train.py").write_text("import deepspeed\n")
    (tmp_path / "ds.json").write_text(json.dumps(ds))
    job = read_job(["deepspeed", "--num_gpus", "4", "train.py", "--deepspeed_config", "ds.json"], tmp_path)
    return estimate(Profile(name="p", path=tmp_path / "gpudoc.toml", train={**TRAIN, **train}, model=MODEL,
                            launch={"nproc_per_node": 4}, job=job))


def test_the_formula_sizes_zero_2s_buckets_from_the_jobs_json(tmp_path):
    """transformers' ZeRO-2 JSON, verbatim: two 2e8-element bf16 buckets, the optimizer on the host (its
    gradients through one buffer of the largest parameter), against DeepSpeed's defaults: one of 5e8."""
    verbatim = json.loads((HELDOUT / "transformers__tests__deepspeed__ds_config_zero2.json").read_text())
    est = _zero2_estimate(tmp_path, verbatim, zero_stage=2, offload_optimizer=True)
    silent = {**verbatim, "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}
    default = _zero2_estimate(tmp_path, silent, zero_stage=2, offload_optimizer=True)
    assert est.peak_phase == default.peak_phase == "forward_backward"
    fb, fb_default = est.breakdown, default.breakdown
    largest = 128256 * 2048  # the embedding: the largest parameter
    assert fb["workspace"] - fb_default["workspace"] == pytest.approx((2 * 2e8 - 5e8) * 2)
    assert fb_default["workspace"] >= 5e8 * 2 + largest * 2
    assert fb["optimizer"] == fb["gradients"] == 0  # the fp32 share, its states and gradients are the host's
    assert ("ZeRO-2: reduce bucket 2e+08 elements x 2, optimizer on the host, from the job's DeepSpeed JSON "
            "(reduce_bucket_size 2e+08, allgather_bucket_size 2e+08, overlap_comm true, contiguous_gradients true; "
            "DeepSpeed's defaults for the rest)") in est.notes
    # Without contiguous_gradients (and the optimizer on the GPU) no bucket is allocated whole: the
    # reduce flattens no more than the model has.
    whole = {"zero_optimization": {"stage": 2, "reduce_bucket_size": 1e10}}
    flat = {"zero_optimization": {"stage": 2, "contiguous_gradients": False, "reduce_bucket_size": 1e10}}
    whole_est, flat_est = _zero2_estimate(tmp_path, whole, zero_stage=2), _zero2_estimate(tmp_path, flat, zero_stage=2)
    assert whole_est.peak_phase == flat_est.peak_phase == "forward_backward"
    assert whole_est.breakdown["workspace"] - flat_est.breakdown["workspace"] == \
        pytest.approx((1e10 - flat_est.inputs["params"]) * 2, rel=1e-3)


def test_a_bad_setting_in_the_jobs_json_is_refused_in_one_line(tmp_path):
    """The JSON the job's command names, read as `gpudoc run` reads the command: the estimate stops
    at it, naming the file, key and value."""
    with pytest.raises(ProfileError) as refused:
        _zero2_estimate(tmp_path, {"zero_optimization": {"stage": 2, "overlap_comm": "yes"}}, zero_stage=2)
    assert str(refused.value) == \
        "ds.json: zero_optimization.overlap_comm = 'yes' is not true or false (DeepSpeed refuses it too)"
