import io

from gpudoc.findings import Finding, Severity
from gpudoc.output import Console
from gpudoc.render.findings_text import render_findings, verdict

FINDINGS = [
    Finding("driver.nvml", Severity.OK, "driver 550.54.15, CUDA 12.4, 4 GPUs"),
    Finding("gpu.free-memory", Severity.FAIL, "GPU 0: 1.6 GiB free, the job needs 20.0 GiB", "total 24 GiB",
            "gpudoc clean --gpus 0", ("gpu:0",)),
    Finding("gpu.ecc", Severity.SKIP, "ECC: skipped", "why", "gpudoc check --snapshot x"),
    Finding("gpu.mig", Severity.SKIP, "MIG: skipped", "why", "gpudoc check --snapshot x"),
    Finding("env.omp-threads", Severity.WARN, "OMP_NUM_THREADS=64 x 4", "", "export OMP_NUM_THREADS=4"),
]


def render(colour: bool) -> str:
    out = io.StringIO()
    render_findings(FINDINGS, Console(out=out, err=io.StringIO(), colour=colour), width=70)
    return out.getvalue()


def test_plain_text_dot_leaders_remedies_and_verdict():
    text = render(False)
    lines = text.splitlines()
    assert lines[0] == "Driver"
    ok = next(line for line in lines if line.startswith("  driver"))
    assert ok.endswith(" ok") and len(ok) == 70
    fail = next(line for line in lines if "1.6 GiB" in line)
    assert fail.endswith("FAIL") and len(fail) == 70
    assert "      fix: gpudoc clean --gpus 0" in lines
    assert text.count("fix: gpudoc check --snapshot x") == 1  # the same skip remedy is said once
    assert lines[-1] == "NOT READY: 1 failed, 1 warning(s), 1 ok, 2 skipped. Fix the FAIL lines, then run the check again."
    assert "\x1b[" not in text


def test_colour_only_when_asked():
    assert "\x1b[31;1m" in render(True)


def test_long_titles_are_never_cut():
    long = Finding("gpu.free-memory", Severity.FAIL, "x" * 90, "", "r")
    out = io.StringIO()
    render_findings([long], Console(out=out, colour=False), width=60)
    assert ("x" * 90 + " ...  FAIL") in out.getvalue()


def test_verdict_ready():
    assert verdict([FINDINGS[0]], Console(out=io.StringIO(), colour=False)) == "READY: 1 ok."
