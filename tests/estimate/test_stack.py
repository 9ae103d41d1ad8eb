"""``[estimate] torch`` and ``torchao``: an older release's defaults, through ``gpudoc estimate --json``."""

from __future__ import annotations

import json

import pytest

from gpudoc.commands.estimate import estimate_command
from gpudoc.errors import ProfileError
from gpudoc.estimate import terms
from gpudoc.estimate.stack import Stack, stack_of
from gpudoc.profiles.model import Profile
from tests.conftest import captured_workspace

# bert-large as a classifier in fp32, one micro batch per step: the Trainer of transformers 4.16 on
# PyTorch 1.10 (``Module.zero_grad()`` zeroing in place), or on a current release.
PROFILE = """
[train]
micro_batch_size = 4
max_seq_len = 512
precision = "fp32"
optimizer = "adamw"
loss = "classification"

[model]
arch = "encoder"
layers = 24
hidden = 1024
heads = 16
ffn = 4096
vocab = 30522
tied_embeddings = true
"""


def _estimate(tmp_path, release: str | None) -> dict:
    home = tmp_path / (release or "newest")
    home.mkdir()
    stack = f'\n[estimate]\ntorch = "{release}"\n' if release else ""
    (home / "gpudoc.toml").write_text(PROFILE + stack)
    ws = captured_workspace(home)
    assert estimate_command(ws, as_json=True, gpu_memory_gib=16.0) in (0, 1)
    return json.loads(ws.console.out.getvalue())


@pytest.mark.parametrize(("text", "release"), [("1.10", (1, 10)), ("2.1.0+cu121", (2, 1)), ("v1.13.1", (1, 13))])
def test_a_release_is_read_from_its_usual_spellings(text, release):
    assert stack_of(Profile(name="p", estimate={"torch": text}), []).torch == release


@pytest.mark.parametrize(("text", "release"), [("0.1", (0, 1)), ("0.1.0", (0, 1)), ("0.9.0+cu124", (0, 9))])
def test_a_torchao_release_is_read_beside_torchs(text, release):
    stack = stack_of(Profile(name="p", estimate={"torch": "2.2", "torchao": text}), [])
    assert (stack.torch, stack.torchao) == ((2, 2), release)


@pytest.mark.parametrize(("key", "library"), [("torch", "PyTorch"), ("torchao", "torchao")])
@pytest.mark.parametrize("value", [1.1, "latest", "2"])
def test_anything_else_is_one_line_naming_the_key(key, library, value):
    with pytest.raises(ProfileError, match=rf"\[estimate\] {key} = .*: expected a {library} release") as raised:
        stack_of(Profile(name="p", estimate={key: value}), [])
    assert raised.value.key == f"estimate.{key}"


def test_each_default_changes_at_its_own_release():
    assert (Stack((1, 10)).zero_grad_frees, Stack((1, 10)).optimizer_impl, Stack((1, 10)).lazy_module_loading) \
        == (False, "forloop", False)
    assert (Stack((1, 13)).zero_grad_frees, Stack((1, 13)).optimizer_impl, Stack((1, 13)).lazy_module_loading) \
        == (False, "forloop", True)
    assert (Stack((2, 0)).zero_grad_frees, Stack((2, 0)).optimizer_impl) == (True, "foreach")
    assert Stack().describe() == []


def test_torchao_quantizes_whole_weights_up_to_0_1_and_in_chunks_from_0_2():
    assert (Stack(torchao=(0, 1)).nf4_library, Stack(torchao=(0, 2)).nf4_library, Stack().nf4_library) \
        == ("torchao-0.1", "torchao", "torchao")
    assert Stack(torchao=(0, 1)).describe()[0].startswith("[estimate] torchao = 0.1: NF4 quantizes each frozen weight whole")


def test_before_2_0_the_gradients_stay_through_the_forward_and_the_context_loads_every_kernel(tmp_path):
    old, newest, current = (_estimate(tmp_path, release) for release in ("1.10", None, "2.4"))
    assert current["peak_bytes"] == newest["peak_bytes"] and current["context_bytes"] == newest["context_bytes"]
    params = newest["inputs"]["params"]
    # zero_grad zeroed in place: the steady state's forward and backward hold every fp32 gradient.
    assert old["breakdown"]["gradients"] == pytest.approx(4 * params) and newest["breakdown"]["gradients"] == 0
    assert old["phases"]["forward_backward"] - newest["phases"]["forward_backward"] == pytest.approx(4 * params)
    # The for-loop AdamW's step: one parameter's temporary (the embedding's), not the whole list's.
    step_temp = newest["phases"]["optimizer_step"] - old["phases"]["optimizer_step"]
    assert step_temp == pytest.approx(4 * (params - 30522 * 1024))
    assert old["context_bytes"] == Stack((1, 10)).context_bytes() == terms.cuda_context_bytes(lazy=False) \
        > newest["context_bytes"]
    said = [n for n in old["notes"] if n.startswith("[estimate] torch = 1.10:")]
    assert said and "set_to_none=False" in said[0] and "every kernel" in said[0]
    assert not any(n.startswith("[estimate] torch") for n in newest["notes"])


def test_the_for_loop_optimizer_steps_with_one_parameters_temporary():
    largest = 30522 * 1024  # the embedding
    assert terms.optimizer_step_temp_bytes("adamw", 3e8, 4.0, largest, impl="forloop") == largest * 4.0
    assert terms.optimizer_step_temp_bytes("adamw", 3e8, 4.0, largest) == 3e8 * 4.0
