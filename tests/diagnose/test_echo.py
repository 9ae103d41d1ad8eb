"""Reading the settings a job printed: the frameworks' own banners, as they print them."""

from __future__ import annotations

from gpudoc.diagnose.echo import settings_seen

# transformers 5.24's Trainer banner (logged at info), as a run under torchrun tees it.
HF_BANNER = """\
[transformers] ***** Running training *****
[transformers]   Num examples = 256
[transformers]   Instantaneous batch size per device = 4
[transformers]   Total train batch size (w. parallel, distributed & accumulation) = 32
[transformers]   Gradient Accumulation steps = 4
[transformers]   Total optimization steps = 1
"""


def test_the_hf_trainer_banner():
    assert settings_seen(HF_BANNER) == {"micro_batch_size": [4], "gradient_accumulation_steps": [4]}


def test_lightning_precision_and_a_torchtune_config_dump():
    text = ("Using bf16 Automatic Mixed Precision (AMP)\n"
            "INFO:torchtune.utils._logging:Running LoRAFinetuneRecipeSingleDevice with resolved config:\n"
            "batch_size: 2\ngradient_accumulation_steps: 8\nenable_activation_checkpointing: true\n"
            "tokenizer:\n  max_seq_len: null\n")
    assert settings_seen(text) == {"precision": ["bf16"], "micro_batch_size": [2], "gradient_accumulation_steps": [8],
                                   "gradient_checkpointing": [True]}
    assert settings_seen("Using 16bit Automatic Mixed Precision (AMP)\n") == {"precision": ["fp16"]}


def test_nanogpt_overrides_and_a_scripts_own_echo_from_every_rank():
    text = ("Overriding: batch_size = 6\nOverriding: gradient_accumulation_steps = 40\n"
            "knobs: micro_batch_size=8 gradient_accumulation_steps=2 gradient_checkpointing=false\n"
            "knobs: micro_batch_size=8 gradient_accumulation_steps=2 gradient_checkpointing=false\n")
    seen = settings_seen(text)
    assert seen["micro_batch_size"] == [6, 8, 8]
    assert seen["gradient_accumulation_steps"] == [40, 2, 2]
    assert seen["gradient_checkpointing"] == [False, False]


def test_other_batches_and_sizes_are_not_the_micro_batch():
    text = ("per_device_eval_batch_size=16\neval_batch_size: 16\n"
            "Total train batch size (w. parallel, distributed & accumulation) = 32\n"
            "global_batch=450 batch sizes vary\nloss 3.91\n")
    assert settings_seen(text) == {}
