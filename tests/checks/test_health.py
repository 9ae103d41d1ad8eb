from dataclasses import replace

from gpudoc.checks._common import CheckContext
from gpudoc.checks.health import check_ecc, check_throttle
from gpudoc.findings import Severity
from gpudoc.profiles.model import EMPTY
from tests.checks._real import A5000, P2000, T4, only, snap

CTX = CheckContext()


def test_clean_ecc_from_the_t4_capture():
    [f] = check_ecc(snap(T4), EMPTY, CTX)
    assert f.severity is Severity.OK and f.title == "no ECC errors (ECC Enabled)"


def test_uncorrectable_errors_fail_with_reset_command():
    facts = snap(T4)
    facts = replace(facts, gpus=(replace(facts.gpus[0], ecc_errors_uncorrected=2, retired_pages_pending=True,
                                         ecc_errors_corrected=40),))
    findings = check_ecc(facts, EMPTY, CTX)
    fail = only(findings, Severity.FAIL)
    assert fail.remedy.startswith("sudo nvidia-smi -r -i 0") and fail.affects == ("gpu:0",)
    assert only(findings, Severity.WARN).title == "GPU 0: memory page retirement pending"
    assert only(findings, Severity.INFO).title == "GPU 0: 40 corrected ECC error(s)"


def test_idle_reason_in_the_capture_is_not_throttling():
    # The P2000 capture reports gpu_idle "Active": harmless.
    assert check_throttle(snap(P2000), EMPTY, CTX)[0].severity is Severity.OK


def test_thermal_slowdown_warns_and_power_cap_is_info():
    facts = snap(A5000)
    hot = replace(facts.gpus[0], throttle_reasons=("hw_thermal_slowdown", "sw_power_cap"))
    capped = replace(facts.gpus[1], throttle_reasons=("clocks_event_reason_sw_power_cap",))
    findings = check_throttle(replace(facts, gpus=(hot, capped)), EMPTY, CTX)
    warn = only(findings, Severity.WARN)
    assert warn.title == "GPU 0 is throttled at 13 C: hardware thermal slowdown"
    assert "-i 0" in warn.remedy
    assert only(findings, Severity.INFO).affects == ("gpu:1",)
