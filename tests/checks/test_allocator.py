from dataclasses import replace

import pytest

from gpudoc.allocator import parse
from gpudoc.checks._common import CheckContext
from gpudoc.checks.allocator import check_alloc_conf
from gpudoc.facts.model import TorchFacts
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A5000, only, profile, sev, snap

NEW = CheckContext(alloc_env_name="PYTORCH_ALLOC_CONF", torch_version="2.13.0")
OLD = CheckContext(alloc_env_name="PYTORCH_CUDA_ALLOC_CONF", torch_version="2.2.2")


def run(env, ctx=NEW, prof=EMPTY):
    return check_alloc_conf(snap(A5000, env=env), prof, ctx)


def test_unset_recommends_the_name_this_torch_reads():
    assert only(run({}), Severity.INFO).remedy == "export PYTORCH_ALLOC_CONF=expandable_segments:True"
    assert only(run({}, OLD), Severity.INFO).remedy == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def test_seed_setting_is_ok_on_old_torch():
    # The seed guides' exact value.
    f = only(run({"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128,expandable_segments:True"}, OLD), Severity.OK)
    assert f.title == "PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True"


def test_new_name_is_ignored_by_old_torch():
    findings = run({"PYTORCH_ALLOC_CONF": "expandable_segments:True"}, OLD)
    f = only(findings, Severity.WARN)
    assert "torch 2.2.2 reads only PYTORCH_CUDA_ALLOC_CONF" in f.title
    assert f.remedy == "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True"


def test_old_name_on_new_torch_is_deprecated_info():
    findings = run({"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    f = next(x for x in findings if "deprecated" in x.title)
    assert f.severity is Severity.INFO
    assert f.remedy == "export PYTORCH_ALLOC_CONF=expandable_segments:True; unset PYTORCH_CUDA_ALLOC_CONF"


def test_both_set_and_disagreeing():
    findings = run({"PYTORCH_ALLOC_CONF": "expandable_segments:True", "PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:64"})
    f = next(x for x in findings if "disagree" in x.title)
    assert f.severity is Severity.WARN
    assert "reads PYTORCH_ALLOC_CONF, PYTORCH_CUDA_ALLOC_CONF is ignored" in f.detail
    assert f.remedy == "unset PYTORCH_CUDA_ALLOC_CONF"
    assert set(f.affects) == {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"}


def test_typo_fails_with_did_you_mean_and_a_corrected_value():
    findings = run({"PYTORCH_ALLOC_CONF": "expandable_segment:True,max_split_size_mb:128"})
    f = only(findings, Severity.FAIL)
    assert "unknown option 'expandable_segment' (did you mean 'expandable_segments'?)" in f.title
    assert f.remedy == "export PYTORCH_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True"


@pytest.mark.parametrize("value, message", [
    ("expandable_segments:true", "expects True or False"),
    ("max_split_size_mb:16", "must be greater than 20"),
    ("max_split_size_mb:128MB", "expects a whole number"),
    ("garbage_collection_threshold:1.5", "strictly between 0.0 and 1.0"),
    ("roundup_power2_divisions:3", "power of two"),
    ("pinned_num_register_threads:256", "at most 128"),
    ("backend:cudamallocasync", "native or cudaMallocAsync"),
    ("expandable_segments", "has no ':value'"),
])
def test_bad_values_fail(value, message):
    f = only(run({"PYTORCH_ALLOC_CONF": value}), Severity.FAIL)
    assert message in f.title
    assert f.affects == ("PYTORCH_ALLOC_CONF",)


def test_bracket_lists_parse_like_torch():
    options, problems = parse("roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:True")
    assert problems == []
    assert [o.key for o in options] == ["roundup_power2_divisions", "expandable_segments"]
    assert only(run({"PYTORCH_ALLOC_CONF": "roundup_power2_divisions:[256:1,512:2,>:4],expandable_segments:True"}),
                Severity.OK)


def test_expandable_off_or_missing_is_info():
    f = only(run({"PYTORCH_ALLOC_CONF": "max_split_size_mb:128"}), Severity.INFO)
    assert f.remedy == "export PYTORCH_ALLOC_CONF=max_split_size_mb:128,expandable_segments:True"
    f = only(run({"PYTORCH_ALLOC_CONF": "expandable_segments:False"}), Severity.INFO)
    assert "disabled" in f.title


def test_async_backend_makes_expandable_moot():
    f = only(run({"PYTORCH_ALLOC_CONF": "backend:cudaMallocAsync,expandable_segments:True"}), Severity.WARN)
    assert "no effect" in f.title


def test_profile_value_remedy_edits_the_profile_and_is_not_a_name_problem():
    prof = profile(env={"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:Ture"})
    findings = run({}, NEW, prof)
    assert not [f for f in findings if "deprecated" in f.title]  # gpudoc run writes the right name
    f = only(findings, Severity.FAIL)
    assert f.remedy == 'PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True" in [env] of job'


def test_deep_probe_wins_over_the_cheap_guess():
    facts = replace(snap(A5000, env={"PYTORCH_ALLOC_CONF": "expandable_segments:True"}),
                    torch=TorchFacts(python="python3", ok=True, torch_version="2.4.1",
                                     alloc_env_name="PYTORCH_CUDA_ALLOC_CONF"))
    findings = check_alloc_conf(facts, EMPTY, NEW)
    assert "torch 2.4.1 (--deep probe) reads only PYTORCH_CUDA_ALLOC_CONF" in sev(findings, Severity.WARN)[0].title
