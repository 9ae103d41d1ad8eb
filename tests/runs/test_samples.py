"""gpu.csv read back as a timeline: the highest use per slice, bounded, whatever the rows hold."""

from __future__ import annotations

from gpudoc.launch.watch import HEADER
from gpudoc.runs.samples import read_timeline


def test_buckets_keep_the_highest_use_and_skip_broken_rows(tmp_path):
    path = tmp_path / "gpu.csv"
    rows = [f"{1000 + t},0,{(t % 7) * 100},1000,50,\n" for t in range(100)]
    rows.insert(50, "1050,0,not-a-number,1000,,\n")
    path.write_text(HEADER + "".join(rows) + "1100,0")  # the last row cut short by a kill
    line = read_timeline(path, width=10)
    assert (line.start, line.end) == (1000.0, 1099.0)
    assert line.used[0] == [600] * 10  # 7 consecutive seconds per slice hold the 600 peak
    assert line.total == {0: 1000} and line.rows == 100


def test_a_missing_or_empty_file_is_an_empty_timeline(tmp_path):
    assert read_timeline(tmp_path / "none.csv").used == {}
    (tmp_path / "empty.csv").write_text(HEADER)
    assert read_timeline(tmp_path / "empty.csv").start is None
