"""The launcher: start the job without a shell in its own session, tee its output, route signals,
and make sure nothing of it outlives gpudoc.

Output: when gpudoc's stdout is a terminal the job gets a pseudo-terminal (progress bars, colour
and window size keep working); otherwise one pipe carries the job's stdout and stderr together,
in the order the job wrote them, to gpudoc's stdout and the log. One merged stream keeps the log
byte-exact and ordered; a pty merges them the same way. gpudoc's own messages go to stderr.

The job runs in its own session: the terminal's Ctrl-C reaches gpudoc, which decides what the
job gets (SIGINT, then SIGTERM, then SIGKILL). A hang-up of the terminal ends neither gpudoc nor
the job: the log goes on. gpudoc is a child subreaper, so workers orphaned by a killed torchrun
come back to it and are ended with the rest; should gpudoc itself die, its guard ends the job.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import time
from functools import partial
from types import FrameType
from typing import Callable

from gpudoc.launch import reaper
from gpudoc.launch.guard import Guard, start_guard
from gpudoc.launch.options import LaunchOptions, Outcome, pipe_child_setup, pty_child_setup, safe_warn, spawn_error
from gpudoc.launch.output import CHUNK, drain_available, drain_until_eof, output_pipe, read_burst
from gpudoc.launch.signals import SignalRelay, ctrl_c, decode_wait_status, exit_status, forwarded
from gpudoc.launch.tee import Tee
from gpudoc.launch.terminal import copy_winsize, forward_input, setup_slave, stdin_is_ours
from gpudoc.procs.identity import ProcessRef, signal_group, start_time
from gpudoc.procs.terminate import reap_children, terminate

TICK_S = 1.0
BURST_READS = 16
FORWARDED = (signal.SIGUSR1, signal.SIGUSR2)  # e.g. Slurm's --signal before the time limit


class Launcher:
    def __init__(self, options: LaunchOptions) -> None:
        self.o = options
        self._say = options.warn or safe_warn
        self.proc: subprocess.Popen | None = None
        self.pid: int | None = None
        self.pgid: int | None = None
        self.interrupts = 0
        self.terms = 0
        self.interrupted_by: int | None = None
        self.ended_by: str | None = None
        self._end_at: float | None = None  # monotonic: start ending the job (fail-fast)
        self._end_reason: str | None = None
        self._kill_at: float | None = None  # monotonic: SIGKILL whatever is left
        self._ending_since: float | None = None
        self._main_status: int | None = None
        self._main_exited_at: float | None = None
        self._seen: dict[int, ProcessRef] = {}
        self._exclude: set[int] = set()
        self._guard: Guard | None = None
        self._master: int | None = None
        self._out: int | None = None
        self._log_fd: int | None = None
        self._tee: Tee | None = None
        self._relay: SignalRelay | None = None
        self._wake_r: int | None = None  # readable when a signal arrived (the loop's wake-up)
        self._next_ending_check = 0.0
        self._tick_failed = False

    # -- public ---------------------------------------------------------------------------

    def warn(self, message: str) -> None:
        """gpudoc's own line on stderr, after the job's output queued for the terminal."""
        if self._tee is not None:
            self._tee.flush()
        self._say(message)

    def request_end(self, reason: str, after_s: float = 0.0) -> None:
        """End the whole job ``after_s`` seconds from now unless it ends by itself first
        (``ended_by`` says so only when gpudoc really had to)."""
        if self._end_at is None:
            self._end_reason = reason
            self._end_at = time.monotonic() + max(after_s, 0.0)

    @property
    def end_requested(self) -> bool:
        return self._end_at is not None

    def processes(self) -> list[ProcessRef]:
        """The job's live processes now (also remembered for PID-reuse-safe cleanup)."""
        procs = reaper.job_processes(self.pid, self.pgid, exclude=self._exclude,
                                     known=self._seen.values())
        new = [p for p in procs if p.pid not in self._seen]
        self._seen.update((p.pid, p) for p in new)
        if new and self._guard is not None:
            self._guard.tell(new)  # should gpudoc die, the guard ends these too
        return procs

    def run(self) -> Outcome:
        reaper.become_subreaper()
        self._exclude = reaper.current_children()
        started = time.time()
        try:
            pid = self._spawn()
            # Before any thread starts (the relay's wake-up, the sampler): the guard is a fork.
            self._guard = start_guard(pid, run_marker=self.o.env.get("GPUDOC_RUN_ID"), grace_s=self.o.term_grace_s)
            self._exclude.update([self._guard.pid] if self._guard else [])
            self._relay = SignalRelay({
                signal.SIGINT: self._on_interrupt, signal.SIGTERM: self._on_terminate,
                signal.SIGQUIT: self._on_terminate, signal.SIGHUP: self._on_hangup,
                signal.SIGWINCH: self._on_winch, **dict.fromkeys(FORWARDED, self._on_forward),
            })
            self._wake_r = self._relay.wake_fd
            if self.o.on_start is not None:
                self.o.on_start(pid, pid)  # the job leads its own process group
            self._open_log()
            self._loop()
        finally:
            survivors = self._finish()
            if self._guard is not None:
                self._guard.stand_down()
        exit_code, term_sig = decode_wait_status(self._main_status) if self._main_status is not None else (None, None)
        status = exit_status(exit_code, term_sig, interrupted_by=self.interrupted_by)
        return Outcome(
            pid=self.pid, pgid=self.pgid, exit_code=exit_code, signal=term_sig, status=status,
            interrupted_by=self.interrupted_by, ended_by=self.ended_by, started=started,
            ended=time.time(), terminal_lost=bool(self._tee and self._tee.terminal_lost),
            log_error=self._tee.log_error if self._tee else None,
            survivors=[p.pid for p in survivors], processes=sorted(self._seen.values(), key=lambda p: p.pid),
        )

    # -- start ----------------------------------------------------------------------------

    def _spawn(self) -> int:
        """Start the job (its own session and process group); its PID."""
        o = self.o
        argv0 = o.argv[0]
        stdin: int | None
        if o.use_pty:
            master, slave = os.openpty()
            setup_slave(slave, self.o.stdin_fd, self.o.term_fd)
            stdin, out, setup = slave, master, pty_child_setup
            self._master = master
        else:
            r, w = output_pipe()
            stdin, out, setup = None, r, pipe_child_setup
            slave = w
        self._out = out
        try:
            self.proc = subprocess.Popen(
                o.argv, env=o.env, cwd=str(o.cwd), start_new_session=True,
                preexec_fn=setup, close_fds=True, stdin=stdin, stdout=slave, stderr=slave,  # noqa: PLW1509 - prctl(PDEATHSIG) must run in the child; gpudoc forks before starting threads
            )
        except OSError as exc:
            os.close(slave)
            os.close(out)
            self._out = self._master = None
            raise spawn_error(argv0, exc, cwd=o.cwd, path_var=o.env.get("PATH")) from None
        os.close(slave)  # only the job holds the writing end now: EOF/EIO when it is done
        os.set_blocking(out, False)  # read bursts until drained; poll only when empty
        pid = self.proc.pid
        self.pid = self.pgid = pid  # start_new_session: the child leads its own session and group
        self._seen[pid] = ProcessRef(pid, start_time(pid))
        return pid

    def _open_log(self) -> None:
        if self.o.log_path is not None:
            self._log_fd = os.open(self.o.log_path,
                                   os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, self.o.log_mode)
        self._tee = Tee(self._log_fd, self.o.term_fd, warn=self._say, threaded=self._master is not None)  # pty: see tee.py

    # -- signals --------------------------------------------------------------------------

    def _on_interrupt(self, signum: int, frame: FrameType | None) -> None:
        self.interrupts += 1
        self.interrupted_by = signal.SIGINT
        sig, message = ctrl_c(self.interrupts)
        self._signal_job(sig)
        self.warn(message)

    def _on_terminate(self, signum: int, frame: FrameType | None) -> None:
        self.terms += 1
        if self.interrupted_by is None:
            self.interrupted_by = signum
        if self.terms == 1:
            self._signal_job(signum)
            self._kill_at = time.monotonic() + self.o.term_grace_s
            self.warn(forwarded(signum, self.o.term_grace_s))
        else:
            self._signal_job(signal.SIGKILL)

    def _on_hangup(self, signum: int, frame: FrameType | None) -> None:
        # The terminal is gone: keep the job and the log; stop writing to a dead terminal.
        if self._tee is not None and self.o.term_fd is not None and os.isatty(self.o.term_fd):
            self._tee.lose_terminal()
        self.o.stdin_fd = None

    def _on_winch(self, signum: int, frame: FrameType | None) -> None:
        if self._master is not None:
            copy_winsize(self._master, self.o.term_fd, self.o.stdin_fd)

    def _on_forward(self, signum: int, frame: FrameType | None) -> None:
        signal_group(self.pgid, signum)

    def _signal_job(self, sig: int) -> None:
        """Signal the job's process group; SIGKILL reaches every process of the job."""
        signal_group(self.pgid, sig)
        if sig == signal.SIGKILL:
            with contextlib.suppress(Exception):
                reaper.signal_processes(self.processes(), sig)

    # -- the loop -------------------------------------------------------------------------

    def _loop(self) -> None:
        out, tee, wake = self._running()
        poller = select.poll()
        poller.register(out, select.POLLIN)
        poller.register(wake, select.POLLIN)
        stdin_on: int | None = None
        out_open = True
        next_tick = time.monotonic() + TICK_S
        tee_write = tee.write
        if self._log_fd is None:
            self.o.scan = None  # the scan reads its backlog back from the log
        idle = False
        want_stdin = self._stdin_wanted()
        next_reap = time.monotonic()  # a SIGCHLD from before the handler was installed is lost
        while True:
            now = time.monotonic()
            if want_stdin and self.o.stdin_fd is None:
                want_stdin = False
            if want_stdin and stdin_on is None and self.o.stdin_fd is not None:
                stdin_on = self.o.stdin_fd
                poller.register(stdin_on, select.POLLIN)
            elif not want_stdin and stdin_on is not None:
                poller.unregister(stdin_on)
                stdin_on = None
            deadline = min(d for d in (next_tick, self._end_at, self._kill_at, next_reap or None,
                                       self._ending_deadline()) if d is not None)
            timeout_ms = max(0, int((deadline - now) * 1000) + 1)
            scan = self.o.scan
            if scan is not None and scan.backlog:
                timeout_ms = min(timeout_ms, scan.idle_wait_ms())  # behind: catch up when no output waits
            events = poller.poll(timeout_ms)
            idle = not events
            if idle and scan is not None and scan.backlog:
                self._watch_output(scan.idle)
            for fd, _event in events:
                if fd == out:
                    # Under heavy output, keep reading while reads come back full: one poll per
                    # burst, not per chunk (bounded, so signals and deadlines are still seen).
                    for _ in range(BURST_READS):
                        data = read_burst(out, coalesce=self._master is not None)
                        if data is None:
                            break
                        if not data:
                            poller.unregister(out)
                            out_open = False
                            next_reap = time.monotonic()  # the job most likely exited: look now
                            break
                        tee_write(data)
                        if self.o.scan is not None:
                            self._watch_output(partial(self.o.scan.feed, data, busy=len(data) >= CHUNK))
                        if len(data) < CHUNK:
                            break
                elif fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 512)
                    next_reap = time.monotonic()
                elif fd == stdin_on:
                    if not self._stdin_wanted():  # gone to the background meanwhile
                        want_stdin = False
                    elif not forward_input(self.o.stdin_fd, self._master):
                        self.o.stdin_fd = None
                        want_stdin = False
                    if not want_stdin:
                        poller.unregister(fd)
                        stdin_on = None
            now = time.monotonic()
            if (next_reap and now >= next_reap) or now >= next_tick:
                self._reap()
                next_reap = 0.0
            if now >= next_tick:
                next_tick = now + TICK_S
                want_stdin = self._stdin_wanted()
                if self.o.on_tick is not None:
                    try:
                        self.o.on_tick(self)
                    except Exception as exc:
                        if not self._tick_failed:  # once: the job's output must not drown in it
                            self.warn(f"internal error while watching the job: {exc!r}")
                        self._tick_failed = True
            if self._end_at is not None and now >= self._end_at and self._ending_since is None:
                if self._main_status is None or self.processes():
                    self.ended_by = self._end_reason
                    self.warn(f"ending the job ({self.ended_by})")
                self._begin_ending(now)
            if self._kill_at is not None and now >= self._kill_at:
                self._kill_at = None
                self._signal_job(signal.SIGKILL)
            exited_at = self._main_exited_at
            if self._main_status is not None and self._ending_since is None and (
                    not out_open or (exited_at is not None and now - exited_at >= self.o.linger_s)):
                self._begin_ending(now)
            if self._ending_since is not None and self._ending_done(now):
                if out_open:
                    drain_until_eof(*self._running()[:2], self.o.drain_s)
                return

    def _watch_output(self, step: Callable[[], object]) -> None:
        """One step of the live failure scan; a bug in it disables the scan, never the job."""
        try:
            step()
        except Exception as exc:
            self.o.scan = None
            self.warn(f"output watcher disabled after an internal error: {exc!r}")

    def _stdin_wanted(self) -> bool:  # only in pty mode (in pipe mode the job reads gpudoc's stdin itself)
        return self._master is not None and stdin_is_ours(self.o.stdin_fd)

    def _reap(self) -> None:
        for pid, status in reap_children():
            self._reaped(pid, status)

    def _reaped(self, pid: int, status: int) -> None:
        if pid == self.pid and self._main_status is None:
            self._main_status = status
            self._main_exited_at = time.monotonic()
            if self.proc is not None:
                # Popen must not wait for a PID we already collected.
                code, sig = decode_wait_status(status)
                self.proc.returncode = -sig if sig is not None else code

    def _ending_deadline(self) -> float | None:
        if self._ending_since is not None:
            return time.monotonic() + 0.1
        return self._main_exited_at + self.o.linger_s if self._main_exited_at is not None else None

    def _begin_ending(self, now: float) -> None:
        self._ending_since = now
        procs = self.processes()
        if procs:
            if self._end_at is None and self._main_status is not None:  # the job ended; these it left running
                self.warn(f"the job left {len(procs)} process(es) running: ending them ({', '.join(str(p.pid) for p in procs)})")
            signal_group(self.pgid, signal.SIGTERM)
            reaper.signal_processes(procs, signal.SIGTERM)
            if self._kill_at is None or self._kill_at > now + self.o.end_grace_s:
                self._kill_at = now + self.o.end_grace_s

    def _ending_done(self, now: float) -> bool:
        # A /proc scan is not free: at most every 0.1 s, however fast output arrives.
        if now < self._next_ending_check:
            return False
        self._next_ending_check = now + 0.1
        self._reap()
        if self.processes():
            return False
        self._kill_at = None
        return True

    # -- the end --------------------------------------------------------------------------

    def _finish(self) -> list[ProcessRef]:
        """Whatever happened (even an exception in gpudoc): no process of the job survives."""
        survivors: list[ProcessRef] = []
        try:
            if self.pid is not None:
                procs = self.processes()
                if procs:
                    survivors = terminate(procs, pgid=self.pgid, grace_s=self.o.end_grace_s,
                                          on_reaped=self._reaped).survivors
                self._reap()
                if self._main_status is None and self.proc is not None:
                    with contextlib.suppress(ChildProcessError):
                        _, status = os.waitpid(self.pid, 0)
                        self._reaped(self.pid, status)
                if self._out is not None and self._tee is not None:
                    drain_available(*self._running()[:2])
        finally:
            if self._tee is not None:
                self._tee.close()  # everything queued is on the terminal before gpudoc's summary
            if self._relay is not None:
                self._relay.restore()
            self._wake_r = None
            for fd in (fd for fd in (self._out, self._log_fd) if fd is not None):
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._out = self._master = self._log_fd = None
        if survivors:
            self.warn("processes of the job did not end even after SIGKILL: "
                      + ", ".join(str(p.pid) for p in survivors))
        return survivors

    def _running(self) -> tuple[int, Tee, int]:
        """The job's output, the tee and the wake-up pipe: open from the start of the run to its end."""
        if self._out is None or self._tee is None or self._wake_r is None:
            raise RuntimeError("the launcher is not running a job")  # a bug in gpudoc's order of steps
        return self._out, self._tee, self._wake_r
