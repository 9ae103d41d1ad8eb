"""What one step cost, read from the probe's events and from the frameworks' own progress lines
(each verbatim line below is quoted from where it was printed; the source is named beside it)."""

from __future__ import annotations

import pytest

from gpudoc.runs.steps import (
    SERIES_POINTS,
    from_log,
    from_log_text,
    from_probe,
    remaining,
    step_figures,
)

# The end of an HF Trainer run of 10000 steps, as a public project's README quotes it (transformers 4.x:
# numbers printed as numbers; the eval line comes between the last loss and the closing metrics).
HF_END = """\
{'loss': 0.3818, 'grad_norm': 0.1455276608467102, 'learning_rate': 0.0, 'epoch': 1.0, 'step': 10000}                                                         
{'eval_loss': 0.3461727797985077, 'eval_runtime': 9.144, 'eval_samples_per_second': 10.936, 'eval_steps_per_second': 1.422, 'epoch': 1.0, 'step': 10000}     
{'train_runtime': 8754.1218, 'train_samples_per_second': 36.554, 'train_steps_per_second': 1.142, 'train_loss': 2.159679998397827, 'epoch': 1.0, 'step': 10000}
100%|████████████████████████████████████████████████████████████████████████████████████████████████████████████████| 10000/10000 [2:25:52<00:00,  1.04it/s]
"""  # noqa: W291 - the Trainer pads its lines with blanks as printed

# transformers 5 prints each float as a string (ProgressCallback.on_log: f"{v:.4g}"), as a TRL SFT run
# quoted in a public tutorial shows; this run printed no steps-per-second figure.
HF5_END = """\
{'loss': '1.764', 'grad_norm': '2.609', 'learning_rate': '6.667e-05', 'mean_token_accuracy': '0.7419', 'epoch': '3'}
{'train_runtime': '36.27', 'train_samples_per_second': '0.414', 'train_loss': '2.46', 'epoch': '3'}
"""

# Lightning's TQDMProgressBar, verbatim from Lightning-AI/pytorch-lightning issue #4225 (seconds per
# batch: the rate above one second is printed as s/it); the bar counts batches, not optimizer steps.
LIGHTNING = """\
Training: 0it [00:00, ?it/s]
Training:   0%|          | 0/18 [00:00<?, ?it/s]
Epoch 0:   0%|          | 0/18 [00:00<?, ?it/s] 
Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it]
Epoch 0:   6%|▌         | 1/18 [00:08<02:29,  8.77s/it, loss=10.473, v_num=193315]
Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.473, v_num=193315]
Epoch 0:  11%|█         | 2/18 [00:11<01:33,  5.82s/it, loss=10.224, v_num=193315]
Epoch 0:  17%|█▋        | 3/18 [00:14<01:13,  4.87s/it, loss=10.224, v_num=193315]
Epoch 0:  17%|█▋        | 3/18 [00:14<01:13,  4.87s/it, loss=10.047, v_num=193315]
Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=10.047, v_num=193315]
Epoch 0:  22%|██▏       | 4/18 [00:17<01:02,  4.47s/it, loss=9.926, v_num=193315] 
Epoch 0:  28%|██▊       | 5/18 [00:20<00:53,  4.14s/it, loss=9.926, v_num=193315]
Epoch 0:  28%|██▊       | 5/18 [00:20<00:53,  4.14s/it, loss=9.847, v_num=193315]
"""  # noqa: W291

# Lightning's bar where the terminal draws no bar characters (Colab), verbatim from
# Lightning-AI/pytorch-lightning issue #3866; a validation bar after it has a name of its own.
LIGHTNING_PLAIN = """\
Epoch 1:  93% 1586/1702 [12:50<00:56,  2.06it/s, loss=0.158, v_num=0, train_loss=0.149]
Epoch 1:  93% 1587/1702 [12:50<00:55,  2.06it/s, loss=0.158, v_num=0, train_loss=0.149]
Validation DataLoader 0:  50%|█████     | 2/4 [00:00<00:00, 80.00it/s]
"""


def test_the_hf_trainers_closing_metrics_give_the_step_time_and_its_bar_the_total():
    steps = from_log_text(HF_END)
    assert steps is not None
    assert steps["seconds_per_step"] == pytest.approx(1 / 1.142)  # the Trainer's own, over the whole run
    assert steps["samples_per_second"] == 36.554
    assert (steps["count"], steps["total"], steps["unit"], steps["source"]) == (10000, 10000, "step", "log:hf-trainer")


def test_transformers_5_prints_its_figures_as_strings_and_they_are_still_read():
    steps = from_log_text(HF5_END)
    assert steps is not None and steps["samples_per_second"] == pytest.approx(0.414)
    assert steps["source"] == "log:hf-trainer" and steps["seconds_per_step"] is None  # no figure, none invented


def test_lightnings_bar_gives_seconds_per_batch_from_its_later_updates():
    steps = from_log_text(LIGHTNING)
    assert steps is not None
    # The first batch's rate holds the start-up; of the updates after it, the later half (4.47, 4.47,
    # 4.14, 4.14 s): tqdm's rate is a running average that settles as the run goes on.
    assert steps["seconds_per_step"] == pytest.approx((4.47 + 4.14) / 2)
    assert (steps["count"], steps["unit"], steps["source"], steps["total"]) == (5, "batch", "log:lightning", None)
    assert [p["step"] for p in steps["series"]] == [2, 2, 3, 3, 4, 4, 5, 5]


def test_a_bar_without_bar_characters_counts_and_a_named_bar_is_not_the_training_loops():
    steps = from_log_text(LIGHTNING_PLAIN)
    assert steps is not None
    assert steps["count"] == 1702 + 1587  # epoch 1: the batches of epoch 0 before it
    assert steps["seconds_per_step"] == pytest.approx(1 / 2.06)


def test_the_trainers_tokens_per_second_is_taken_when_it_counted_them():
    # With include_tokens_per_second, as a public project's log parser quotes the Trainer's line.
    line = ("{'train_runtime': 1.5203, 'train_samples_per_second': 6.578, 'train_steps_per_second': 0.658, "
            "'train_tokens_per_second': 306.518, 'train_loss': 4.817451000213623, 'epoch': 1.0}")
    steps = from_log_text(line)
    assert steps is not None and steps["tokens_per_second"] == 306.518
    assert steps["count"] == round(1.5203 * 0.658)  # no bar, no step key: the runtime at its rate


def test_a_log_with_no_progress_lines_says_nothing():
    assert from_log_text("iter 0: loss 4.1\nstep 1 done\n") is None


def test_a_long_run_keeps_a_bounded_series_with_its_peaks():
    events = [{"n": n, "seconds": 0.5 if n != 5000 else 9.0, "peak_allocated": n, "peak_reserved": 2 * n}
              for n in range(1, 10_001)]
    steps = from_probe(events, {"micro_batch_size": {"value": 4}}, total=20_000)
    assert steps is not None and len(steps["series"]) <= SERIES_POINTS
    assert steps["series"][-1] == {"step": 10_000, "seconds": 0.5, "peak_allocated_bytes": 10_000,
                                   "peak_reserved_bytes": 20_000}
    assert steps["peak_reserved_bytes"] == 20_000 and steps["samples_per_second"] == 8
    assert remaining(steps) == (10_000, 5000.0, 10_000.0)


def test_the_probes_figures_win_and_the_log_fills_the_total(tmp_path):
    log = tmp_path / "output.log"
    log.write_text(" 30%|███       | 3/10 [00:01<00:03,  2.15it/s]\n")
    probed = {"count": 3, "seconds_per_step": 0.4, "total": None, "unit": "step", "source": "probe"}
    assert step_figures(probed, log) == {**probed, "total": 10}
    assert step_figures(None, log)["source"] == "log:tqdm"
    assert from_log(tmp_path / "missing.log") is None
