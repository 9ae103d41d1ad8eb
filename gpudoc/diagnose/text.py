"""Log text -> Diagnosis: what killed the job, on which rank and GPU, and the memory figures.

The parser is general on purpose: every line is normalised (launcher prefixes, timestamps, colours
and markdown peeled off, the rank kept), matched against one regex per message shape
(:mod:`gpudoc.diagnose.signatures`), and the evidence is weighed: a memory failure named by its
own message beats the exceptions it causes, the first real failure beats its consequences on
other ranks (NCCL timeouts, torchrun's teardown), and the exit status only speaks when the text
is silent.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace

from gpudoc.diagnose.context import figures_around, message_window, shm_in_disguise
from gpudoc.diagnose.diagnosis import MEMORY_CAUSES, Diagnosis
from gpudoc.diagnose.figures import bytes_of, int_of, torch_figures
from gpudoc.diagnose.gate import split_with_candidates, with_context
from gpudoc.diagnose.lines import Line, iter_lines, lines_at
from gpudoc.diagnose.markers import first_marker
from gpudoc.diagnose.signatures import WARNING, Match, implausible, match_line
from gpudoc.diagnose.summary import summarise
from gpudoc.diagnose.torchrun import FirstFailure, entry_rank, first_failure, launcher_said, teardown_pids

# Logs beyond this are read as head + tail: the first failure is near the end in practice, and
# the head keeps startup failures.
_MAX_CHARS = 64 * 1024 * 1024
_HEAD_CHARS = 8 * 1024 * 1024
# Below this a log is read line by line (a message's tail, a test's log); above, through the gate.
GATE_ABOVE_CHARS = 256 * 1024


_SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
            11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}


@dataclass
class Event:
    index: int  # position among the log's lines
    line: Line
    m: Match
    warning: bool
    rank: int | None = None
    host: str | None = None
    extra: dict = field(default_factory=dict)

    @property
    def cause(self) -> str:
        return self.m.cause

    @property
    def strength(self) -> int:
        return self.m.strength


# ---- public API ----------------------------------------------------------------------------

def diagnose_text(text: str | bytes, *, exit_code: int | None = None, own_pids: Iterable[int] = (),
                  rank_hint: int | None = None) -> Diagnosis:
    """Diagnose one log. ``exit_code`` is the job's status (negative = killed by that signal);
    ``own_pids`` are the job's PIDs, to tell its own "Process P has …" lines from others';
    ``rank_hint``: the rank of the job's only worker, for a failure that names none."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = text or ""
    if len(text) > _MAX_CHARS:
        text = text[:_HEAD_CHARS] + "\n" + text[-(_MAX_CHARS - _HEAD_CHARS):]
    lines = _evidence_lines(text, gated=len(text) > GATE_ABOVE_CHARS)
    events = _collect(lines)
    first = first_failure(lines)
    root_rank = first.rank if first is not None and not first.local else None  # a local rank names no global one
    root_host = first.host if first is not None else None
    root_rank = rank_hint if root_rank is None else root_rank
    chosen = _choose(events, exit_code)
    # Causes before consequences: a worker's own error line first; then torchrun's account of the
    # first worker to fail; the teardown's SIGTERMs (circumstantial, strength 1) only after both.
    if first is not None and _exited_by_itself(first) and (
            chosen is None or chosen.m.signature.name in _KILLS or (chosen.m.peer and chosen.rank != first.rank)):
        # A survivor losing its peer is what the first failure did to it, not the failure.
        return launcher_said(first, teardown_pids(lines), lines, exit_code)
    if chosen is None:
        said = _unrecognised(lines, exit_code, text)
        pids = teardown_pids(lines)
        if pids and exit_code != 0 and (said.cause == "ok" or (said.evidence is None and said.signal is None)):
            return launcher_said(None, pids, lines, exit_code)  # no line of the worker's own: the teardown
        return said
    return _build(chosen, events, lines, exit_code, frozenset(own_pids), root_rank, root_host)


def _exited_by_itself(first: FirstFailure) -> bool:
    """torchrun's first failure exited with a status of its own (not killed by a signal, which the
    signal's own evidence tells better)."""
    return first.exit_code is not None and first.exit_code > 0


def _evidence_lines(text: str, *, gated: bool) -> list[Line]:
    """Every line of a small log; of a big one, the lines the substring gate lets through, with
    their context (``gpudoc.diagnose.gate``): the same evidence, found many times faster."""
    if not gated:
        return iter_lines(text)
    raws, hits = split_with_candidates(text)
    return lines_at(raws, with_context(hits, len(raws)))


def which_failed_first(diagnoses: Sequence[Diagnosis]) -> int:
    """Which of several logs' diagnoses (one job's nodes or ranks) names the first real failure:
    memory failures named by their own message, then explicit errors, then collective timeouts,
    then circumstantial evidence; ties go to the earlier one."""
    def weight(order: int) -> tuple[int, int]:
        d = diagnoses[order]
        if d.cause == "ok":
            tier = 9
        elif d.peer_lost:
            tier = 6  # another node lost a rank: whichever log shows that rank dying explains it
        elif d.cause in MEMORY_CAUSES and not d.inferred:
            tier = 0
        elif d.cause == "error" and not d.inferred:
            tier = 1
        elif d.cause == "nccl_timeout" and not d.inferred:
            tier = 2
        else:
            tier = 3 + ("host_oom", "shm", "nccl_timeout", "error", "signal").index(d.cause) \
                if d.cause in ("host_oom", "shm", "nccl_timeout", "error", "signal") else 8
        return (tier, order)

    return min(range(len(diagnoses)), key=weight)


def diagnose_many(items: Sequence[tuple[str, str | bytes, int | None]],
                  rank_hints: Sequence[int | None] = ()) -> Diagnosis:
    """The first real failure across several logs of one job (one per node or per rank).

    A GPU OOM on node B shows up on node A as an NCCL timeout or a torchrun failure; those are
    consequences. Memory failures named by their own message come first, then explicit errors,
    then collective timeouts, then circumstantial evidence; ties go to the earlier-listed log.
    """
    results = []
    for order, (label, text, exit_code) in enumerate(items):
        hint = rank_hints[order] if order < len(rank_hints) else None
        diag = diagnose_text(text, exit_code=exit_code, rank_hint=hint)
        results.append((order, label, diag))
    if not results:
        return _from_exit_code(None, "")
    order, label, best = results[which_failed_first([d for _, _, d in results])]
    others = [f"{lab}: {d.cause}" for o, lab, d in results if o != order and d.cause != "ok"]
    summary = f"{label}: {best.summary}"
    if others:
        summary = summary.rstrip(".") + f" (elsewhere, as consequences: {', '.join(others)})."
    return replace(best, node=label, summary=summary)


# ---- evidence ------------------------------------------------------------------------------

_MSG_RANK = re.compile(r"\[(?:PG [^\]]*?)?Rank (\d+)\]")
_NCCL_HOST = re.compile(r"^(?P<host>[A-Za-z0-9][\w.-]*):(?P<pid>\d+):\d+ \[(?P<dev>\d+)\]")
# torchrun's "failed (exitcode: -9) local_rank: 1 (pid: 32546)" and "Signal 9 (SIGKILL) received by PID 32546".
_KILLED_PID = re.compile(r"\(pid:\s*(\d+)\)|received by PID (\d+)")
_KILLS = ("sigkill", "sigterm", "sigbus", "abort")
# Evidence that a rank died of its own failure, rather than of losing a peer: its own memory
# failure, an explicit error, or torchrun reporting it killed by SIGKILL/SIGBUS/SIGSEGV/SIGABRT.
# SIGTERM is left out: torchrun sends it to the survivors when it tears the job down.
_DEATHS = ("sigkill", "sigbus", "abort")


def _collect(lines: list[Line]) -> list[Event]:
    events = []
    for i, line in enumerate(lines):
        if not line.is_message:
            continue  # traceback frames and source code quote the program, they report nothing
        m = match_line(line.text)
        if m is None:
            continue
        ev = Event(i, line, m, warning=bool(WARNING.search(line.text)))
        ev.rank = line.rank
        nccl = _NCCL_HOST.match(line.text)
        if nccl:
            ev.host = nccl.group("host")
            ev.extra["pid"] = int(nccl.group("pid"))
            if m.cause == "gpu_oom":
                ev.extra["gpu_index"] = int(nccl.group("dev"))
        if ev.rank is None:
            mr = _MSG_RANK.search(line.text)
            if mr:
                ev.rank = int(mr.group(1))
        if m.signature.name in _KILLS:
            if ev.rank is None:
                ev.rank, host = entry_rank(lines, i)
                ev.host = ev.host or host
            pid = _KILLED_PID.search(line.text)
            if pid:
                ev.extra["pid"] = int(pid.group(1) or pid.group(2))
        events.append(ev)
    return events


_TIER1_ORDER = ("host_oom", "shm", "nccl_timeout", "error", "signal")


def _choose(events: list[Event], exit_code: int | None) -> Event | None:
    pool = [e for e in events if not e.warning]
    if not pool:
        # Only warnings: they explain a failure, never invent one.
        if not exit_code:
            return None
        pool = events
    if not pool:
        return None
    pool = _without_peer_losses(pool)
    # An allocation no device could hold (exabytes) is a size gone wrong in the wake of another
    # failure (a collective that timed out, a corrupted tensor): that failure is the cause.
    pool = [e for e in pool if not implausible(e.m)] or pool
    best = max(e.strength for e in pool)
    top = [e for e in pool if e.strength == best]
    if best >= 2:
        return top[0]  # the first real failure; later ones are its consequences
    return min(top, key=lambda e: (_TIER1_ORDER.index(e.cause) if e.cause in _TIER1_ORDER else 9, e.index))


def _is_death(e: Event) -> bool:
    if e.m.peer or e.cause == "nccl_timeout":
        return False
    return e.strength >= 2 or e.m.signature.name in _DEATHS


def _without_peer_losses(pool: list[Event]) -> list[Event]:
    """The pool less the survivors' "connection closed by peer" errors, when a rank's death is in
    the log: they report that death, they did not cause it."""
    if any(e.m.peer for e in pool) and any(_is_death(e) for e in pool):
        return [e for e in pool if not e.m.peer]
    return pool


# ---- building the diagnosis ----------------------------------------------------------------

def _build(ev: Event, events: list[Event], lines: list[Line], exit_code: int | None,
           own_pids: frozenset, root_rank: int | None, root_host: str | None) -> Diagnosis:
    m = ev.m
    name = m.signature.name
    groups = {k: v for k, v in m.match.groupdict().items() if v is not None}
    vals: dict = {
        "cause": m.cause, "backend": m.backend if m.cause == "gpu_oom" else None,
        "exit_code": exit_code, "inferred": m.inferred or ev.strength == 1,
        "evidence": ev.line.text[:500], "line_number": ev.line.number + 1,
        "rank": ev.rank, "host": ev.host or None, "peer_lost": m.peer,
    }
    vals.update({k: v for k, v in m.fields.items() if k in ("gpu_index", "pid")})
    vals.update({k: v for k, v in ev.extra.items() if k in ("gpu_index", "pid")})

    window = message_window(lines, ev.index) if name in ("torch_alloc", "oom_class", "cuda_error_oom") else ""
    if name == "torch_alloc" or "Tried to allocate" in window:
        # Also PyTorch's message hard-wrapped after its header ("CUDA out of memory." alone on a line).
        vals.update(torch_figures(window, own_pids))
    elif name == "mps":
        req, alloc = bytes_of(groups.get("req")), bytes_of(groups.get("mps_alloc"))
        other, cap = bytes_of(groups.get("mps_other")), bytes_of(groups.get("mps_max"))
        vals.update(requested_bytes=req, allocated_bytes=alloc, allowed_bytes=cap, total_bytes=cap)
        if alloc is not None and other is not None and cap is not None:
            vals["free_bytes"] = max(0, cap - alloc - other)
    elif name in ("xla_oom", "xla_bfc", "tf_bfc", "cpu_alloc"):
        vals["requested_bytes"] = bytes_of(groups.get("req"))
    elif name == "xla_hbm":
        vals["total_bytes"] = bytes_of(groups.get("total"))
    elif name == "theano":
        vals.update(requested_bytes=int(groups["req"]), free_bytes=int_of(groups.get("free")),
                    total_bytes=int_of(groups.get("total")))
    elif name == "tf_oom" and "requested_estimate_bytes" in m.fields:
        vals["requested_bytes"] = m.fields["requested_estimate_bytes"]

    vals.update(figures_around(name, m.cause, vals, lines, ev.index))
    if m.cause == "error" and shm_in_disguise(lines, ev.index):
        vals["cause"] = "shm"
    if name in ("sigkill", "sigterm", "sigbus", "abort"):
        vals["signal"] = _signal_name(ev.line.text)
    # torchrun's Root Cause rank can be wrong (it names the first exit it saw, not the first
    # failure), so it only fills a gap: the failure itself carried no rank.
    if vals["rank"] is None and root_rank is not None:
        vals["rank"] = root_rank
    if vals["host"] is None and root_host and vals["rank"] == root_rank:
        vals["host"] = root_host

    same = [e.rank for e in events if e.cause == ev.cause and e.rank is not None and not e.warning]
    vals["failed_ranks"] = tuple(dict.fromkeys(same))
    if vals["rank"] is None and len(vals["failed_ranks"]) >= 1 and ev.strength >= 2:
        vals["rank"] = vals["failed_ranks"][0]

    vals["summary"] = ""
    diag = Diagnosis(**vals)
    summary = summarise(diag, ev)
    if _is_death(ev):
        lost = [e for e in events if e.m.peer and not e.warning]
        if lost:
            ranks = sorted({e.rank for e in lost if e.rank is not None and e.rank != diag.rank})
            who = f"rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))}" if ranks else "the other ranks"
            summary = summary.rstrip(".") + f" ({who} then lost the connection to it, a consequence)."
    return replace(diag, summary=summary)


def _signal_name(text: str) -> str | None:
    m = re.search(r"\bSIG([A-Z]{2,4})\b", text)
    if m:
        return "SIG" + m.group(1)
    m = re.search(r"exit\s?code\s*:?\s*-(\d+)|got signal:?\s*(\d+)", text, re.IGNORECASE)
    if m:
        return _SIGNALS.get(int(m.group(1) or m.group(2)))
    if re.match(r"(?:zsh: )?killed", text, re.IGNORECASE) or " Killed" in text:
        return "SIGKILL"
    return None


def _unrecognised(lines: list[Line], exit_code: int | None, text: str) -> Diagnosis:
    """No signature matched: the exit status speaks, and a failure marker is never "no failure"."""
    said = _from_exit_code(exit_code, text)
    if exit_code == 0 or said.cause not in ("ok", "error") or said.signal:
        return said
    marker = first_marker(lines)
    if marker is None:
        return said
    how = f" (exit status {exit_code})" if exit_code else ""
    line = marker.raw.strip()  # as the log has it: normalising would drop a quoted `expression`
    return Diagnosis(cause="error", exit_code=exit_code, rank=marker.rank, evidence=line[:500],
                     line_number=marker.number + 1,
                     summary=f"The job failed{how}; no known failure message, but this line says so: {line[:200]}")


def _from_exit_code(exit_code: int | None, text: str) -> Diagnosis:
    if exit_code is None or exit_code == 0:
        what = "the job exited 0" if exit_code == 0 else "no failure found in the log"
        return Diagnosis(cause="ok", summary=f"No failure: {what}.", exit_code=exit_code)
    signum = -exit_code if exit_code < 0 else (exit_code - 128 if exit_code > 128 else None)
    name = _SIGNALS.get(signum) if signum else None
    if name == "SIGKILL":
        return Diagnosis(cause="host_oom", exit_code=exit_code, signal=name, inferred=True,
                         summary=f"The job was killed by SIGKILL (exit status {exit_code}) with no error in its "
                                 "output; the usual sender is the kernel's OOM killer (host RAM ran out): "
                                 "check `dmesg` or the scheduler's log.")
    if name == "SIGBUS":
        return Diagnosis(cause="shm", exit_code=exit_code, signal=name, inferred=True,
                         summary=f"The job died of SIGBUS (exit status {exit_code}), most often shared "
                                 "memory (/dev/shm) running out under DataLoader workers.")
    if name in ("SIGTERM", "SIGINT", "SIGHUP"):
        return Diagnosis(cause="signal", exit_code=exit_code, signal=name, inferred=True,
                         summary=f"The job was stopped from outside by {name} (exit status {exit_code}).")
    if name:
        return Diagnosis(cause="error", exit_code=exit_code, signal=name, inferred=True,
                         summary=f"The job crashed with {name} (exit status {exit_code}).")
    tail = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] if text.strip() else []
    extra = f"; its last line: {tail[0].strip()[:200]}" if tail else ""
    return Diagnosis(cause="error", exit_code=exit_code, inferred=True,
                     summary=f"The job exited with status {exit_code} and no recognised error{extra}.")


