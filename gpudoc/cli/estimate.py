"""`gpudoc estimate`: switches only; the work is in ``gpudoc.commands.estimate``."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class EstimateCommand(Command):
    """Peak GPU memory per GPU for the profile's model and knobs, and the largest micro batch that fits.
With no [model], the model the job names (-- COMMAND, else the profile's last run: --model_name_or_path,
model.name_or_path=, base_model in its YAML, ...) is read from its config.json: a local directory or
the local Hugging Face cache ($HF_HOME/hub), never the network"""

    USAGE = "    gpudoc estimate [SWITCHES] [-- COMMAND [ARGS...]]\n"
    EXAMPLES = """
gpudoc estimate -p gpudoc.toml --gpu-memory 24
gpudoc estimate -p qwen2.5-7b-lora-24gb --micro-batch-size 4 --json
gpudoc estimate --simulate --python .venv/bin/python
gpudoc estimate -p gpu-24gb -- python train.py --model_name_or_path Qwen/Qwen2.5-7B --max_seq_length 2048
"""

    profile = cli.SwitchAttr(["-p", "--profile"], str, argname="PROFILE",
                             help="profile name or file (default: ./gpudoc.toml or $GPUDOC_PROFILE)")
    json = cli.Flag("--json", help="emit one JSON document (peak_bytes, breakdown, max_micro_batch_size, ...)")
    gpu_memory = cli.SwitchAttr("--gpu-memory", float, argname="GIB",
                                help="GPU capacity in GiB (default: [gpu] memory_gib, else the visible GPU)")
    micro_batch_size = cli.SwitchAttr("--micro-batch-size", int, argname="N",
                                      help="estimate for this micro batch instead of the profile's")
    simulate = cli.Flag("--simulate", help="simulate one training step of the real model code on meta tensors "
                        "in the job's interpreter (needs torch there; the formula answers, saying why, when it cannot)")
    python = cli.SwitchAttr("--python", str, argname="PATH",
                            help="the job's interpreter for --simulate (default: the one the job's command runs, "
                            "else python3 on PATH)")

    def main(self, *command: str) -> int:
        from gpudoc.commands.estimate import estimate_command

        return estimate_command(
            self.workspace,
            profile_name=self.profile,
            as_json=self.json,
            gpu_memory_gib=self.gpu_memory,
            micro_batch_size=self.micro_batch_size,
            simulate=self.simulate,
            python=self.python,
            command=list(command),
        )
