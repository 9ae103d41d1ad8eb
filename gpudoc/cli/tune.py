"""`gpudoc tune`: switches only; the work is in ``gpudoc.commands.tune``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class TuneCommand(Command):
    """Find the largest micro batch that fits by short trials of the real command, the global batch exact.

    Each trial runs K optimizer steps (stopped by the framework's own step limit, else by the probe) in a
    temporary working and output directory, with the accumulation that keeps micro x accumulation x
    world equal to the job's; each is a run record marked trial_of. --apply writes the answer as fix
    --apply writes a rung."""

    USAGE = "    gpudoc tune [SWITCHES] -- COMMAND [ARGS...]\n"
    EXAMPLES = """
gpudoc tune -- torchrun --nproc_per_node=2 train.py --per_device_train_batch_size 8 --gradient_accumulation_steps 4
gpudoc tune -p gpudoc.toml --steps 5 --max 32 --apply -- python train.py
"""

    profile = cli.SwitchAttr(["-p", "--profile"], str, argname="PROFILE",
                             help="profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)")
    steps = cli.SwitchAttr("--steps", int, default=3, argname="K", help="optimizer steps per trial")
    low = cli.SwitchAttr("--min", int, default=1, argname="N", help="the smallest micro batch to try")
    high = cli.SwitchAttr("--max", int, argname="N",
                          help="the largest micro batch to try (default: twice the estimate's, else the job's)")
    apply = cli.Flag("--apply", help="write the micro batch found where the job reads it, as fix --apply does")
    json = cli.Flag("--json", help="one JSON object: best, trials")

    def main(self, *command: str) -> int:
        from gpudoc.commands.tune import TuneOptions, tune

        return tune(TuneOptions(command=list(command), profile=self.profile, steps=self.steps, low=self.low,
                                high=self.high, apply=self.apply, json=self.json), self.workspace)
