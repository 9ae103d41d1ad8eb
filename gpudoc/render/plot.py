"""`gpudoc runs show --plot FILE`: memory per GPU over time as a PNG or SVG image.

matplotlib is an optional extra (``pip install 'gpudoc[plot]'``), imported here and nowhere else,
with its non-interactive backend: no display is needed or touched.
"""

from __future__ import annotations

from pathlib import Path

from gpudoc.errors import UsageError
from gpudoc.results.runs import RunShowResult
from gpudoc.units import GIB

FORMATS = (".png", ".svg")


def plot_timeline(result: RunShowResult, path: Path) -> Path:
    """Draw each GPU's memory over the run, its capacity as a dashed line, and the OOM marked."""
    if path.suffix.lower() not in FORMATS:
        raise UsageError(f"--plot {path}: the file must end in {' or '.join(FORMATS)}")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise UsageError("--plot needs matplotlib: pip install 'gpudoc[plot]'") from None
    if not result.used or result.start is None or result.end is None:
        raise UsageError(f"run {result.record.id} has no GPU memory samples to plot")
    figure, axes = plt.subplots(figsize=(9, 4.5), dpi=100)
    span = max(result.end - result.start, 1e-9)
    for gpu, used in sorted(result.used.items()):
        points = [(span * i / max(len(used) - 1, 1), value / GIB) for i, value in enumerate(used) if value is not None]
        line, = axes.plot([t for t, _ in points], [v for _, v in points], label=f"GPU {gpu}")
        total = result.total.get(gpu)
        if total:
            axes.axhline(total / GIB, color=line.get_color(), linestyle="--", linewidth=1,
                         label=f"GPU {gpu} capacity")
    if result.record.cause == "gpu_oom":
        axes.axvline(span, color="red", linewidth=2, label="out of memory")
    axes.set_xlabel("seconds since the first sample")
    axes.set_ylabel("memory used (GiB)")
    axes.set_title(f"gpudoc run {result.record.id}: {result.live_status}")
    axes.set_ylim(bottom=0)
    axes.legend(loc="lower right", fontsize="small")
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
