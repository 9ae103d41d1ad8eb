from dataclasses import replace

from gpudoc.checks._common import CheckContext
from gpudoc.checks.env import check_cuda_debug, check_nccl, check_omp, check_tokenizers
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A5000, HOST, only, profile, snap

CTX = CheckContext()
FOUR = profile(launch={"nproc_per_node": 4})


def test_tokenizers():
    assert check_tokenizers(snap(A5000), EMPTY, CTX).remedy == "export TOKENIZERS_PARALLELISM=false"
    assert check_tokenizers(snap(A5000, env={"TOKENIZERS_PARALLELISM": "false"}), EMPTY, CTX).severity is Severity.OK
    f = check_tokenizers(snap(A5000, env={"TOKENIZERS_PARALLELISM": "true"}), EMPTY, CTX)
    assert f.severity is Severity.WARN and f.remedy == "export TOKENIZERS_PARALLELISM=false"


def test_omp_oversubscribed_per_process():
    # The seed guide's OMP_NUM_THREADS=4 with 4 ranks on a 8-CPU box: 16 threads.
    facts = snap(A5000, env={"OMP_NUM_THREADS": "4"}, host=replace(HOST, cpu_count=8))
    f = check_omp(facts, FOUR, CTX)
    assert f.severity is Severity.WARN
    assert "16 threads on 8 usable CPUs" in f.title
    assert f.remedy == "export OMP_NUM_THREADS=2"


def test_omp_fits():
    f = check_omp(snap(A5000, env={"OMP_NUM_THREADS": "4"}), FOUR, CTX)  # 16 CPUs
    assert f.severity is Severity.OK


def test_omp_unset_multi_process_and_garbage():
    f = check_omp(snap(A5000), FOUR, CTX)
    assert f.severity is Severity.INFO and f.remedy == "export OMP_NUM_THREADS=4"
    f = check_omp(snap(A5000, env={"OMP_NUM_THREADS": "four"}), EMPTY, CTX)
    assert f.severity is Severity.WARN and f.remedy == "export OMP_NUM_THREADS=16"
    f = check_omp(snap(A5000), profile(env={"OMP_NUM_THREADS": "0"}), CTX)
    assert f.remedy == 'OMP_NUM_THREADS = "16" in [env] of job'


def test_debug_variables_each_get_an_unset():
    env = {"CUDA_LAUNCH_BLOCKING": "1", "PYTORCH_NO_CUDA_MEMORY_CACHING": "1", "CUDA_CACHE_DISABLE": "1",
           "TORCH_USE_CUDA_DSA": "1", "NCCL_DEBUG": "TRACE", "CUDA_MODULE_LOADING": "EAGER"}
    findings = check_cuda_debug(snap(A5000, env=env), EMPTY, CTX)
    remedies = {f.remedy for f in findings}
    assert remedies == {f"unset {k}" for k in env}
    blocking = next(f for f in findings if f.affects == ("CUDA_LAUNCH_BLOCKING",))
    assert blocking.severity is Severity.WARN
    assert next(f for f in findings if f.affects == ("TORCH_USE_CUDA_DSA",)).severity is Severity.INFO


def test_debug_variables_off_values_are_fine():
    env = {"CUDA_LAUNCH_BLOCKING": "0", "NCCL_DEBUG": "WARN", "CUDA_MODULE_LOADING": "LAZY"}
    assert [f.severity for f in check_cuda_debug(snap(A5000, env=env), EMPTY, CTX)] == [Severity.OK]


def test_nccl_needs_a_multi_process_profile():
    assert check_nccl(snap(A5000), EMPTY, CTX)[0].severity is Severity.SKIP
    assert check_nccl(snap(A5000), profile(launch={"nproc_per_node": 1}), CTX)[0].severity is Severity.SKIP


def test_nccl_error_handling_off_warns():
    findings = check_nccl(snap(A5000, env={"TORCH_NCCL_ASYNC_ERROR_HANDLING": "0"}), FOUR, CTX)
    f = only(findings, Severity.WARN)
    assert f.remedy == "export TORCH_NCCL_ASYNC_ERROR_HANDLING=3"


def test_nccl_deprecated_names_and_defaults():
    findings = check_nccl(snap(A5000, env={"NCCL_ASYNC_ERROR_HANDLING": "1"}), FOUR, CTX)
    info = only(findings, Severity.INFO)
    assert info.remedy == "export TORCH_NCCL_ASYNC_ERROR_HANDLING=1; unset NCCL_ASYNC_ERROR_HANDLING"
    ok = only(findings, Severity.OK)
    assert "4 processes" in ok.title


def test_nccl_monitoring_off_warns():
    findings = check_nccl(snap(A5000, env={"TORCH_NCCL_ENABLE_MONITORING": "0"}), FOUR, CTX)
    assert only(findings, Severity.WARN).remedy == "unset TORCH_NCCL_ENABLE_MONITORING"
