"""Knob values as the outside world spells them (env strings, framework flag values).

Environment values: booleans are ``true``/``false`` (lower case, what shell tests and
``os.environ[...] == "true"`` expect; ``1``/``0`` would be ambiguous next to integer knobs),
integers are plain decimal, floats use Python's shortest round-trip spelling, strings pass
through unchanged.
"""

from __future__ import annotations

import re
from typing import Any, Mapping

from gpudoc.configvalues import format_value

# Knobs the tuning ladder changes. A preset that cannot carry one of these (at a value that
# needs carrying) is an error before launch: otherwise the ladder would "fix" an OOM by changing
# a number the job never reads.
LADDER_KNOBS = (
    "micro_batch_size",
    "gradient_accumulation_steps",
    "gradient_checkpointing",
    "precision",
    "zero_stage",
    "offload_optimizer",
    "offload_params",
    "max_seq_len",
    "lora_rank",
)

# Values that need no flag at all: the frameworks' own defaults.
NEUTRAL = {
    "gradient_checkpointing": (False,),
    "zero_stage": (0,),
    "offload_optimizer": (False,),
    "offload_params": (False,),
    "lora_rank": (0,),
}

PLACEHOLDER = re.compile(r"(\{\{)([A-Za-z_][A-Za-z0-9_]*)(\}\})|\{([A-Za-z_][A-Za-z0-9_]*)\}")


def is_neutral(knob: str, value: Any) -> bool:
    return any(value is v or (type(value) is type(v) and value == v) for v in NEUTRAL.get(knob, ()))


def env_name(knob: str) -> str:
    return "GPUDOC_" + re.sub(r"[^A-Za-z0-9]", "_", knob).upper()


def env_for(knobs: Mapping[str, Any]) -> dict[str, str]:
    return {env_name(k): format_value(v) for k, v in knobs.items()}
