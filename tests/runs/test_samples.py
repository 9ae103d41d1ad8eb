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


def test_corruption_at_any_byte_is_skipped_and_counted(tmp_path):
    import random

    from gpudoc.runs.samples import newest_samples

    path = tmp_path / "gpu.csv"
    good = "".join(f"{1000 + t},0,{t * 100},1000,50,\n" for t in range(20))
    junk = bytes(random.Random(7).randrange(256) for _ in range(5000))
    path.write_bytes(HEADER.encode() + good.encode() + junk + b"\n" + b'"' + b"x" * 200_000 + b"\n"
                     + b"1020,0,2000,1000,50,\n")
    line = read_timeline(path, width=5)
    assert line.rows == 21 and line.skipped >= 2  # the junk lines and the 200 KB quoted field
    newest = newest_samples(path, history=30)
    assert [s.used for s in newest.gpus[0]][-1] == 2000 and newest.skipped >= 1


def test_a_field_over_128_kb_is_skipped_by_runs_show(tmp_path):
    from gpudoc.commands.runs import show_run
    from gpudoc.runs.record import RunRecord
    from gpudoc.runs.store import RunStore
    from tests.conftest import captured_workspace

    store = RunStore(tmp_path / ".gpudoc")
    record = RunRecord(id="20260101-000000000-eeeeee", command=["python", "train.py"], cwd=str(tmp_path),
                       status="ok", exit_code=0, duration_s=3.0)
    store.create(record)
    store.samples_path(record.id).write_text(HEADER + "1000,0,100,1000,50,\n" + "1001,0," + "9" * 140_000
                                             + ",1000,50,\n1002,0,300,1000,50,\n")
    ws = captured_workspace(tmp_path, environ={"GPUDOC_HOME": str(store.home)})
    assert show_run(ws, record.id) == 0
    assert "1 line of gpu.csv skipped" in ws.console.out.getvalue() + ws.console.err.getvalue()
