"""`gpudoc run`'s switches, once: the table both parsers are built from, the fast parser, the
switches back as argv (for --tmux and --rerun), and a run record's switches read back.

`gpudoc run` is on the launch path of every job, so the plain parser here handles the common
invocations without importing plumbum; ``gpudoc.cli.run`` builds the plumbum command (help,
errors, anything unusual) from the same table, so the two cannot drift apart.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpudoc.commands import switches
from gpudoc.commands.switches import Switch
from gpudoc.errors import InputError

# The table both parsers are built from (see gpudoc.commands.switches).
SWITCHES: tuple[Switch, ...] = (
    (("-p", "--profile"), "profile", "str", "VALUE",
     "Profile name or path (default: ./gpudoc.toml or $GPUDOC_PROFILE)"),
    (("--no-check",), "no_check", None, "", "Skip the pre-flight checks"),
    (("--force",), "force", None, "", "Launch even when a pre-flight check fails"),
    (("--no-probe",), "no_probe", None, "", "Do not observe the job from inside (the probe on its PYTHONPATH)"),
    (("--clean",), "clean", None, "", "First end this user's stray processes holding memory on the job's GPUs"),
    (("--yes", "-y"), "yes", None, "", "Do not ask before ending processes (--clean)"),
    (("--retry-oom",), "retry_oom", "count", "N",
     "After a GPU OOM, apply the next ladder rung and relaunch, up to N times"),
    (("--allow-semantic",), "allow_semantic", None, "",
     "Let --retry-oom use rungs that change the experiment (shorter sequences, ...)"),
    (("--tmux",), "tmux", "str", "NAME", "Start this run in a new detached tmux session NAME and print how to attach"),
    (("--watch",), "watch", None, "", "Inside tmux: follow the run in a split pane below (gpudoc watch)"),
    (("--wait",), "wait", "optional", "SECONDS",
     "When the job's GPUs lack only free memory, wait for it instead of refusing (--wait=SECONDS: give up "
     "after that long, exit 125)"),
    (("--dry-run",), "dry_run", None, "", "Show the command, environment and file edits; launch nothing"),
    (("--json",), "json", None, "", "With --dry-run: one JSON object; otherwise the final record as JSON on stderr"),
)
MAX_RETRIES = 1000

# Switches of a recorded run that say how to launch, kept for a relaunch. Not kept: -p (the new
# profile replaces it), --retry-oom (the relaunch is the retry), --tmux/--dry-run/--json (how
# that invocation talked, not how the job runs).
RELAUNCH_SWITCHES = ("no_check", "force", "clean", "yes", "allow_semantic", "no_probe")


@dataclass
class RunOptions:
    """One `gpudoc run`: its switches and the job's command."""

    command: list[str] = field(default_factory=list)
    profile: str | None = None
    no_check: bool = False
    force: bool = False
    no_probe: bool = False
    clean: bool = False
    yes: bool = False
    retry_oom: int = 0
    allow_semantic: bool = False
    tmux: str | None = None
    watch: bool = False
    dry_run: bool = False
    json: bool = False
    wait: str | None = None  # "inf" (--wait alone) or the seconds of --wait=SECONDS, as typed
    # Not a switch: the checkpoint a relaunch resumes from (``gpudoc.commands.resume``), whose
    # switch goes on the launched command while ``command`` stays the user's.
    resume: dict | None = None
    # Not a switch: the relaunches --retry-oom has made so far; while some are left, a failed
    # attempt's summary sends the user nowhere (gpudoc relaunches by itself).
    attempt: int = 0
    # Not a switch: the `gpudoc tune` whose trial this launch is (its record says so).
    trial_of: str | None = None

    def to_argv(self) -> list[str]:
        """The same `gpudoc run` as arguments (after the program name), minus --tmux and --dry-run."""
        args = ["run"]
        if self.profile:
            args += ["-p", self.profile]
        for flag, on in (("--no-check", self.no_check), ("--force", self.force), ("--no-probe", self.no_probe),
                         ("--clean", self.clean),
                         ("--yes", self.yes), ("--allow-semantic", self.allow_semantic), ("--json", self.json),
                         ("--watch", self.watch)):
            if on:
                args.append(flag)
        if self.retry_oom:
            args += ["--retry-oom", str(self.retry_oom)]
        if self.wait is not None:
            args.append("--wait" if self.wait == switches.OPTIONAL_ALONE else f"--wait={self.wait}")
        return [*args, "--", *self.command]

    def switches(self) -> list[str]:
        """Only the switches (what a run record keeps for a relaunch)."""
        return self.to_argv()[1:-1 - len(self.command)]


def split_command(argv: list[str], takes_value: dict[str, bool]) -> list[str]:
    """Insert ``--`` before the first argument that is not a switch of ours (or a switch's value).

    The job's own flags must never be read as ours: `gpudoc run python train.py --lr 3` means
    `gpudoc run -- python train.py --lr 3`. ``takes_value`` maps a switch name without dashes
    to whether it takes a value.
    """
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, _ = arg[2:].partition("=")
            out.append(arg)
            if takes_value.get(name) and not eq and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            out.append(arg)
            if takes_value.get(arg[1]) and len(arg) == 2 and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        else:
            return [*out, "--", *argv[i:]]
        i += 1
    return out


def takes_value() -> dict[str, bool]:
    return switches.takes_value(SWITCHES)


def parse_fast(args: list[str]) -> RunOptions | None:
    """Our switches and the command, or None for anything the full parser should handle
    (help, version, an unknown switch, a bad value, a repeated switch)."""
    parsed = switches.parse_switches(split_command(list(args), takes_value()), SWITCHES, max_count=MAX_RETRIES)
    if parsed is None:
        return None
    values, command = parsed
    return RunOptions(command=command, **values)


def relaunch_switches(run_id: str, switches: list[str], argv: list[str]) -> RunOptions:
    """A recorded run's own `gpudoc run` switches that a relaunch keeps (no command, no profile).

    ``switches`` is the record's ``run_switches``; a record that only has ``argv`` keeps the
    launched command there (it never starts with a dash), unless it is a switch list itself. A
    record of an older gpudoc has neither: the relaunch then runs with the defaults.
    """
    switches = list(switches)
    if not switches and argv and (argv[0] == "run" or argv[0].startswith("-")):
        switches = argv[1:] if argv[0] == "run" else list(argv)
        if "--" in switches:
            switches = switches[: switches.index("--")]
    if not switches:
        return RunOptions()
    parsed = parse_fast([*switches, "--", "true"])
    if parsed is None:
        raise InputError(f"run {run_id}: unreadable recorded switches {' '.join(switches)!r}")
    kept = RunOptions()
    for key in RELAUNCH_SWITCHES:
        setattr(kept, key, bool(getattr(parsed, key)))
    return kept

