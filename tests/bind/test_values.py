"""Env spelling of knob values (documented in gpudoc.bind.values)."""

from gpudoc.bind.values import env_for, env_name, is_neutral


def test_env_spelling():
    assert env_for({"gradient_checkpointing": True, "offload_params": False, "micro_batch_size": 4,
                    "lr": 1e-05, "ratio": 2.0, "precision": "bf16", "n-neg": 3}) == {
        "GPUDOC_GRADIENT_CHECKPOINTING": "true", "GPUDOC_OFFLOAD_PARAMS": "false", "GPUDOC_MICRO_BATCH_SIZE": "4",
        "GPUDOC_LR": "1e-05", "GPUDOC_RATIO": "2.0", "GPUDOC_PRECISION": "bf16", "GPUDOC_N_NEG": "3"}
    assert env_name("max_seq_len") == "GPUDOC_MAX_SEQ_LEN"


def test_neutral_values_need_no_flag():
    assert is_neutral("zero_stage", 0) and is_neutral("gradient_checkpointing", False)
    assert not is_neutral("zero_stage", False) and not is_neutral("gradient_checkpointing", "selective")
    assert not is_neutral("lora_rank", 8)
