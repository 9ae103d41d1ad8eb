"""`gpudoc completions bash|zsh|fish`: print the shell completion script."""

from __future__ import annotations

from gpudoc.cli.base import Command


class CompletionsCommand(Command):
    """Print the completion script for bash, zsh or fish (subcommands, switches, profiles, runs)."""

    EXAMPLES = """
gpudoc completions bash > ~/.local/share/bash-completion/completions/gpudoc
gpudoc completions fish > ~/.config/fish/completions/gpudoc.fish
"""

    def main(self, shell: str) -> int:
        from gpudoc.cli.completion import print_completions

        return print_completions(shell)
