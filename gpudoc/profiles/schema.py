"""What a profile may contain: tables, keys and their types.

``[train]`` also takes custom knobs (numbers, booleans, strings) for user rungs and bindings, and
``[env]`` takes any variable; everywhere else an unknown key is an error with a did-you-mean.
"""

from __future__ import annotations

NUMBER = (int, float)
STR = (str,)
BOOL = (bool,)
INT = (int,)

TOP_LEVEL = {
    "description": STR,
    "extends": STR,
}

TABLES: dict[str, dict[str, tuple]] = {
    "gpu": {
        "count": INT,
        "min_free_gib": NUMBER,
        "memory_gib": NUMBER,  # the card's capacity, for estimate when no GPU is visible
        "name": STR,
    },
    "train": {
        "micro_batch_size": INT,
        "gradient_accumulation_steps": INT,
        "global_batch_size": INT,
        "max_seq_len": INT,
        "gradient_checkpointing": (bool, str),  # true | false | "selective"
        "precision": STR,
        "zero_stage": INT,
        "offload_optimizer": BOOL,
        "offload_params": BOOL,
        "optimizer": STR,
        "lora_rank": INT,
        "quantization": STR,
        "attention": STR,
        "fsdp": BOOL,
        "max_target_len": INT,  # encoder-decoder: decoder tokens per sample (default max_seq_len)
        "lora_targets": (list,),  # the modules LoRA adapts (q_proj, v_proj, ...; default: peft's for the family)
    },
    "launch": {
        "nproc_per_node": INT,
        "nnodes": INT,
        # Parallel layouts (default 1): world size = data parallel x tensor x pipeline x context.
        "tensor_parallel": INT,
        "pipeline_parallel": INT,
        "context_parallel": INT,
    },
    "model": {
        "hf_config": STR,
        "factory": STR,  # "package.module:function" returning (model, batch), for the simulation
        "arch": STR,
        "params": NUMBER,
        "layers": INT,
        "hidden": INT,
        "heads": INT,
        "kv_heads": INT,
        "head_dim": INT,  # when heads x head_dim is not hidden (Gemma, Qwen3)
        "ffn": INT,
        "vocab": INT,
        "tied_embeddings": BOOL,
        "lora_targets": (list,),  # its older place: the loader moves it to [train]
        "encoder_layers": INT,
        "decoder_layers": INT,
    },
    "estimate": {
        "simulate": BOOL,  # check, the run gate and fix simulate the training step (estimate --simulate)
        "timeout_s": NUMBER,  # the simulation's time limit
        "torch": STR,  # the PyTorch release the job runs on, when older than the newest defaults ("1.10")
        "torchao": STR,  # the torchao release that quantizes the job's NF4 weights at load ("0.1")
    },
    "bind": {
        "env": BOOL,
        "args": STR,
        "args_knobs": (list,),  # the knobs the argument preset carries (default: all; the rest live in files)
        "files": (dict,),
        "via_env": (list,),  # knobs the job reads from GPUDOC_<KNOB> itself, beside the presets
        "overrides": (dict,),  # knob = "dotted.key" (or {key, map}): a Hydra-style key=value on the command line
        "flags": (dict,),  # knob = "--flag": a flag the job's own parser declares (the probe saw it)
    },
    "ladder": {
        "allow_semantic": BOOL,
        "target_utilization": NUMBER,
        "rung": (list,),
    },
    "runs": {
        "keep": INT,  # run records kept after each run (the oldest beyond are removed)
    },
    "run": {
        "clean": BOOL,
        "sample_interval_s": NUMBER,
        "oom_grace_s": NUMBER,
        "shared": BOOL,  # run records readable by the group (a team's shared GPUDOC_HOME)
        "notify": STR,  # a command run (sh -c) after each run, told about it in GPUDOC_RUN_* variables
        "bell_after_s": NUMBER,  # runs at least this long end with a bell and a desktop notification
        "notify_after_s": NUMBER,  # the older spelling of bell_after_s (the loader renames it)
        "tmux_keep": STR,  # --tmux: keep the window after the run: failure (default) | always | never
        "resume": BOOL,  # --retry-oom / fix --rerun resume from the newest complete checkpoint (default true)
        "probe": BOOL,  # observe the job from inside (default true; run --no-probe for one run)
        "snapshot": STR,  # "on-oom": PyTorch's memory history, dumped at an OOM (default: relaunches only)
    },
}

# Bounds of numeric keys (inclusive): wide enough for any real machine and model, narrow enough
# that no estimate or rung turns a typo (1e300, a pasted byte count) into nonsense or a crash.
# Every number anywhere in a profile must be finite besides.
RANGES: dict[tuple[str, str], tuple[float, float]] = {
    ("gpu", "count"): (1, 1024),
    ("gpu", "min_free_gib"): (0, 4096),
    ("gpu", "memory_gib"): (0.001, 4096),
    ("train", "micro_batch_size"): (1, 10**6),
    ("train", "gradient_accumulation_steps"): (1, 10**6),
    ("train", "global_batch_size"): (1, 10**9),
    ("train", "max_seq_len"): (1, 10**8),
    ("train", "lora_rank"): (0, 65536),  # 0 = full fine-tune (no LoRA adapters)
    ("launch", "nproc_per_node"): (1, 1024),
    ("launch", "nnodes"): (1, 10**5),
    ("launch", "tensor_parallel"): (1, 1024),
    ("launch", "pipeline_parallel"): (1, 1024),
    ("launch", "context_parallel"): (1, 1024),
    ("train", "max_target_len"): (1, 10**8),
    ("model", "params"): (1, 1e14),
    ("model", "layers"): (1, 10**4),
    ("model", "hidden"): (1, 10**6),
    ("model", "heads"): (1, 10**5),
    ("model", "kv_heads"): (1, 10**5),
    ("model", "head_dim"): (1, 10**5),
    ("model", "ffn"): (1, 10**7),
    ("model", "vocab"): (1, 10**8),
    ("model", "encoder_layers"): (0, 10**4),
    ("model", "decoder_layers"): (0, 10**4),
    ("runs", "keep"): (1, 10**6),
    ("estimate", "timeout_s"): (1, 86400),
    ("run", "sample_interval_s"): (0.05, 3600),
    ("run", "oom_grace_s"): (-1, 3600),
    ("run", "bell_after_s"): (0, 10**7),
    ("run", "notify_after_s"): (0, 10**7),
}

# Tables whose keys are free-form (values still typed).
OPEN_TABLES = {"env", "train"}

ENUMS = {
    ("train", "precision"): ("fp32", "fp16", "bf16", "bf16-true", "fp16-true"),
    ("train", "optimizer"): ("adamw", "adam", "adamw_8bit", "adafactor", "sgd", "lion"),
    ("train", "quantization"): ("none", "nf4", "int8", "int4"),
    ("train", "attention"): ("sdpa", "flash", "eager"),
    ("model", "arch"): ("decoder", "encoder", "encoder-decoder", "state-space"),
    ("run", "tmux_keep"): ("failure", "always", "never"),
    ("run", "snapshot"): ("off", "on-oom"),
}

USER_RUNG_KEYS = {
    "name": STR,
    "knob": STR,
    "op": STR,  # halve | decrement | set
    "value": (int, float, str, bool),
    "semantic": BOOL,
    "min": NUMBER,
    "saving_fraction": NUMBER,  # optional hint: share of activation memory this rung frees
}
USER_RUNG_OPS = ("halve", "decrement", "set")
