"""The training step, simulated: forward, backward and ``optimizer.step()``, twice (the first step,
before the optimizer's states exist, and the steady state), under the tracker and the emulations."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves

from .build import Job, Unsupported, optimizer
from .emulate import Emulation
from .tracker import LiveBytes, Window, classify
from .zero import ZeroRank
from .zero3 import Zero3Rank


def _loss(out: Any) -> Any:
    """The scalar the job calls backward() on: ``out.loss`` (transformers), the output itself when it
    is a scalar, else the sum of the first tensor (a stand-in with the same graph)."""
    loss = getattr(out, "loss", None)
    if loss is None and isinstance(out, dict):
        loss = out.get("loss")
    if loss is None:
        first = next((t for t in tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad), None)
        if first is None:
            raise Unsupported("the model's output has no loss and no tensor that needs a gradient")
        loss = first if first.dim() == 0 else first.sum()
    return loss


def _forward(model: Any, batch: Any) -> Any:
    if isinstance(batch, dict):
        return model(**batch)
    if isinstance(batch, (tuple, list)):
        return model(*batch)
    return model(batch)


class Simulation:
    """One model, its optimizer and the counters, for one or more micro batch sizes."""

    def __init__(self, spec: dict, job: Job, emulation: Emulation, tracker: LiveBytes) -> None:
        self.spec, self.job, self.emulation, self.tracker = spec, job, emulation, tracker
        self.params = [p for p in job.model.parameters() if p.requires_grad]
        if not self.params:
            raise Unsupported("no parameter of the model requires a gradient: nothing trains")
        # DeepSpeed ZeRO-1/2: the optimizer steps this rank's fp32 share (``zero``), not the parameters.
        # ZeRO-3: its gather and release order, the optimizer on the host or on the GPU (``zero3``).
        zero = spec.get("zero") or {}
        make = lambda group: optimizer(spec, group)  # noqa: E731
        self.zero: Any = (Zero3Rank(zero, job.model, self.params, tracker, make) if int(zero.get("stage", 0)) == 3
                          else ZeroRank(zero, self.params, make)) if zero else None
        self.optimizer, self.impl = (self.zero.optimizer, self.zero.impl) if self.zero else optimizer(spec, self.params)
        self.accumulation = max(1, min(2, int(spec.get("gradient_accumulation_steps") or 1)))
        # ``zero_grad()`` frees the gradients since PyTorch 2.0; before, it zeroed them in place and they
        # stayed allocated through the next step (the job's release, which may not be this interpreter's).
        self.frees_gradients = bool(spec.get("zero_grad_frees", True))
        # The job's own cross-entropy on the model's logits: upcast first (torchtune's ``fp32_logits``)
        # or on the logits as they come (``half_logits``: LitGPT's and nanoGPT's, ``loss_upcast = false``).
        self.own_loss = spec.get("loss") if spec.get("loss") in ("fp32_logits", "half_logits") else None
        self.weights: set[int] = set()
        for tensor in (*job.model.parameters(), *job.model.buffers()):
            serial = tracker.track(tensor)
            if serial is not None:
                self.weights.add(serial)
        self.states: set[int] = set()
        for master in self.zero.masters if self.zero is not None else ():
            self.states.add(tracker.serial_of(master) or 0)  # the fp32 master share
        self.trainable_bytes = sum(-(-p.untyped_storage().nbytes() // 512) * 512 for p in self.params)

    def _batch(self, size: int) -> Any:
        with _disable_current_modes():  # a factory may build a whole model to make its batch
            batch = self.job.make_batch(size)
        for leaf in tree_leaves(batch):
            self.tracker.track(leaf)
        return batch

    def step(self, size: int) -> dict:
        """One optimizer step at micro batch ``size`` (two micro batches under accumulation, so that
        the gradients of the first are live through the second): its peak and what made it up."""
        window, gradients = self._step(size)
        weights = self.weights | getattr(self.zero, "gathered", set())
        return _describe(window, classify(window, weights=weights, gradients=gradients, states=self.states))

    def _step(self, size: int, *, keep_gradients: bool = False) -> tuple[Window, set[int]]:
        tracker, emulation = self.tracker, self.emulation
        gradients: set[int] = set()
        tracker.begin()
        for micro in range(self.accumulation):
            batch = self._batch(size)
            tracker.stage = "forward"
            emulation.forward_begins()
            labels = batch.pop("labels", None) if self.own_loss and isinstance(batch, dict) else None
            out = _forward(self.job.model, batch)
            if labels is not None:
                # torchtune's decoder returns its logits upcast (``self.output(h).float()``) to torch's
                # CrossEntropyLoss: the fp32 copy, not the half-precision output, lives through backward.
                # Without the upcast, the cross-entropy works in the logits' own dtype.
                out = out.logits.float() if self.own_loss == "fp32_logits" else out.logits
                loss = F.cross_entropy(out.flatten(0, -2), labels.flatten())
            else:
                loss = _loss(out)
            emulation.forward_ends()
            tracker.stage = "backward"
            # The outputs stay referenced through backward, as in `out = model(**batch);
            # out.loss.backward()`: the logits are live at the backward's peak.
            loss.backward()
            del out, loss, batch
            if self.zero is not None:
                held = self.zero.gradient_storages()
                self.zero.backward_ends(boundary=micro == self.accumulation - 1)
                gradients |= {s for s in map(tracker.serial_of, held + self.zero.gradient_storages()) if s}
                del held  # the buckets go now, the share at the step
            gradients |= {s for s in (tracker.serial_of(p.grad) for p in self.params) if s is not None}
        emulation.step_ends()
        tracker.stage = "optimizer"
        if self.zero is not None:
            self.zero.step(self._run_optimizer, lambda grad: gradients.add(tracker.track(grad) or 0))
        else:
            self._run_optimizer()
        if not keep_gradients:
            self.optimizer.zero_grad(set_to_none=self.frees_gradients)
        tracker.stage = "setup"
        return tracker.end(), gradients

    def _run_optimizer(self) -> None:
        """``optimizer.step()``; a fused one's temporaries never exist on CUDA (counted at zero), its
        new states do (recounted)."""
        fused = self.impl == "fused"
        self.tracker.counting = not fused
        self.optimizer.step()
        self.tracker.counting = True
        for state in self.optimizer.state.values():
            for value in state.values():
                if isinstance(value, torch.Tensor) and value.device.type == "meta":
                    if fused:
                        self.tracker.recount(value)
                    serial = self.tracker.serial_of(value)
                    if serial is not None:
                        self.states.add(serial)

    def first_and_steady(self, size: int) -> tuple[dict, dict]:
        """The first step and the steady state at micro batch ``size``, with one forward and backward.
        The steady state's forward and backward allocate what the first step's did, with the
        optimizer's states live throughout: its peaks there are the first step's plus the states.
        Its optimizer step is run again on the same gradients, the states existing (DeepSpeed's
        ZeRO re-flattens its gradients in backward, so it steps twice in full)."""
        if self.zero is not None:
            return self.step(size), self.step(size)
        tracker = self.tracker
        first, gradients = self._step(size, keep_gradients=True)
        if not self.frees_gradients:
            # The gradients stay through the next step: the steady state is a second step, simulated.
            self.optimizer.zero_grad(set_to_none=False)
            steady, more = self._step(size)
            return (_describe(first, classify(first, weights=self.weights, gradients=gradients, states=self.states)),
                    _describe(steady, classify(steady, weights=self.weights, gradients=gradients | more,
                                               states=self.states)))
        states = tuple((serial, nbytes, "optimizer") for serial, nbytes in tracker.bytes_of(self.states).items())
        extra = sum(nbytes for _serial, nbytes, _stage in states)
        tracker.stage = "optimizer"
        tracker.begin()
        self._run_optimizer()
        self.optimizer.zero_grad(set_to_none=True)
        tracker.stage = "setup"
        again = tracker.end()
        steady = Window(start_bytes=tracker.live, peak_bytes=again.peak_bytes, peak_stage="optimizer",
                        live_at_peak=again.live_at_peak,
                        stage_peaks={"optimizer": again.stage_peaks.get("optimizer", again.start_bytes)})
        for stage in ("setup", "forward", "backward"):
            if stage not in first.stage_peaks:
                continue
            steady.stage_peaks[stage] = first.stage_peaks[stage] + extra
            if steady.stage_peaks[stage] > steady.peak_bytes:
                steady.peak_bytes, steady.peak_stage = steady.stage_peaks[stage], stage
                steady.live_at_peak = first.live_at_stage_peak.get(stage, ()) + states
        return (_describe(first, classify(first, weights=self.weights, gradients=gradients, states=self.states)),
                _describe(steady, classify(steady, weights=self.weights, gradients=gradients, states=self.states)))

    def run(self, sizes: list[int]) -> list[dict]:
        """The first size gets a first step and a steady-state step; the others one step each
        (the optimizer's states exist by then: steady state)."""
        runs = []
        for index, size in enumerate(sizes):
            entry: dict[str, Any] = {"micro_batch_size": size}
            if index == 0:
                entry["first_step"], entry["steady_state"] = self.first_and_steady(size)
            else:
                entry["steady_state"] = self.step(size)
            runs.append(entry)
        return runs


def _describe(window: Window, breakdown: dict[str, int]) -> dict:
    return {"peak_bytes": window.peak_bytes, "stage": window.peak_stage, "breakdown": breakdown,
            "start_bytes": window.start_bytes, "stage_peaks": dict(window.stage_peaks)}
