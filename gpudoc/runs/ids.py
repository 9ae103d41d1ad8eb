"""Run ids: sortable by start time, unique across the nodes that share one ``GPUDOC_HOME``."""

from __future__ import annotations

import os
import re
import time

RUN_ID = re.compile(r"^\d{8}-\d{6}(?:\d{3})?-[0-9a-f]+$")  # older gpudoc: no milliseconds


_last_stamp_ms = 0


def new_run_id() -> str:
    """Sortable by start time to the millisecond (a retry starts within the same second as the
    failed attempt ends), unique across nodes sharing one GPUDOC_HOME.

    Within one process the stamp only moves forward, so ids made in the same millisecond still
    sort in creation order; the random suffix only separates ids from different hosts.
    """
    global _last_stamp_ms
    stamp_ms = max(int(time.time() * 1000), _last_stamp_ms + 1)
    _last_stamp_ms = stamp_ms
    seconds, millis = divmod(stamp_ms, 1000)
    return time.strftime("%Y%m%d-%H%M%S", time.localtime(seconds)) + f"{millis:03d}-" + os.urandom(3).hex()
