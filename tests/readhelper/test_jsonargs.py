"""The reader helper's replay of jsonargparse's layers (in-process: these are its pure parts, with
no framework imported): the order ``--config`` files and flags apply in, a subclass's ``init_args``
merged across layers and dropped with another ``class_path``, ``--data.batch_size`` as
``--data.init_args.batch_size``, and the keys of a config given before the subcommand."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpudoc.readhelper import jsonargs


def _compose(tmp_path: Path, files: dict[str, str], args: list[str], sub: str | None = "fit"):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return jsonargs.compose(jsonargs.layers(args, str(tmp_path), sub))


def test_a_later_files_init_args_merge_into_the_class_an_earlier_file_names(tmp_path):
    composed, setters, written = _compose(tmp_path, {
        "a.yaml": "data:\n  class_path: pkg.Data\n  init_args:\n    batch_size: 8\n    workers: 2\n",
        "b.yaml": "data:\n  init_args:\n    batch_size: 16\n"}, ["fit", "--config", "a.yaml", "--config", "b.yaml"])
    assert composed["data"] == {"class_path": "pkg.Data", "init_args": {"batch_size": 16, "workers": 2}}
    assert setters["data.init_args.batch_size"] == [0, 1] and setters["data.init_args.workers"] == [0]
    assert written["data.init_args.batch_size"] == "data.init_args.batch_size"


def test_a_flag_without_init_args_sets_the_classs_init_args_and_a_new_class_drops_them(tmp_path):
    files = {"a.yaml": "model:\n  class_path: pkg.A\n  init_args:\n    lr: 0.1\n    depth: 4\n"}
    composed, setters, _ = _compose(tmp_path, files, ["fit", "--config", "a.yaml", "--model.lr=0.5"])
    assert composed["model"]["init_args"] == {"lr": 0.5, "depth": 4} and setters["model.init_args.lr"] == [0, 1]
    composed, setters, _ = _compose(tmp_path, files, ["fit", "--config", "a.yaml", "--model", "pkg.B", "--model.lr", "1"])
    assert composed["model"] == {"class_path": "pkg.B", "init_args": {"lr": 1}}  # A's depth is not B's
    assert "model.init_args.depth" not in setters


@pytest.mark.parametrize(("args", "winner"), [
    (["fit", "--config", "a.yaml", "--trainer.precision", "16-mixed"], "16-mixed"),
    (["fit", "--trainer.precision", "16-mixed", "--config", "a.yaml"], "bf16-mixed"),
])
def test_layers_apply_in_command_line_order(tmp_path, args, winner):
    composed, _, _ = _compose(tmp_path, {"a.yaml": "trainer:\n  precision: bf16-mixed\n"}, args)
    assert composed["trainer"]["precision"] == winner


def test_a_config_before_the_subcommand_holds_its_keys_under_the_subcommands_name(tmp_path):
    composed, _setters, written = _compose(tmp_path, {"top.yaml": "fit:\n  trainer:\n    accumulate_grad_batches: 3\n"},
                                          ["--config", "top.yaml", "fit"])
    assert composed == {"trainer": {"accumulate_grad_batches": 3}}
    assert written["trainer.accumulate_grad_batches"] == "fit.trainer.accumulate_grad_batches"


def test_a_config_that_is_neither_a_file_nor_a_mapping_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="--config missing.yaml: no such file"):
        jsonargs.layers(["fit", "--config", "missing.yaml"], str(tmp_path), "fit")
