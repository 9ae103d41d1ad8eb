"""`gpudoc tune` as text: a line per trial, what was passed over, and the answer with its figures."""

from __future__ import annotations

import io

from gpudoc.output import Console
from gpudoc.render.text import text
from gpudoc.results.tune import FITS, OOM, Search, Trial, TuneResult

GIB = 2**30


def _shown(result: TuneResult) -> list[str]:
    console = Console(out=io.StringIO(), err=io.StringIO(), colour=False)
    text(result, console)
    return console.out.getvalue().splitlines()


def test_the_answer_has_its_peak_headroom_and_step_time_and_the_passed_over_say_why():
    search = Search((Trial(8, 2, FITS, "r1", 30 * GIB, 0.5), Trial(16, 1, OOM, "r2")),
                    ((12, "a micro batch of 12 needs an accumulation of 1.33"),), 5)
    result = TuneResult("t1", 16, 1, (4, 4), search, 80 * GIB, 0)
    assert result.headroom_bytes == 50 * GIB
    assert _shown(result) == [
        "gpudoc tune t1: global batch 16 over 1 process(es), 2 trial(s) (at most 5)",
        "  micro batch 8 x accumulation 2: fits (peak 30.00 GiB, 0.5 s/step)  run r1",
        "  micro batch 16 x accumulation 1: oom  run r2",
        "  micro batch 12: skipped, a micro batch of 12 needs an accumulation of 1.33",
        "Largest micro batch that fits: 8 x accumulation 2 (was 4 x 4); peak 30.00 GiB, headroom 50.00 GiB, "
        "step time 0.5 s",
    ]


def test_none_that_fits_is_said():
    result = TuneResult("t1", 16, 1, (4, 4), Search((Trial(1, 16, OOM, "r1"),), (), 5), None, 1)
    assert result.headroom_bytes is None and result.status == "fail"
    assert _shown(result)[-1] == "No micro batch fit."
