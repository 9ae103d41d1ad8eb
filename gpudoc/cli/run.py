"""`gpudoc run`: switches only; the work is in ``gpudoc.commands.run``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command
from gpudoc.errors import ExitStatus, UsageError


class RunCommand(Command):
    """Launch a training command with pre-flight checks, the profile applied, a complete log,
    signal handling that leaves no process behind, and a run record (see `gpudoc runs`)."""

    PROGNAME = "gpudoc run"
    USAGE = "    gpudoc run [SWITCHES] -- COMMAND [ARGS...]\n"
    EXAMPLES = """
gpudoc run -p a10g-24gb -- torchrun --nproc_per_node=4 train.py --config cfg.yaml
gpudoc run --retry-oom 3 --tmux train -- python train.py
"""

    profile = cli.SwitchAttr(["-p", "--profile"], str, default=None,
                             help="Profile name or path (default: ./gpudoc.toml or $GPUDOC_PROFILE)")
    no_check = cli.Flag(["--no-check"], help="Skip the pre-flight checks")
    force = cli.Flag(["--force"], help="Launch even when a pre-flight check fails")
    clean = cli.Flag(["--clean"], help="First end this user's stray processes holding memory on the job's GPUs")
    yes = cli.Flag(["--yes", "-y"], help="Do not ask before ending processes (--clean)")
    retry_oom = cli.SwitchAttr(["--retry-oom"], cli.Range(0, 1000), default=0, argname="N",
                               help="After a GPU OOM, apply the next ladder rung and relaunch, up to N times")
    allow_semantic = cli.Flag(["--allow-semantic"],
                              help="Let --retry-oom use rungs that change the experiment (shorter sequences, ...)")
    tmux = cli.SwitchAttr(["--tmux"], str, default=None, argname="NAME",
                          help="Start this run in a new detached tmux session NAME and print how to attach")
    dry_run = cli.Flag(["--dry-run"], help="Show the command, environment and file edits; launch nothing")
    json = cli.Flag(["--json"], help="With --dry-run: one JSON object; otherwise the final record as JSON on stderr")

    def _parse_args(self, argv):  # noqa: D401 - plumbum hook
        # The job's own flags must never be read as ours: the first word that is not one of our
        # switches starts COMMAND, as if `--` had been written before it.
        try:
            return super()._parse_args(split_command(argv, self._switches_by_name))
        except UsageError as exc:
            # 125, like `docker run`: gpudoc's own failures never look like the job's exit status.
            exc.exit_status = ExitStatus.LAUNCH_REFUSED
            raise

    def main(self, *command: str) -> int:
        from gpudoc.commands.run import RunOptions, run

        return run(RunOptions(
            command=list(command), profile=self.profile, no_check=self.no_check, force=self.force,
            clean=self.clean, yes=self.yes, retry_oom=self.retry_oom, allow_semantic=self.allow_semantic,
            tmux=self.tmux, dry_run=self.dry_run, json=self.json,
        ))


def split_command(argv: list[str], switches: dict) -> list[str]:
    """Insert ``--`` before the first argument that is not a switch of ours (or a switch's value)."""
    out: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return out + argv[i:]
        if arg.startswith("--") and len(arg) > 2:
            name, eq, _ = arg[2:].partition("=")
            out.append(arg)
            info = switches.get(name)
            if info is not None and info.argtype and not eq and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        elif arg.startswith("-") and len(arg) > 1:
            out.append(arg)
            info = switches.get(arg[1])
            if info is not None and info.argtype and len(arg) == 2 and i + 1 < len(argv):
                out.append(argv[i + 1])
                i += 1
        else:
            return out + ["--"] + argv[i:]
        i += 1
    return out
