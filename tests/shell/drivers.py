"""Drive the real shells' completion machinery with the scripts in ``completions/``.

Each driver starts one shell process for a batch of command lines and returns, per line, the
candidates the shell itself would offer on TAB:
- bash: the completion function is called the way bash calls it (COMP_WORDS, COMP_CWORD,
  COMP_LINE, COMP_POINT) and COMPREPLY is read back;
- fish: ``complete -C LINE`` with the script sourced;
- zsh: an interactive zsh in a pseudo-terminal (zpty) with compinit, a real TAB, and compadd
  wrapped to report the matches (tests/shell/zsh_capture.zsh).
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from tests.conftest import REPO

COMPLETIONS = REPO / "completions"
BASH_SCRIPT = COMPLETIONS / "gpudoc"
ZSH_DIR = COMPLETIONS
FISH_SCRIPT = COMPLETIONS / "gpudoc.fish"
ZSH_CAPTURE = Path(__file__).with_name("zsh_capture.zsh")
END = "<<END>>"


def shell_env(extra: dict | None = None, path_first: list[Path] | None = None) -> dict:
    """The test's environment with ``gpudoc`` resolving to this checkout's bin/gpudoc."""
    env = dict(os.environ)
    first = [str(p) for p in (path_first or [REPO / "bin"])]
    env["PATH"] = os.pathsep.join([*first, env.get("PATH", "")])
    env["PYTHONPATH"] = str(REPO)
    env.update(extra or {})
    return env


def _split_batches(stdout: str, count: int) -> list[list[str]]:
    batches: list[list[str]] = [[]]
    for line in stdout.splitlines():
        if line == END:
            batches.append([])
        elif line:
            batches[-1].append(line)
    assert len(batches) == count + 1, f"expected {count} completion batches, got:\n{stdout}"
    return batches[:count]


def bash_complete(lines: list[str], *, cwd: Path, env: dict | None = None,
                  prelude: str = "") -> list[list[str]]:
    """COMPREPLY for each line (the cursor at its end). Words split as bash would: at blanks and at
    the characters of COMP_WORDBREAKS that matter here ('=')."""
    calls = []
    for line in lines:
        words = _bash_words(line)
        cword = len(words) - 1
        array = " ".join(shlex.quote(w) for w in words)
        calls.append(
            f"COMP_WORDS=({array}); COMP_CWORD={cword}; COMP_LINE={shlex.quote(line)}; "
            f"COMP_POINT={len(line)}; COMPREPLY=(); _gpudoc gpudoc; "
            f"printf '%s\\n' \"${{COMPREPLY[@]}}\"; echo {shlex.quote(END)}"
        )
    script = "\n".join([f"source {shlex.quote(str(BASH_SCRIPT))}", prelude, *calls])
    result = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], cwd=cwd,
                            env=env or shell_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "command not found" not in result.stderr, result.stderr
    return _split_batches(result.stdout, len(lines))


def _bash_words(line: str) -> list[str]:
    words: list[str] = []
    for token in line.split():
        # bash's COMP_WORDBREAKS splits "--profile=a" into "--profile", "=", "a"
        head, sep, tail = token.partition("=")
        if sep and head.startswith("-"):
            words += [head, "=", *([tail] if tail else [])]
        else:
            words.append(token)
    if line.endswith(" ") or not words:
        words.append("")
    return words


def fish_complete(lines: list[str], *, cwd: Path, env: dict | None = None) -> list[list[str]]:
    """What ``complete -C`` offers, without descriptions."""
    calls = [f"complete -C {_fish_quote(line)}; echo {shlex.quote(END)}" for line in lines]
    script = "\n".join([f"source {_fish_quote(str(FISH_SCRIPT))}", *calls])
    result = subprocess.run(["fish", "--no-config", "-c", script], cwd=cwd,
                            env=env or shell_env(), capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", result.stderr
    batches = _split_batches(result.stdout, len(lines))
    return [[entry.split("\t")[0] for entry in batch] for batch in batches]


def _fish_quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def zsh_complete(lines: list[str], *, cwd: Path, env: dict | None = None) -> list[list[str]]:
    """The matches zsh's completion system adds when TAB is pressed after each line."""
    result = subprocess.run(["zsh", "-f", str(ZSH_CAPTURE), str(ZSH_DIR), *lines], cwd=cwd,
                            env=env or shell_env(), capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return _split_batches(result.stdout, len(lines))


DRIVERS = {"bash": bash_complete, "zsh": zsh_complete, "fish": fish_complete}
