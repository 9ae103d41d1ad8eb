"""The probe inside the job: what each rank really trains with, per step, and what filled the memory
at an OOM. Loaded by file path from ``site/sitecustomize.py`` in the job's interpreter (never imported
by gpudoc); gpudoc reads what it writes with ``gpudoc.runs.probe``.

It arms once the job imports torch (it never imports torch itself) through hooks torch provides —
the top module's forward pre-hook, a hook on its output for the start of backward, one trainable
parameter's post-accumulate-grad hook for backward passes, the global optimizer step hooks — and
``sys.excepthook`` for an OOM that ends the job. No wrapper: no frame is added to any traceback the
job prints. It holds weak references to the model and optimizers, never an exception or a frame.
Only a process that trains writes (an optimizer step or an OOM in it): launchers, DataLoader
workers and compile workers stay silent. Every hook is guarded and switches itself off after an
error; the file is capped, with a last line saying so.

Events, one JSON object a line in ``$GPUDOC_PROBE_DIR/rank-N.jsonl``:
``start`` (pid, rank), ``parser`` (the flags a parser of the job declares, and its values: argparse's, or the keys a nanoGPT-style
configurator takes), ``model`` (parameters, trainable, dtype), ``input`` (shape of the top module's
first input), ``step`` (n, seconds, backward passes, autocast dtype, world size, optimizer, peaks),
``config-file`` (a config file the job read, and its values), ``framework`` (the settings a framework
resolved: the HF Trainer's arguments, the Lightning Trainer's, a DeepSpeed engine's, the config
OmegaConf holds for Hydra or torchtune, Hydra's choices and overrides), ``oom`` (phase, step,
breakdown), ``error`` (a hook that failed), ``truncated``.
"""

from __future__ import annotations

import os
import sys
import time
import weakref

# Annotations only: a job that never trains must not pay for importing typing (or json, imported
# when the first event is written) at every start-up.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

CAP_BYTES = 4 * 2**20
# What the HF Trainer's arguments say of the knobs (read after its own __post_init__).
_HF_SETTINGS = ("per_device_train_batch_size", "gradient_accumulation_steps", "world_size", "bf16", "fp16",
                "gradient_checkpointing", "optim", "max_steps", "deepspeed")
_COMPILE_WARNS = r"Using `torch\.compile\(module\)` when there are global hooks"


class _Probe:
    def __init__(self, directory: str, settings: Any) -> None:
        self.directory = directory
        self.settings = settings  # the sibling settings.py: parsers, config files, frameworks' settings
        self.files = settings.ConfigFiles()
        self.pid = os.getpid()
        self.rank = _int(os.environ.get("RANK")) or 0
        self.file: Any = None
        self.written = 0
        self.closed = False
        self.broken: set[str] = set()
        self.torch: Any = None
        self.model: Any = None  # weakref to the top module
        self.optimizers: list[Any] = []  # weakrefs
        self.phase = "data"
        self.steps = 0
        self.backward = 0
        self.backward_at_step = 0
        self.last_step_at: float | None = None
        self.input_seen = False
        self.autocast: str | None = None  # the autocast dtype of the first forward, or "off"
        self.inside: list[Any] = []  # one-shot hooks on the top module's children, reading autocast within
        self.ts: Any = None  # torchstate.py, once torch is imported
        self.history: Any = None  # PyTorch's memory history, with [run] snapshot = "on-oom" (snapshot.py)
        self.oom_at: int | None = None  # the step of the OOM recorded
        # A backward or optimizer step begun and not (yet) completed: one that never completes was left
        # by an error, which a framework may have caught itself (Hydra prints it and exits).
        self.unfinished: str | None = None
        # The parsers the job used, kept in memory until this process writes for training: a launcher
        # (torchrun parses its own arguments) must never create a rank's file.
        self.parsers: list[tuple[dict, Any]] = []  # (what the parser declares, weakref to its namespace)
        self.stop_after = _int(os.environ.get("GPUDOC_PROBE_STOP_AFTER"))

    # -- writing -----------------------------------------------------------------------------

    def write(self, event: str, **fields: Any) -> None:
        if self.closed or os.getpid() != self.pid:
            return
        try:
            if self.file is None:
                os.makedirs(self.directory, mode=0o700, exist_ok=True)
                flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
                self.file = os.fdopen(os.open(os.path.join(self.directory, f"rank-{self.rank}.jsonl"), flags, 0o600),
                                      "a", encoding="utf-8")
                self._line({"event": "start", "pid": self.pid, "rank": self.rank, "t": time.time()})
                for declared, namespace in self.parsers:
                    self._line({"event": "parser", **declared, "values": self.settings.parsed_values(namespace())})
                configurator = self.settings.configurator(self.files)
                if configurator is not None:
                    self._line({"event": "parser", **configurator})
                for opened in self.files.read():
                    self._line({"event": "config-file", **opened})
            self._line({"event": event, "t": time.time(), **fields})
        except Exception:
            self.closed = True  # a read-only or full run directory: the job goes on unobserved

    def _line(self, doc: dict) -> None:
        import json

        text = json.dumps(doc, default=str) + "\n"
        if self.written + len(text) > CAP_BYTES:
            self.file.write(json.dumps({"event": "truncated", "at_bytes": self.written}) + "\n")
            self.file.flush()
            self.closed = True
            return
        self.file.write(text)
        self.file.flush()
        self.written += len(text)

    def guarded(self, name: str, fn: Any) -> Any:
        """``fn`` as a hook that never raises into the job and goes quiet after its first error."""
        def hook(*args: Any, **kwargs: Any) -> Any:
            if name in self.broken or os.getpid() != self.pid:
                return None
            try:
                return fn(*args, **kwargs)
            except Exception as exc:
                self.broken.add(name)
                self.write("error", hook=name, error=f"{type(exc).__name__}: {exc}"[:300])
                return None
        return hook

    # -- what the framework resolved ------------------------------------------------------------

    def observe_hf_trainer(self, trainer_module: Any) -> None:
        """The HF Trainer's arguments as it trains with them (its own defaults and a subclass's
        adjustments in, TRL's configs included): a callback among the Trainer's defaults hears
        ``on_train_begin``, before the first micro batch that may not fit."""
        from transformers.trainer_callback import TrainerCallback

        probe = self

        class GpudocProbe(TrainerCallback):
            def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
                probe.guarded("hf-trainer", probe._hf_arguments)(args, state)

        trainer_module.DEFAULT_CALLBACKS.append(GpudocProbe)

    def _hf_arguments(self, args: Any, state: Any) -> None:
        # state.max_steps: the optimizer steps the Trainer will run (epochs x steps per epoch already
        # multiplied out), known at on_train_begin.
        self.write("framework", name="hf-trainer", type=type(args).__name__,
                   settings={**{key: getattr(args, key, None) for key in _HF_SETTINGS},
                             "total_steps": getattr(state, "max_steps", None)})

    # -- arming ------------------------------------------------------------------------------

    def arm(self, torch: Any) -> None:
        if self.torch is not None or os.getpid() != self.pid:
            return
        self.torch, self.ts = torch, _sibling("torchstate")
        import torch.nn.modules.module as modules
        import torch.optim.optimizer as optimizer  # the attribute path fails on torch 2.13

        self._global = modules.register_module_forward_pre_hook(self.guarded("top", self._find_top))
        # torch.compile(module) warns while any global module hook exists: the probe's own, until the
        # first forward finds the top module, must not reach the job's stderr (that warning alone, that long).
        import warnings

        warnings.filterwarnings("ignore", message=_COMPILE_WARNS, category=UserWarning)
        self._quiet = warnings.filters[0]
        optimizer.register_optimizer_step_pre_hook(self.guarded("step-pre", self._step_begins))
        optimizer.register_optimizer_step_post_hook(self.guarded("step-post", self._step_ends))
        import atexit
        import gc

        atexit.register(self.guarded("exit", self._left))
        gc.callbacks.append(self.guarded("recovery", self._collecting))

    def _find_top(self, module: Any, args: Any) -> None:
        # The first module called is the outermost one: found, the global hook goes (torch.compile
        # warns while any global module hook exists) and per-module hooks take over.
        self._global.remove()
        _unfilter(self._quiet)
        self.model = weakref.ref(module)
        if os.environ.get("GPUDOC_PROBE_SNAPSHOT") == "on-oom":  # armed in a process that trains, once
            self.history = _sibling("snapshot").History(self.torch, _int(os.environ.get("GPUDOC_PROBE_SNAPSHOT_UNTIL")))
            self.history.arm()
        module.register_forward_pre_hook(self.guarded("forward", self._forward_begins), with_kwargs=True)
        # always_call: torch calls it as an error leaves the forward too, where a framework that
        # catches the OOM itself (Hydra prints it and exits) would hide it from sys.excepthook.
        module.register_forward_hook(self.guarded("output", self._forward_ends), always_call=True)
        params = list(module.parameters())
        trainable = [p for p in params if p.requires_grad]
        if trainable and hasattr(trainable[-1], "register_post_accumulate_grad_hook"):
            trainable[-1].register_post_accumulate_grad_hook(self.guarded("grad", self._backward_done))
        dtypes = sorted({str(p.dtype).replace("torch.", "") for p in params})
        self.write("model", parameters=sum(p.numel() for p in params), trainable=sum(p.numel() for p in trainable),
                   dtypes=dtypes)
        # This call's own pre-hook was registered too late to fire: its keyword inputs (HF's
        # ``model(**batch)``) are read from the calling frame of torch's module call.
        self._forward_begins(module, args, _call_kwargs())

    def _forward_begins(self, module: Any, args: Any, kwargs: Any) -> None:
        self._left()  # a new forward: the last backward or step, if unfinished, was abandoned
        self.phase = "forward"
        if self.input_seen:
            return
        self.oom_at = None  # a forward after an OOM: the job went on, and may run out again at this step
        torch = self.torch
        self.autocast = self.ts.autocast(torch)
        # A wrapper of its forward may enter autocast (accelerate's, for HF's --bf16): read it within, at
        # the first child's call. Not in a compiled model, which would trace the hooks (and recompile).
        compiled = "_orig_mod" in module._modules or getattr(module, "_compiled_call_impl", None) is not None
        if self.autocast == "off" and not self.inside and not compiled:
            self.inside = [child.register_forward_pre_hook(self.guarded("autocast", self._within))
                           for child in module.children()]
        first = kwargs.get("input_ids") if isinstance(kwargs, dict) else None
        if first is None:
            first = next((a for a in (*args, *(kwargs or {}).values()) if isinstance(a, self.torch.Tensor)), None)
        if first is not None:
            self.input_seen = True
            self.write("input", shape=list(first.shape), dtype=str(first.dtype).replace("torch.", ""))

    def _within(self, module: Any, args: Any) -> None:
        self.autocast = self.ts.autocast(self.torch)  # inside the top module's forward: any wrapper's autocast
        while self.inside:  # once: the first child called answers
            self.inside.pop().remove()

    def _forward_ends(self, module: Any, args: Any, output: Any) -> None:
        if output is None and self.ts.is_oom(self.torch, sys.exc_info()[1]):  # the error in flight, never kept
            self._oom("forward", sys._getframe())
            return
        tensor = self.ts.first_grad_tensor(self.torch, output)
        if tensor is not None:
            tensor.register_hook(self.guarded("backward", self._backward_begins))

    def _backward_begins(self, grad: Any) -> None:
        self.phase = self.unfinished = "backward"
        # The engine calls it once this backward has completed, never after an error in it.
        self.torch.autograd.Variable._execution_engine.queue_callback(self.guarded("backward-end", self._finished))

    def _finished(self) -> None:
        self.unfinished = None

    def _left(self) -> None:
        """The backward or optimizer step an error left, recorded once; the OOM it may be is told by the
        job's log (the exception is never held)."""
        if self.unfinished is not None and self.oom_at != self.steps:
            self.write("interrupted", phase=self.unfinished, step=self.steps)
        self.unfinished = None

    def _collecting(self, phase: str, info: Any) -> None:
        """A job that recovers from an OOM in backward or in the optimizer step (HF's
        auto_find_batch_size, Lightning's batch size finder) collects garbage while it handles it:
        the error is read there, never kept, and recorded in the phase it left."""
        if phase == "start" and self.unfinished is not None and self.ts.is_oom(self.torch, sys.exc_info()[1]):
            self._oom(self.unfinished, sys._getframe())

    def _backward_done(self, param: Any) -> None:
        self.backward += 1

    def _step_begins(self, opt: Any, args: Any, kwargs: Any) -> None:
        self.phase = self.unfinished = "optimizer"
        if not any(ref() is opt for ref in self.optimizers):
            self.optimizers.append(weakref.ref(opt))

    def _step_ends(self, opt: Any, args: Any, kwargs: Any) -> None:
        torch, now = self.torch, time.monotonic()
        self.phase, self.unfinished = "data", None
        self.steps += 1
        seconds = now - self.last_step_at if self.last_step_at is not None else None
        self.last_step_at = now
        passes, self.backward_at_step = self.backward - self.backward_at_step, self.backward
        distributed = self.ts.distributed(torch)
        world = torch.distributed.get_world_size() if distributed else 1
        cuda = torch.cuda.is_available() and torch.cuda.is_initialized()
        state_dtype = next((str(v.dtype).replace("torch.", "") for s in opt.state.values() for v in s.values()
                            if isinstance(v, torch.Tensor) and v.dim() > 0), None)
        fields: dict[str, Any] = {"n": self.steps, "seconds": seconds, "backward": passes, "world_size": world,
                                  "distributed": distributed,
                                  "optimizer": type(opt).__name__, "state_dtype": state_dtype}
        if self.autocast is not None:
            fields["autocast"] = self.autocast
        if cuda:  # running peaks: the job's own counters, read and never reset
            fields["peak_allocated"] = torch.cuda.max_memory_allocated()
            fields["peak_reserved"] = torch.cuda.max_memory_reserved()
            if self.steps == 1:  # the card as the job's allocator sees it, once
                fields["capacity"] = torch.cuda.mem_get_info()[1]
        # Every step of the first hundred, then one in a hundred: the file stays small on long runs.
        if self.steps <= 100 or self.steps % 100 == 0:
            self.write("step", **fields)
        if self.steps == 1:
            self._resolved(sys._getframe())
        if self.history is not None:
            self.history.after_step(self.steps)
        if self.stop_after and self.steps >= self.stop_after:  # `gpudoc tune`'s trial: its K steps are done
            sys.stdout.flush()  # the probe's file is flushed at each line; os._exit, not SystemExit: no
            sys.stderr.flush()  # save or tracker upload in the job's own `finally` runs for a trial
            os._exit(0)

    def _resolved(self, frame: Any) -> None:
        """The frameworks' settings, from the frames of the training loop that reached ``frame``."""
        for event in self.settings.resolved_settings(self.settings.frames_from(frame)):
            self.write("framework", **event)

    # -- the end -----------------------------------------------------------------------------

    def excepthook(self, kind: type, value: BaseException, tb: Any) -> None:
        try:
            if self.torch is not None and os.getpid() == self.pid and self.ts.is_oom(self.torch, value):
                self._oom(self.settings.phase_of(tb) or self.phase, self.settings.innermost(tb))
        except Exception:
            pass

    def _oom(self, phase: str, frame: Any) -> None:
        """The OOM, once per step: where it left the forward, else where it ended the job. ``frame``:
        the innermost of the training loop's frames (the traceback's, or the stack in the hook)."""
        if self.oom_at == self.steps:
            return
        self.oom_at = self.steps
        if self.steps == 0:  # an OOM before the first step: the frameworks' settings from the loop's frames
            self.guarded("resolved", self._resolved)(frame)
        dumped = self.guarded("snapshot", self.history.dump)(self.directory, self.rank) if self.history else None
        snapshot, top = dumped or (None, [])
        self.write("oom", phase=phase, step=self.steps, breakdown=self._breakdown(), snapshot=snapshot, top=top)
        self.input_seen = False  # a job that goes on (a smaller batch) shows its next input
        self.backward_at_step = self.backward  # and the passes of the micro batches it abandoned never count

    def _breakdown(self) -> dict:
        model = self.model() if self.model is not None else None
        return _sibling("snapshot").breakdown(self.torch, model, [ref() for ref in self.optimizers if ref() is not None])


def _unfilter(entry: Any) -> None:
    import warnings

    if entry in warnings.filters:  # the job may have reset its filters since
        warnings.filters.remove(entry)  # type: ignore[attr-defined]  # a list at run time
        getattr(warnings, "_filters_mutated", lambda: None)()


def _call_kwargs() -> dict:
    """The keyword arguments of the module call in progress (torch's ``Module._call_impl`` frame)."""
    frame = sys._getframe(1)
    for _ in range(8):
        if frame is None:
            break
        if frame.f_code.co_name == "_call_impl" and isinstance(frame.f_locals.get("kwargs"), dict):
            return frame.f_locals["kwargs"]
        frame = frame.f_back  # type: ignore[assignment]
    return {}


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.strip().isdigit() else None


def _sibling(name: str) -> Any:
    """A module of the probe beside this file, loaded by path as this one was."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(f"_gpudoc_probe_{name}",
                                                  os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py"))
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[spec.name] = module  # type: ignore[union-attr]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module


def install() -> None:
    directory = os.environ.get("GPUDOC_PROBE_DIR")
    if not directory:
        return
    settings = _sibling("settings")
    probe = _Probe(directory, settings)
    previous = sys.excepthook

    def excepthook(kind: type, value: BaseException, tb: Any) -> None:
        probe.excepthook(kind, value, tb)
        previous(kind, value, tb)

    sys.excepthook = excepthook
    # Imported by the job, not by the probe: a job that never parses arguments or never imports
    # torch pays nothing for either.
    sys.addaudithook(probe.files.hook)
    settings.after_import("argparse", probe.guarded("argparse", lambda argparse: settings.observe_parsers(argparse, probe)))
    settings.after_import("torch", probe.guarded("arm", probe.arm))
    settings.after_import("transformers.trainer", probe.guarded("hf-trainer", probe.observe_hf_trainer))
