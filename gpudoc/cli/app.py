"""``gpudoc``: the top-level application and its (lazily imported) subcommands."""

from __future__ import annotations

from gpudoc import __version__
from gpudoc.cli.base import Command


class Gpudoc(Command):
    """Pre-flight doctor, launcher and OOM fixer for PyTorch training on 1-8 GPU machines."""

    PROGNAME = "gpudoc"
    VERSION = __version__
    DESCRIPTION = (
        "Pre-flight doctor, launcher and OOM fixer for PyTorch training.\n"
        "check before you launch, run to launch and record, fix after an OOM."
    )
    EXAMPLES = """
gpudoc check -p a10g-24gb
gpudoc run -p gpudoc.toml -- torchrun --nproc_per_node=4 train.py --config cfg.yaml
gpudoc fix --apply
"""

    def main(self, *args: str) -> int:
        reject_unknown(args[:1])
        if not self.nested_command:
            self.help()
            return 2
        return 0


# Subcommands are named by import path so `gpudoc --help` and `gpudoc check` only import what
# they use (and never torch).
_SUBCOMMANDS = {
    "check": "gpudoc.cli.check.CheckCommand",
    "run": "gpudoc.cli.run.RunCommand",
    "fix": "gpudoc.cli.fix.FixCommand",
    "estimate": "gpudoc.cli.estimate.EstimateCommand",
    "tune": "gpudoc.cli.tune.TuneCommand",
    "clean": "gpudoc.cli.clean.CleanCommand",
    "runs": "gpudoc.cli.runs.RunsCommand",
    "logs": "gpudoc.cli.logs.LogsCommand",
    "watch": "gpudoc.cli.watch.WatchCommand",
    "profile": "gpudoc.cli.profile.ProfileCommand",
    "restore": "gpudoc.cli.restore.RestoreCommand",
    "completions": "gpudoc.cli.completions.CompletionsCommand",
}
for _name, _target in _SUBCOMMANDS.items():
    Gpudoc.subcommand(_name, _target)


def reject_unknown(words: tuple[str, ...] | list[str]) -> None:
    """A first word that is no command of gpudoc's is a usage error, also before a ``--help`` that
    would otherwise print the top-level help and exit 0 (``gpudoc autotune --help``)."""
    if words and not words[0].startswith("-") and words[0] not in _SUBCOMMANDS:
        from gpudoc.errors import UsageError
        from gpudoc.profiles.validate import did_you_mean

        raise UsageError(f"gpudoc: unknown command '{words[0]}'{did_you_mean(words[0], _SUBCOMMANDS)} "
                         "(see `gpudoc --help`)")
