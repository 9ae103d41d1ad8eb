"""Line normalisation: launcher prefixes peeled, rank kept, traceback structure told from messages."""

from __future__ import annotations

import pytest

from gpudoc.diagnose.lines import FRAME, MESSAGE, SOURCE, iter_lines, normalise, split_prefix


@pytest.mark.parametrize("prefix,rank", [
    ("[rank3]: ", 3), ("[default3]:", 3), ("3: ", 3), ("[1,3]<stderr>:", 3), ("", None),
    ("(RayTrainWorker pid=1, ip=10.0.0.1) [rank3]: ", 3), ("2024-05-01T10:00:00.123Z [rank3]: ", 3),
    ("\x1b[31m[rank3]: ", 3),
])
def test_traceback_kinds_under_every_prefix(prefix, rank):
    body = ['Traceback (most recent call last):', '  File "train.py", line 4, in step',
            '    raise torch.cuda.OutOfMemoryError(', '    ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^',
            'torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB.']
    lines = iter_lines("\n".join(prefix + b for b in body))
    assert [ln.kind for ln in lines] == [MESSAGE, FRAME, SOURCE, SOURCE, MESSAGE]
    assert {ln.rank for ln in lines} == {rank}
    assert lines[-1].text == body[-1]


def test_interleaved_ranks_keep_their_own_frames():
    text = ("[rank0]:   File \"a.py\", line 1, in f\n"
            "[rank1]: RuntimeError: CUDA error: out of memory\n"  # rank 1's message, mid rank 0's frame
            "[rank0]:     x = torch.empty(n)  # Tried to allocate out of memory\n"
            "[rank0]: ValueError: n < 0\n")
    assert [ln.kind for ln in iter_lines(text)] == [FRAME, MESSAGE, SOURCE, MESSAGE]


def test_a_line_back_at_the_margin_ends_the_frame():
    # A stdout line printed between the frame header and its source (corpus gpu-err-145).
    text = '  File "infer.py", line 156, in <module>\nUsing seed = 1\n    main()\n'
    assert [ln.kind for ln in iter_lines(text)] == [FRAME, MESSAGE, MESSAGE]


@pytest.mark.parametrize("text,kind", [
    ("raise RuntimeError('DataLoader worker (pid(s) {}) exited unexpectedly'.format(pids))", SOURCE),
    ("raise torch.OutOfMemoryError(", SOURCE),
    ("raise err from None", SOURCE),
    ("raise", SOURCE),
    ("except (torch.cuda.OutOfMemoryError, RuntimeError) as e:", SOURCE),
    # Real messages that start with the same words.
    ("raise your shared memory limit.", MESSAGE),
    ("RuntimeError: DataLoader worker (pid 3216) is killed by signal: Bus error.", MESSAGE),
    ("exception in thread: out of memory", MESSAGE),
    ("frame #1: c10::OutOfMemoryError::OutOfMemoryError() + 0x6 (0x7f1 in libc10.so)", FRAME),
    ("│ ❱ 12 │   raise torch.OutOfMemoryError(msg)", FRAME),
])
def test_code_without_indentation(text, kind):
    assert iter_lines(text)[0].kind == kind


def test_indentation_is_measured_after_the_prefix():
    # The separator after a prefix counts too: only differences within one stream matter.
    assert split_prefix("[rank0]:     main()") == ("main()", 0, 5)
    assert split_prefix("[default0]:    main()") == ("main()", 0, 4)
    assert split_prefix("2024-05-01 10:00:00,123   File \"x\", line 1") == ('File "x", line 1', None, 3)
    assert normalise("[rank0]:     main()") == ("main()", 0)
