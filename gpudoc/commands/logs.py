"""`gpudoc logs [RUN_ID] [-f]`: a run's output.log, exactly as the job printed it; with -f,
followed from another pane until the run ends."""

from __future__ import annotations

import os
import time

from gpudoc.errors import InputError
from gpudoc.runs.store import RunStore
from gpudoc.workspace import Workspace

CHUNK = 1 << 16


def _copy(fd_in: int, fd_out: int) -> int:
    from gpudoc.launch.tee import write_all

    copied = 0
    while True:
        data = os.read(fd_in, CHUNK)
        if not data:
            return copied
        write_all(fd_out, data)
        copied += len(data)


def _still_running(store: RunStore, run_id: str) -> bool:
    from gpudoc.runs.record import live_status

    record = store.record_or_none(run_id)
    if record is None:
        # Records are replaced atomically (never half-written): one that went away (pruned) or
        # became unreadable (the store's note says why) will not end by waiting for it.
        return False
    return live_status(record) == "running"


def rank_log(ws: Workspace, run_id: str | None, rank: int, *, out_fd: int | None = None) -> int:
    """One local rank's own output: the files torchrun wrote for it under ``--log-dir``."""
    record = ws.store.named_or_latest(run_id)
    paths = record.rank_logs.get(str(rank))
    if not paths:
        known = ", ".join(sorted(record.rank_logs, key=int)) or "none"
        raise InputError(f"run {record.id} has no log of rank {rank} (torchrun --log-dir files: ranks {known})")
    ws.console.flush()
    out = out_fd if out_fd is not None else ws.console.out.fileno()
    for path in paths:
        try:
            handle = os.open(path, os.O_RDONLY)
        except OSError as exc:
            raise InputError(f"{path}: cannot read: {exc.strerror}", file=path) from None
        try:
            _copy(handle, out)
        finally:
            os.close(handle)
    return 0


def logs(ws: Workspace, run_id: str | None = None, *, follow: bool = False, out_fd: int | None = None,
         poll_s: float = 0.2) -> int:
    console, store = ws.console, ws.store
    run_id = store.named_or_latest(run_id).id
    for note in store.take_notes():
        # Now, not at the end: the log printed may be an older run's than the user thinks (the
        # newest record was skipped), and a followed log can run for hours.
        console.error(note)
    path = store.log_path(run_id)
    console.flush()
    out = out_fd if out_fd is not None else console.out.fileno()
    try:
        handle = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        if not follow:
            raise InputError(f"run {run_id} has no log ({path})") from None
        handle = None
    try:
        if not follow:
            if handle is not None:  # without --follow a missing log raised above
                _copy(handle, out)
            return 0
        while True:
            if handle is None:
                try:
                    handle = os.open(path, os.O_RDONLY)
                except FileNotFoundError:
                    pass
            if handle is not None:
                _copy(handle, out)
            # Ask whether the run is over only after draining, then drain once more: the last
            # bytes are written before the record says the run ended.
            if not _still_running(store, run_id):
                if handle is None:
                    try:
                        handle = os.open(path, os.O_RDONLY)
                    except FileNotFoundError:
                        return 0
                _copy(handle, out)
                return 0
            time.sleep(poll_s)
    finally:
        if handle is not None:
            os.close(handle)
