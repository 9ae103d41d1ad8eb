"""The tee on real file descriptors: exact bytes, a terminal that goes away, a log that fills up."""

from __future__ import annotations

import os

from gpudoc.launch.tee import Tee, write_all


def test_log_and_terminal_get_the_same_bytes(tmp_path):
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    r, w = os.pipe()
    tee = Tee(log, w)
    data = bytes(range(256)) * 100
    tee.write(data)
    os.close(w)
    os.close(log)
    assert (tmp_path / "log").read_bytes() == data
    assert os.read(r, len(data) + 1) == data
    assert tee.bytes == len(data)


def test_a_closed_terminal_is_dropped_and_the_log_goes_on(tmp_path):
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    r, w = os.pipe()
    os.close(r)  # the reader is gone: writes get EPIPE
    warnings = []
    tee = Tee(log, w, warn=warnings.append)
    tee.write(b"first\n")
    tee.write(b"second\n")
    assert tee.terminal_lost and tee.term_fd is None
    os.close(log)
    assert (tmp_path / "log").read_bytes() == b"first\nsecond\n"


def test_a_full_disk_loses_the_log_not_the_terminal(tmp_path):
    if not os.path.exists("/dev/full"):
        return
    full = os.open("/dev/full", os.O_WRONLY)
    r, w = os.pipe()
    warnings = []
    tee = Tee(full, w, warn=warnings.append)
    tee.write(b"hello\n")
    tee.write(b"again\n")
    assert tee.log_error and tee.log_fd is None
    assert len(warnings) == 1 and "log" in warnings[0]
    assert os.read(r, 100) == b"hello\nagain\n"


def test_write_all_survives_a_non_blocking_descriptor():
    r, w = os.pipe()
    os.set_blocking(w, False)
    data = b"x" * (1 << 20)  # larger than the pipe: write_all must wait, not drop
    import threading

    got = bytearray()

    def reader():
        while len(got) < len(data):
            got.extend(os.read(r, 65536))

    t = threading.Thread(target=reader)
    t.start()
    write_all(w, data)
    t.join(10)
    assert bytes(got) == data


def _raw_pty():
    import pty
    import termios
    import tty

    master, slave = pty.openpty()
    tty.setraw(slave, termios.TCSANOW)  # bytes as written, no "\r\n"
    return master, slave


def test_the_terminal_writer_thread_keeps_bytes_and_order(tmp_path):
    import random
    import threading
    import time

    master, slave = _raw_pty()
    received = bytearray()

    def drain():
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:
                return
            if not chunk:
                return
            received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    rng = random.Random(7)
    chunks = [rng.randbytes(rng.randint(1, 70_000)) for _ in range(60)]
    tee = Tee(log, slave, threaded=True)
    for chunk in chunks:
        tee.write(chunk)
    tee.close()  # flushes: everything is on the terminal when it returns
    os.close(log)
    expected = b"".join(chunks)
    assert (tmp_path / "log").read_bytes() == expected
    deadline = time.monotonic() + 10
    while len(received) < len(expected) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert bytes(received) == expected
    os.close(slave)
    os.close(master)


def test_a_terminal_that_stops_reading_never_blocks_a_flush_for_ever(tmp_path):
    import time

    master, slave = _raw_pty()  # nobody reads the master: the terminal fills up
    log = os.open(tmp_path / "log", os.O_WRONLY | os.O_CREAT)
    tee = Tee(log, slave, threaded=True)
    tee.write(b"x" * 200_000)  # more than a pty holds: the writer thread blocks in write()
    started = time.monotonic()
    tee.flush(timeout_s=0.3)
    assert time.monotonic() - started < 2
    assert (tmp_path / "log").stat().st_size == 200_000  # the log is written at once, terminal or not
    os.close(master)  # the terminal goes away: the blocked write ends, the writer thread with it
    tee.close()
    assert tee.terminal_lost
    os.close(slave)
    os.close(log)
