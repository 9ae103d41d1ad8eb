"""`gpudoc profile`: list, show and create profiles."""

from __future__ import annotations

from plumbum import cli

from gpudoc.cli.base import Command


class ProfileCommand(Command):
    """List, show and create profiles (GPU needs, environment and training knobs)."""

    EXAMPLES = """
gpudoc profile list
gpudoc profile show qwen2.5-7b-lora-24gb
gpudoc profile new my-box --from-gpu
gpudoc profile schema > gpudoc-profile.schema.json
"""

    def main(self, *args: str) -> int:
        if args:
            from gpudoc.errors import UsageError

            raise UsageError(f"gpudoc profile: unknown action '{args[0]}' (list, show NAME, new NAME, schema)")
        if not self.nested_command:
            from gpudoc.errors import UsageError

            self.help()
            raise UsageError("gpudoc profile: which action? list, show NAME, new NAME or schema")
        return 0


@ProfileCommand.subcommand("list")
class ProfileList(Command):
    """List the profiles visible from here (project, user, shipped)."""

    EXAMPLES = """
gpudoc profile list
gpudoc profile list --json
"""
    json = cli.Flag("--json", help="the JSON envelope, its profiles under \"profiles\"")

    def main(self) -> int:
        from gpudoc.commands.profile import list_profiles

        return list_profiles(self.workspace, as_json=self.json)


@ProfileCommand.subcommand("show")
class ProfileShow(Command):
    """Show a profile after `extends`: every table, the knobs and the global batch."""

    EXAMPLES = """
gpudoc profile show a10g-24gb
gpudoc profile show ./gpudoc.toml --json
"""
    json = cli.Flag("--json", help="the resolved profile as JSON")

    def main(self, name: str) -> int:
        from gpudoc.commands.profile import show_profile

        return show_profile(self.workspace, name, as_json=self.json)


@ProfileCommand.subcommand("new")
class ProfileNew(Command):
    """Start a profile in ./.gpudoc/profiles/NAME.toml, optionally from the GPUs of this machine."""

    EXAMPLES = """
gpudoc profile new my-box
gpudoc profile new my-box --from-gpu --snapshot nvidia-smi.xml
gpudoc profile new my-job --from-run
"""
    from_gpu = cli.Flag("--from-gpu", help="fill [gpu] from the driver (or --snapshot) and extend the nearest GPU tier")
    from_run = cli.Flag("--from-run", help="fill [train], [launch] and [bind] from what gpudoc read of a run's command "
                                           "(RUN_ID after NAME; default: the latest run)")
    snapshots = cli.SwitchAttr("--snapshot", str, list=True, help="read GPUs from a saved nvidia-smi file instead of the driver")
    force = cli.Flag("--force", help="replace an existing profile (a backup is kept)")

    def main(self, name: str, run_id: str = "") -> int:  # plumbum converts by the annotation: a str, "" for none
        from gpudoc.commands.profile import new_profile
        from gpudoc.errors import UsageError

        if run_id and not self.from_run:
            raise UsageError(f"profile new: unexpected {run_id!r} after the name (a RUN_ID goes with --from-run)")
        if self.from_run and self.from_gpu:
            raise UsageError("profile new: --from-run and --from-gpu are two different starting points; pick one")
        return new_profile(self.workspace, name, from_gpu=self.from_gpu, snapshots=tuple(self.snapshots),
                           force=self.force, from_run=run_id if self.from_run else None)


@ProfileCommand.subcommand("schema")
class ProfileSchema(Command):
    """Print the JSON Schema of a profile, for editors that check TOML with one (taplo, Even Better TOML)."""

    EXAMPLES = """
gpudoc profile schema
gpudoc profile schema > gpudoc-profile.schema.json
"""

    def main(self) -> int:
        from gpudoc.commands.profile import print_schema

        return print_schema(self.workspace)
