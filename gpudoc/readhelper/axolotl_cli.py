"""axolotl's own reading of a training command, in the job's interpreter (loaded by ``main.py`` by path).

``axolotl train CFG OPTIONS [-- LAUNCHER ARGS]``: its click command's own options (made from its
config schema: a value option takes the next token, a ``--x/--no-x`` switch none); the options
it passes on become ``--key=value`` (its ``build_command``) for ``-m axolotl.cli.train``, which
fire parses into the keyword arguments of ``do_cli``. ``-m axolotl.cli.train CFG OPTIONS``: fire's
parse alone. ``load_cfg`` sets each over the YAML's key (its own ``_coerce_value`` typing the
value), then ``validate_config`` builds the config through the pydantic schema, with its defaults
by installed release.

``load_cfg`` itself is not called: it writes ``output_dir/debug.log``, sets the job's environment
and fetches the model's config from the Hub (``normalize_config``). Its coercion is taken from its
own source, since importing ``axolotl.cli.config`` imports its multipack sampler's numba.
The GPU is assumed to have bf16 and tf32 (the helper sees none; the job's decides at launch).

Request: ``{"framework": "axolotl", "entry": "cli" | "module", "config", "args"}``. Answer:
``config`` (the validated settings), ``given`` (key -> ``"argv"`` or ``"file"``), ``options``
(what the CLI made of the options), ``versions``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

_OWN = ("config", "launcher", "cloud", "sweep")  # `axolotl train`'s own parameters, not config keys


def axolotl(req: Mapping[str, Any]) -> dict[str, Any]:
    os.environ["AXOLOTL_DO_NOT_TRACK"] = "1"  # a reading is not a run: axolotl's telemetry sends nothing
    import axolotl as axolotl_pkg  # type: ignore[import-not-found]  # first: without it nothing else is imported

    config = str(req["config"])
    args = [str(a) for a in req.get("args") or ()]
    notes = []
    if req.get("entry") == "cli":
        import click
        from axolotl.cli.main import train  # type: ignore[import-not-found]
        from axolotl.cli.utils.train import build_command  # type: ignore[import-not-found]

        try:
            ctx = train.make_context("train", [config, *args])
        except click.ClickException as exc:
            raise ValueError(f"axolotl train refuses the command: {exc.format_message()}") from None
        options = {k: v for k, v in ctx.params.items() if v is not None and k not in _OWN}
        if ctx.args:
            notes.append(f"{' '.join(ctx.args)}: not options of axolotl train; it passes them to its launcher")
        args = build_command([], options)
    kwargs = _fire_kwargs(args)
    import yaml  # type: ignore[import-untyped]

    with open(config, encoding="utf-8") as handle:
        data = yaml.safe_load(handle) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{config}: not a mapping of settings")
    coerce = _coerce_value()
    given = {str(k): "file" for k in data}
    for key, value in kwargs.items():
        # load_cfg: an option sets its key unless the YAML is strict and lacks it
        if key in data or not data.get("strict"):
            data[key] = coerce(value, data.get(key)) if coerce is not None else value
            given[key] = "argv"
    validated = _validated(data)
    from importlib.metadata import version

    return {"config": _plain(validated), "given": given, "options": _plain(kwargs), "notes": notes,
            "read_files": [os.path.abspath(config)],
            "versions": {"axolotl": getattr(axolotl_pkg, "__version__", None) or version("axolotl")}}


def _fire_kwargs(args: list[str]) -> dict[str, Any]:
    """``do_cli``'s keyword arguments as fire parses ``-m axolotl.cli.train CFG ARGS``'s flags."""
    from axolotl.cli.train import do_cli  # type: ignore[import-not-found]
    from fire import core, inspectutils, parser  # type: ignore[import-not-found]

    kwargs, _unused, _rest = core._ParseKeywordArgs(args, inspectutils.GetFullArgSpec(do_cli))
    return {str(k): parser.DefaultParseValue(v) if isinstance(v, str) else v for k, v in kwargs.items()}


def _coerce_value() -> Any:
    """``axolotl.cli.config._coerce_value``, compiled from its source alone; None where this release has none."""
    import ast
    import importlib.util
    from typing import Any as AnyType
    from typing import Optional

    spec = importlib.util.find_spec("axolotl.cli")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(next(iter(spec.submodule_search_locations)), "config.py")
    try:
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError):
        return None
    found: list[ast.stmt] = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "_coerce_value"]
    if not found:
        return None
    namespace: dict[str, Any] = {"Any": AnyType, "Optional": Optional}
    exec(compile(ast.Module(body=found, type_ignores=[]), path, "exec"), namespace)  # noqa: S102
    return namespace["_coerce_value"]


def _validated(data: dict[str, Any]) -> Any:
    from importlib.metadata import version

    from axolotl.utils.config import validate_config  # type: ignore[import-not-found]
    from axolotl.utils.dict import DictDefault  # type: ignore[import-not-found]
    from pydantic import ValidationError

    capabilities = {"bf16": True, "fp8": False, "tf32": True, "n_gpu": int(os.environ.get("WORLD_SIZE", "1")),
                    "compute_capability": None}
    try:
        return validate_config(DictDefault(data), capabilities=capabilities,
                               env_capabilities={"torch_version": version("torch").split("+", 1)[0]})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ())) or "the config"
        raise ValueError(f"axolotl's config schema refuses {where} = {first.get('input')!r}: {first.get('msg')}") \
            from None


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value if value is None or isinstance(value, (bool, int, float, str)) else str(value)
