"""What is installed for the interpreter that runs the job: a package's version, from its
environment's layout (a venv's or conda's site-packages, Debian's dist-packages, pyenv's versions),
without starting that interpreter or importing the package. Which release the job has decides the
allocator variable its torch reads and the defaults its framework takes (TRL's changed by release).
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import sys
from collections.abc import Iterable, Mapping

from gpudoc.job.argv import _PYTHON


def parse_version(text: str | None) -> tuple[int, int] | None:
    """``"2.13.0+cpu"`` -> (2, 13); None for text that is not a version."""
    if not text:
        return None
    match = re.match(r"^\s*(\d+)\.(\d+)", text)
    return (int(match.group(1)), int(match.group(2))) if match else None


def which_on_path(name: str, environ: Mapping[str, str]) -> str | None:
    """``name`` looked up on the job's PATH (its environment's, not gpudoc's)."""
    return shutil.which(name, path=environ.get("PATH", os.defpath))


def shebang(path: str) -> list[str] | None:
    """The words of a script's ``#!`` line; None when ``path`` is not a regular file or has no such line."""
    if not os.path.isfile(path):
        return None  # a pipe (`<(...)`) would block, or lose the job its bytes
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512)  # Linux reads at most 256 bytes of it; a longer line is not one
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    return first[2:].decode("utf-8", "replace").split() or None


def shebang_interpreter(path: str, environ: Mapping[str, str]) -> str | None:
    """The Python named by a script's ``#!`` line, or None when it is not a Python script."""
    parts = shebang(path)
    if not parts:
        return None
    if os.path.basename(parts[0]) == "env":
        args = [p for p in parts[1:] if not p.startswith("-")]
        if args and _PYTHON.match(os.path.basename(args[0])):
            return which_on_path(args[0], environ)
        return None
    if _PYTHON.match(os.path.basename(parts[0])):
        return parts[0]
    return None


def job_python(program: str | None, environ: Mapping[str, str]) -> str | None:
    """The interpreter a job's program is, or starts by its ``#!`` line (a console script: ``trl``,
    ``torchrun``), looked up on the job's PATH; None when it is neither (an environment tool in front
    of it is ``gpudoc.job.interpreter``'s to ask)."""
    if program is None:
        return None
    path = program if os.sep in program else which_on_path(program, environ)
    if path is None:
        return None
    return path if _PYTHON.match(os.path.basename(path)) else shebang_interpreter(path, environ)


# Asking the interpreter itself, where its layout cannot be read: importlib.metadata only.
ASK_TIMEOUT_S = 30.0


def installed_version(package: str, python: str | None = None) -> str | None:
    """The version of ``package`` installed for ``python`` (default: this interpreter), without importing it.

    The ``package-X.dist-info`` directory names it. For this interpreter its sys.path is listed; for
    another one its environment's site-packages are found from the file layout (venv, conda,
    Debian, pyenv), so ``gpudoc check`` need not start the job's Python. Only a layout that cannot
    be read this way costs a subprocess, which reads the metadata there; still no import of the package.
    """
    if python is None or _same_interpreter(python):
        return _dist_info_version(sys.path, package)
    site_dirs = _site_dirs_of(python)
    if site_dirs is not None:
        return _dist_info_version(site_dirs, package)
    code = (f"import importlib.metadata as m\ntry:\n print(m.version({package!r}))\nexcept Exception:\n print('')")
    import subprocess  # here: `gpudoc check` usually answers from the layout, without it (~5 ms)

    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=ASK_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    text = done.stdout.strip()
    return text or None


def _dist_info_version(directories: Iterable[str], package: str) -> str | None:
    prefix = f"{package}-"
    for entry in directories:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for name in names:
            if name.startswith(prefix) and name.endswith((".dist-info", ".egg-info")):
                return name[len(prefix):].rsplit(".", 1)[0]
    return None


def _site_dirs_of(python: str) -> list[str] | None:
    """Where ``python`` looks for packages, from the file layout alone; None when it cannot tell
    (then the caller asks the interpreter itself)."""
    path = shutil.which(python) or python
    path = _through_pyenv_shim(path) or path
    try:
        with open(path, "rb") as handle:
            if handle.read(4) != b"\x7fELF":
                return None  # a wrapper script: only running it says what it starts
    except OSError:
        return None
    root = os.path.dirname(os.path.dirname(os.path.abspath(path)))
    real_name = os.path.basename(os.path.realpath(path))
    version = re.fullmatch(r"python(\d+\.\d+)", real_name)
    lib = f"python{version.group(1)}" if version else "python3*"
    dirs = [d for d in os.environ.get("PYTHONPATH", "").split(os.pathsep) if d]
    pyvenv = os.path.join(root, "pyvenv.cfg")
    if os.path.isfile(pyvenv):
        dirs += glob.glob(os.path.join(root, "lib", lib, "site-packages"))
        config = _read_pyvenv_cfg(pyvenv)
        if config.get("include-system-site-packages", "false").lower() != "true":
            return dirs
        root = os.path.dirname(config.get("home", "").rstrip("/")) or root
    dirs += glob.glob(os.path.join(root, "lib", lib, "site-packages"))
    dirs += glob.glob(os.path.join(root, "local", "lib", lib, "dist-packages"))  # Debian's pip
    dirs += glob.glob(os.path.join(root, "lib", "python3", "dist-packages"))  # Debian's packages
    dirs += glob.glob(os.path.join(os.path.expanduser("~"), ".local", "lib", lib, "site-packages"))
    return dirs


def _read_pyvenv_cfg(path: str) -> dict[str, str]:
    config = {}
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                key, sep, value = line.partition("=")
                if sep:
                    config[key.strip()] = value.strip()
    except OSError:
        pass
    return config


def _through_pyenv_shim(path: str) -> str | None:
    """The interpreter a pyenv shim would start, by pyenv's documented lookup order
    (PYENV_VERSION, then .python-version up from the working directory, then the global version
    file); None when ``path`` is not a pyenv shim or the version cannot be read."""
    shims = os.path.dirname(os.path.abspath(path))
    if os.path.basename(shims) != "shims" or not os.path.isdir(os.path.join(os.path.dirname(shims), "versions")):
        return None
    pyenv_root = os.path.dirname(shims)
    version = os.environ.get("PYENV_VERSION", "").split(":")[0]
    if not version:
        directory = os.getcwd()
        while True:
            candidate = os.path.join(directory, ".python-version")
            if os.path.isfile(candidate):
                version = _first_word(candidate)
                break
            parent = os.path.dirname(directory)
            if parent == directory:
                version = _first_word(os.path.join(pyenv_root, "version"))
                break
            directory = parent
    if not version or version == "system":
        return None
    target = os.path.join(pyenv_root, "versions", version, "bin", os.path.basename(path))
    return target if os.path.isfile(target) else None


def _first_word(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip() and not line.lstrip().startswith("#"):
                    return line.split()[0]
    except OSError:
        pass
    return ""


def _same_interpreter(python: str) -> bool:
    # Not realpath: a virtual environment's python is a symlink to the base interpreter but has
    # its own site-packages.
    return os.path.abspath(python) == os.path.abspath(sys.executable)
