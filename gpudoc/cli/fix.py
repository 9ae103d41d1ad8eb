"""`gpudoc fix`: after a failure, what happened and what to change next (and apply it)."""

from __future__ import annotations

from typing import Any

from plumbum import cli

from gpudoc.cli.base import Command

# plumbum reads a lone "-" as a switch; argv can never hold a NUL, so this stands in for it.
_STDIN = "\0-"


class FixCommand(Command):
    """After a failure: say what happened and propose the next rungs of the tuning ladder.

    Reads the latest run (for a multi-node job: every node's record of it, naming the node and rank
    that failed first), or RUN_IDs, or --log files, or - for stdin; shows the exact knob changes
    with the expected memory effect. --apply writes the first; --rerun also relaunches the
    recorded command with the run's own switches (--no-check, --clean, ...)."""

    EXAMPLES = """
gpudoc fix
gpudoc fix --log train.log -p gpudoc.toml --apply
"""

    logs = cli.SwitchAttr(["--log"], str, list=True, argname="FILE", help="diagnose a log file (- for stdin)")
    profile = cli.SwitchAttr(["-p", "--profile"], str, default=None, argname="PROFILE", help="profile name or file (default: the run's profile, else ./gpudoc.toml)")
    apply = cli.Flag(["--apply"], help="write the next rung where the job reads it: the profile (comments kept), or a job without one its config files (each backed up) and the next command for its flags")
    rerun = cli.Flag(["--rerun"], help="apply, then relaunch the recorded command with gpudoc run")
    allow_semantic = cli.Flag(["--allow-semantic"], help="also propose rungs that change the experiment (shorter sequences, smaller LoRA rank, user rungs)")
    json = cli.Flag(["--json"], help="one JSON object: diagnosis and suggestions")

    def _parse_args(self, argv: list[str]) -> Any:  # plumbum hook (tests/cli/test_base.py pins it)
        return super()._parse_args([_STDIN if arg == "-" else arg for arg in argv])

    def main(self, *targets: str) -> int:
        from gpudoc.commands.fix import fix

        return fix(
            self.workspace,
            targets=tuple("-" if t == _STDIN else t for t in targets),
            logs=tuple("-" if log == _STDIN else log for log in self.logs),
            profile_name=self.profile,
            apply=self.apply,
            rerun=self.rerun,
            allow_semantic=self.allow_semantic,
            as_json=self.json,
        )
