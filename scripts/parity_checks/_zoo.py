"""The zoo harness: a real model converted with ``from_torch`` and held to torch.

``run_model(entry)`` builds one model of ``_zoo_models.MODELS`` and measures, each on
copied weights and the same inputs, every comparison made with
``jaxgrad.parity.compare`` at the policy tier of its dtype:

- **float64, evaluation mode**: the output and the gradient of ``Σ c·output`` (one
  fixed random cotangent ``c`` per floating output leaf, so the whole vector-Jacobian
  product is checked) with respect to every parameter;
- **float32, evaluation mode**: the same on the float32 model (its own conversion; the
  captured program is specialised to its dtype), judged by ``compare``'s calibrated
  float32 rule (``reference64``: the float64 run above computes exactly what the float32
  one approximates): a leaf outside the tier against torch's float32 passes when
  jaxgrad is within the tier of the float64 answer, or within
  ``jaxgrad.parity.CALIBRATION_MULTIPLE`` times torch's own float32 distance from it;
- **training, float64**: ``STEPS`` steps of SGD with momentum (``SGD``) in training
  mode on ``loss = Σ mean((output − target)²)`` over the floating outputs (fixed random
  targets), torch's loop against a jitted jaxgrad step, compared after every step:
  loss, parameters, momentum buffers and buffers (BatchNorm running statistics). Each
  jaxgrad step starts from torch's state before it (params, buffers, momentum), so a
  step's error is its own: free-running, the rounding of one step is amplified by the
  next (torch against itself, in another summation order, leaves the float64 tier
  within two or three steps on BatchNorm CNNs). Parameters the training forward reads
  only through a stop-gradient (a teacher under ``no_grad``) get no ``.grad`` in torch
  and torch's SGD skips them; jaxgrad's optimizer freezes them alike
  (``model.params_without_gradient()``, ``jaxgrad.optim.freeze``). Dropout and stochastic depth stay
  active: torch's draws are recorded (``torchref.random_draws``) and handed to the
  captured program's random ops (``random_draws=``), so the comparison is exact, not
  statistical. The layer path (``GraphModule``) takes no injected draws: a model that
  converts there and draws random numbers in training is trained through a second
  conversion with ``capture="export"``, and the row says so. A step on image inputs
  with leaves outside the float64 tier is run again in torch from the same state
  (``NOISE_RUNS``): in other summation orders (channels-last, ``channels_last_3d`` for
  clips; the batch reversed; BatchNorm's statistics summed by ``torch.mean``) and with
  every value one ulp off: a leaf passes when jaxgrad is within ``CALIBRATION_MULTIPLE`` times torch's own distance from itself
  (``calibrate_by_torch_noise``: BatchNorm over few values in training mode makes some
  weight gradients cancel to ~1e-9 of their terms, beyond the float64 tier for torch
  against itself).

A model whose forward writes its own state (a momentum encoder, an EMA codebook) is
compared as ``from_torch`` returns it: a parameter the forward writes is state in the
twin, compared with the buffers (``STATE_PARAMETERS``), and state the evaluation-mode
forward writes is put back before each torch call of the evaluation columns, where the
twin's ``buffers`` start (the training column carries it from step to step).

Also recorded: the parameter count, the front end ``from_torch`` chose (``layers`` or
``export``), the conversion time (float64), the first call of the jitted training step
(compilation plus one step) and, in training, the random ops and how many elements
torch's draws dropped.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import itertools
import json
import math
import time
import traceback

import _zoo_models as zoo_models
import jax
import jax.numpy as jnp
import numpy as np
import optax
import torch

import jaxgrad
from jaxgrad import optim as joptim
from jaxgrad.nn.capture import writes
from jaxgrad.nn.capture.program import ExportedModule, TensorMeta
from jaxgrad.nn.capture.shapes import SymDim
from jaxgrad.parity import ParityReport
from parity_checks._batch_norm_sums import BatchNormByMean, has_batch_norm
from parity_checks._capture_parity import draws_for
from torchref import optim as toptim
from torchref.random_draws import Draw, recording, replaying

STEPS = 3
SGD = {"lr": 0.01, "momentum": 0.9}
SEED_TRAIN = 7  # torch's RNG before the training steps (its dropout draws)
COLUMNS = ("float64", "float32", "float32_grads", "train", "shapes", "artifact")
# the columns a row's verdict holds: float64 forward and gradients, the float32
# forward, float64 training, the other shapes and the artifact; the float32 gradients
# are judged and shown on their own
VERDICT = ("float64", "float32", "train", "shapes", "artifact")
COLUMN_TITLES = {
    "float64": "f64 fwd+grads",
    "float32": "f32 fwd",
    "float32_grads": "f32 grads",
    "train": f"train f64 x{STEPS}",
    "shapes": "shapes",
    "artifact": "artifact",
}


@dataclasses.dataclass
class Column:
    """One comparison of a row: ``status`` is ``"pass"``, ``"fail"`` (a leaf outside
    its tier), ``"error"`` (the comparison could not run) or ``"skip"``."""

    status: str = "skip"
    report: ParityReport | None = None
    error: str | None = None
    note: str | None = None

    @property
    def max_abs_err(self) -> float | None:
        """The largest error against torch over every leaf compared."""
        return None if self.report is None else self.report.max_abs_err

    def summary(self) -> str:
        if self.status in ("pass", "fail"):
            return f"{self.status.upper()} {self.max_abs_err:.1e}"
        return {"error": "ERROR", "skip": "-"}[self.status]

    def to_dict(self) -> dict:
        report = None if self.report is None else self.report.to_dict()
        if report is not None and self.status == "pass":
            report.pop("leaves", None)  # a passing row keeps its maxima only
        return {
            "status": self.status,
            "max_abs_err": _finite(self.max_abs_err),
            "error": self.error,
            "note": self.note,
            "report": report,
        }


@dataclasses.dataclass
class ZooResult:
    """One row of the zoo table."""

    name: str
    library: str
    notes: str
    parameters: int | None = None
    front_end: str | None = None
    convert_seconds: float | None = None
    compile_seconds: float | None = None
    columns: dict = dataclasses.field(default_factory=lambda: {c: Column() for c in COLUMNS})
    random_ops: int | None = None
    dropped: tuple | None = None  # (dropped elements, drawn elements) over the steps
    random_note: str | None = None
    constants: tuple | None = None  # the captured program's constants (export front end)
    computed_in_note: str | None = None  # float64 leaves judged at the float32 tier, why
    error: str | None = None  # conversion failed (or the library is missing: skipped)
    skipped: str | None = None
    seconds: float = 0.0

    @property
    def verdict(self) -> str:
        if self.skipped:
            return "SKIP"
        if self.error or any(self.columns[c].status in ("fail", "error") for c in VERDICT):
            return "FAIL"
        return "PASS"

    def randomness(self) -> str:
        if self.random_ops is None:
            return "-"
        if self.random_ops == 0:
            return "none"
        if self.dropped is None or self.dropped[1] == 0:
            return f"{self.random_ops} ops"
        return f"{self.random_ops} ops, {self.dropped[0]}/{self.dropped[1]} dropped"

    def failures(self) -> list[str]:
        """``"column: message"`` for every failure, for the lines under the table."""
        lines = []
        if self.error:
            lines.append(f"convert: {self.error}")
        for column, result in self.columns.items():
            if result.status == "error":
                lines.append(f"{column}: {result.error}")
            elif result.status == "fail":
                bad = result.report.failures()
                worst = "; ".join(f"{leaf.path}: {leaf.problem}" for leaf in bad[:3])
                more = f" (+{len(bad) - 3} more leaves)" if len(bad) > 3 else ""
                structure = result.report.structure_problems
                shown = "; ".join(structure[:3]) + (
                    f" (+{len(structure) - 3} more)" if len(structure) > 3 else ""
                )
                lines.append(
                    f"{column}: {len(bad)} leaves outside the tier: {worst}{more}"
                    + (f"; structure: {shown}" if structure else "")
                    + (f" [{result.note}]" if result.note else "")
                )
        return lines

    def to_dict(self) -> dict:
        return {
            "model": self.name,
            "library": self.library,
            "notes": self.notes,
            "parameters": self.parameters,
            "front_end": self.front_end,
            "convert_seconds": self.convert_seconds,
            "first_call_seconds": self.compile_seconds,
            "random_ops": self.random_ops,
            "dropped": None if self.dropped is None else list(self.dropped),
            "random_note": self.random_note,
            "constants": None if self.constants is None else list(self.constants),
            "computed_in_float32": self.computed_in_note,
            "columns": {k: v.to_dict() for k, v in self.columns.items()},
            "verdict": self.verdict,
            "error": self.error,
            "skipped": self.skipped,
            "seconds": round(self.seconds, 2),
        }


def _finite(value):
    return None if value is None or value != value else value


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# --------------------------------------------------------------------- pytrees
def plain(value):
    """A model output (torch or jax) as nested dicts and lists of arrays: Hugging Face
    ``ModelOutput``\\ s (torch) and their dicts (jaxgrad) alike, ``None`` fields left out."""
    if isinstance(value, (tuple, list)):
        return [plain(v) for v in value]
    if hasattr(value, "keys") and not hasattr(value, "shape"):
        return {k: plain(value[k]) for k in value.keys() if value[k] is not None}
    return value


def _is_float(leaf) -> bool:
    if isinstance(leaf, torch.Tensor):
        return leaf.is_floating_point()
    return hasattr(leaf, "dtype") and jnp.issubdtype(leaf.dtype, jnp.floating)


def float_leaves(tree) -> list:
    """The floating leaves of ``plain(output)``, in jax's (sorted-key) order."""
    return [leaf for leaf in jax.tree_util.tree_leaves(tree) if _is_float(leaf)]


def _detached(tree):
    return jax.tree_util.tree_map(lambda t: t.detach().numpy().copy(), tree)


def _torch(value):
    return torch.from_numpy(value) if isinstance(value, np.ndarray) else value


def _jax(value):
    return jax.device_put(value) if isinstance(value, np.ndarray) else value


def _apply(model, params, args, kwargs, buffers, **options):
    """``model.apply`` that returns ``(output, new_buffers)`` whether or not the model
    has buffers."""
    if buffers:
        return model.apply(params, *args, buffers=buffers, **options, **kwargs)
    return model.apply(params, *args, **options, **kwargs), buffers


# the torch parameters a converted twin holds as state (a parameter the forward writes,
# a momentum encoder's: jaxgrad returns it like a buffer), set on the module by `convert`
STATE_PARAMETERS = "_jaxgrad_state_parameters"


def named_parameters(module) -> dict:
    """torch's parameters that the twin holds as ``params`` (those it holds as state
    are compared with the buffers)."""
    state = getattr(module, STATE_PARAMETERS, ())
    return {n: p for n, p in module.named_parameters() if n not in state}


def persistent_buffers(module) -> dict:
    """torch's persistent buffers, and the parameters the twin holds as state."""
    state = module.state_dict(keep_vars=True)
    written = getattr(module, STATE_PARAMETERS, ())
    return {n: b for n, b in module.named_buffers() if n in state} | {
        n: p for n, p in module.named_parameters() if n in written
    }


def _restore_state_written_in_evaluation(module, model):
    """A forward pre-hook putting back, before every call of ``module``, the state its
    evaluation-mode forward writes (a momentum encoder moves its key encoder in both
    modes) as it was at conversion, where the twin's ``buffers`` are: every comparison
    in evaluation mode then starts both frameworks from the same state. None when the
    evaluation program writes nothing (the hook's handle otherwise: remove it before
    training, whose steps carry the state on)."""
    written = writes.updated_keys(model, False)
    if not written:
        return None
    state = module.state_dict()
    saved = {k: state[k].detach().clone() for k in written if k in state}

    def reset(module, args):
        current = module.state_dict()
        with torch.no_grad():
            for key, value in saved.items():
                current[key].copy_(value)

    return module.register_forward_pre_hook(reset)


# ------------------------------------------------------------- the comparisons
def cotangents_for(output, seed: int = 1) -> list[np.ndarray]:
    """One fixed standard-normal cotangent per floating leaf of ``plain(output)``, drawn
    in float32 (so the float64 and float32 rows use the same values)."""
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(tuple(leaf.shape)).astype(np.float32)
        for leaf in float_leaves(plain(output))
    ]


def torch_eval(module, args, kwargs, cotangents=None) -> tuple[dict, list]:
    """torch's evaluation-mode output and the gradients of ``Σ c·output``:
    ``({"output", "grads"}, cotangents)``."""
    module.eval()
    module.zero_grad(set_to_none=True)
    output = plain(module(*[_torch(a) for a in args], **{k: _torch(v) for k, v in kwargs.items()}))
    if cotangents is None:
        cotangents = cotangents_for(output)
    leaves = float_leaves(output)
    total = sum(
        (torch.from_numpy(c.astype(_np_dtype(o))) * o).sum() for c, o in zip(cotangents, leaves)
    )
    total.backward()
    grads = {
        n: (p.grad.numpy().copy() if p.grad is not None else np.zeros(tuple(p.shape), _np_dtype(p)))
        for n, p in named_parameters(module).items()
    }
    module.zero_grad(set_to_none=True)
    return {"output": _detached(output), "grads": grads}, cotangents


def _np_dtype(tensor) -> np.dtype:
    return np.dtype(str(tensor.dtype).replace("torch.", ""))


def jax_eval(model, params, buffers, args, kwargs, cotangents) -> dict:
    """The jaxgrad side of ``torch_eval``, jitted."""
    jax_args = [_jax(a) for a in args]
    jax_kwargs = {k: _jax(v) for k, v in kwargs.items()}

    def objective(params):
        output, _ = _apply(model, params, jax_args, jax_kwargs, buffers, train=False)
        output = plain(output)
        leaves = float_leaves(output)
        total = sum(jnp.sum(jnp.asarray(c, o.dtype) * o) for c, o in zip(cotangents, leaves))
        return total, output

    (_, output), grads = jax.jit(jax.value_and_grad(objective, has_aux=True))(params)
    return {"output": output, "grads": grads}


# -------------------------------------------------------------------- training
def _targets(output, seed: int = 2) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [
        rng.standard_normal(tuple(leaf.shape)).astype(
            _np_dtype(leaf) if isinstance(leaf, torch.Tensor) else leaf.dtype
        )
        for leaf in float_leaves(plain(output))
    ]


def _loss_torch(output, targets):
    return sum(
        ((o - torch.from_numpy(t)) ** 2).mean()
        for o, t in zip(float_leaves(plain(output)), targets)
    )


def _loss_jax(output, targets):
    return sum(jnp.mean((o - t) ** 2) for o, t in zip(float_leaves(plain(output)), targets))


def square_loss_torch(output, _unused=None):
    """``Σ mean(o²)`` over the floating outputs (the bench's loss: any model, any output
    structure; the second argument, a label, is ignored)."""
    return sum((o**2).mean() for o in float_leaves(plain(output)))


def square_loss_jax(output, _unused=None):
    """``square_loss_torch`` in JAX."""
    return sum(jnp.mean(o**2) for o in float_leaves(plain(output)))


def _dropped(draws) -> tuple[int, int]:
    """Elements torch's keep masks dropped, and elements they cover (Bernoulli draws
    only: a uniform or normal draw drops nothing by itself)."""
    dropped = total = 0
    for draw in draws:
        if "bernoulli" in draw.op or "dropout" in draw.op:
            values = draw.values
            dropped += int((values == 0).sum())
            total += values.numel()
    return dropped, total


def torch_draws_in_training(module, args, kwargs) -> list:
    """The random draws of one training-mode forward, module state restored after."""
    state = module.state_dict()
    saved = type(state)((k, v.detach().clone()) for k, v in state.items())
    # the per-module versions a loader may ask for (MNASNet's requires its own)
    saved._metadata = getattr(state, "_metadata", None)  # type: ignore[attr-defined]
    module.train()
    try:
        with torch.no_grad(), recording() as draws:
            module(*[_torch(a) for a in args], **{k: _torch(v) for k, v in kwargs.items()})
    finally:
        module.load_state_dict(saved)
    return draws


def _torch_state(module, optimizer) -> dict:
    """numpy copies of what a training step starts from: params, buffers and torch's
    ``optimizer.state_dict()`` (its momentum buffers)."""
    saved = optimizer.state_dict()
    return {
        "params": {n: p.detach().numpy().copy() for n, p in named_parameters(module).items()},
        "buffers": {n: b.detach().numpy().copy() for n, b in persistent_buffers(module).items()},
        "optimizer": {
            "state": {
                i: {
                    k: v.detach().numpy().copy()
                    for k, v in entry.items()
                    if isinstance(v, torch.Tensor)
                }
                for i, entry in saved["state"].items()
            },
            "param_groups": saved["param_groups"],
        },
    }


def torch_step(module, optimizer, args, kwargs, targets) -> tuple[dict, list]:
    """One training-mode step of ``module`` (in place): ``(record, draws)``, the record
    ``{"loss", "params", "momentum", "buffers"}`` after the step and torch's random
    draws (``torchref.random_draws.Draw``) in order.

    The record's params and momentum are numpy views of the module's and the
    optimizer's own tensors, not copies: valid until the module's next step, by which
    every caller is done with them (a large model's state is held once, not twice)."""
    optimizer.zero_grad(set_to_none=True)
    with recording() as draws:
        output = module(*args, **kwargs)
    loss = _loss_torch(output, targets)
    loss.backward()
    optimizer.step()
    record = {
        "loss": loss.detach().numpy().copy(),
        "params": {n: p.detach().numpy() for n, p in named_parameters(module).items()},
        "momentum": toptim.named_state(module, optimizer, copy=False),
        "buffers": {n: b.detach().numpy().copy() for n, b in persistent_buffers(module).items()},
    }
    optimizer.zero_grad(set_to_none=True)  # the step is taken: its gradients are let go
    return record, draws


def _channels_last(tensor):
    """``tensor`` channels-last where it is an image batch (4-D) or a clip batch (5-D:
    ``channels_last_3d``), as it is otherwise: the same values, another summation order
    in torch's convolutions and normalisations."""
    if isinstance(tensor, torch.Tensor) and tensor.ndim in (4, 5):
        layout = torch.channels_last if tensor.ndim == 4 else torch.channels_last_3d
        return tensor.contiguous(memory_format=layout)
    return tensor


def _module_channels_last(module):
    """``module`` (in place) with its 4-D and 5-D parameters and buffers channels-last
    (``_channels_last``): ``Module.to(memory_format=)`` takes one layout for both ranks,
    which a 3-D convolution's 5-D weight cannot take as ``channels_last``."""
    with torch.no_grad():
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            tensor.data = _channels_last(tensor.data)
    return module


def _has_layout_input(args) -> bool:
    """Whether an input is an image or clip batch (4-D or 5-D): a channels-last run."""
    return any(isinstance(a, np.ndarray) and a.ndim in (4, 5) for a in args)


def _torch_inputs(args, kwargs, channels_last=False):
    torch_args = [_torch(a) for a in args]
    if channels_last:
        torch_args = [_channels_last(a) for a in torch_args]
    return torch_args, {k: _torch(v) for k, v in kwargs.items()}


def train_steps(
    module,
    model,
    args,
    kwargs,
    *,
    steps: int = STEPS,
    hyper: dict = SGD,
    computed_in=None,
    name: str = "",
) -> tuple[ParityReport, dict]:
    """``steps`` training-mode SGD steps of ``module`` (trained in place) and of its
    jaxgrad twin ``model``, compared after every step.

    Each jaxgrad step starts from torch's state before that step (its params, buffers
    and momentum buffers, copied) and takes torch's random draws of that step, so every
    step is compared on its own: the rounding of earlier steps does not compound (on
    BatchNorm CNNs trained on batch statistics, torch against itself in another
    summation order leaves the float64 tier within two or three free-running steps).

    Returns:
      ``(report, info)``: the comparison of every step's loss, params, momentum buffers
      and buffers (leaf paths prefixed ``"step k "``), and ``{"first_call_seconds",
      "random_ops", "dropped"}``.
    """
    torch_args, torch_kwargs = _torch_inputs(args, kwargs)
    jax_args = [_jax(a) for a in args]
    jax_kwargs = {k: _jax(v) for k, v in kwargs.items()}
    exported = isinstance(model, ExportedModule)
    # parameters the training forward reads only through a stop-gradient (a no_grad
    # teacher) get no .grad in torch, and torch's SGD skips them: no momentum, no step
    untouched = model.params_without_gradient(train=True)
    optimizer = joptim.sgd(**hyper)
    if untouched:
        optimizer = joptim.freeze(optimizer, untouched)
    targets = _targets(_output_shapes(module, args, kwargs))

    def step(params, buffers, opt_state, injected):
        def objective(params):
            options = {"random_draws": injected} if exported else {}
            output, new_buffers = _apply(
                model,
                params,
                jax_args,
                jax_kwargs,
                buffers,
                train=True,
                key=jax.random.key(0),
                **options,
            )
            return _loss_jax(output, targets), new_buffers

        (loss, new_buffers), grads = jax.value_and_grad(objective, has_aux=True)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), new_buffers, opt_state, loss

    # each step's inputs are fresh copies of torch's state: donated, the step's outputs
    # reuse their memory (a large model holds one state fewer)
    jitted = jax.jit(step, donate_argnums=(0, 1, 2))
    module.train()
    # over the parameters the twin trains (one the forward writes is state there; torch's
    # SGD skips it anyway: it has no .grad), so the optimizers' state_dicts line up
    torch_opt = toptim.make_optimizer("sgd", named_parameters(module).values(), **hyper)
    torch.manual_seed(SEED_TRAIN)
    images = any(isinstance(a, np.ndarray) and a.ndim >= 4 for a in args)  # or clips
    leaves, problems, first_call, dropped, drawn = [], [], None, 0, 0
    noise = {"leaves": 0, "steps": 0, "torch_outside": 0}
    for index in range(steps):
        start = _torch_state(module, torch_opt)
        rng_state = torch.get_rng_state()
        reference, draws = torch_step(module, torch_opt, torch_args, torch_kwargs, targets)
        step_dropped, step_drawn = _dropped(draws)
        dropped, drawn = dropped + step_dropped, drawn + step_drawn
        if exported:
            injected = {k: jax.device_put(v) for k, v in draws_for(model, draws).items()}
        elif draws:
            raise ValueError(
                f"torch drew {len(draws)} random tensors in training, and the "
                "layer path takes no injected draws (convert with "
                "capture='export')."
            )
        else:
            injected = {}
        params = {n: jax.device_put(v) for n, v in start["params"].items()}
        buffers = {n: jax.device_put(v) for n, v in start["buffers"].items()}
        opt_state = (
            optimizer.init(params)
            if index == 0
            else joptim.load_optimizer_state_dict(
                optimizer, params, start["optimizer"], count=index
            )
        )
        began = time.perf_counter()
        params, buffers, opt_state, loss = jitted(params, buffers, opt_state, injected)
        jax.block_until_ready((params, buffers, opt_state))
        if first_call is None:
            first_call = time.perf_counter() - began
        candidate = {
            "loss": np.asarray(loss),
            "params": {k: np.asarray(v) for k, v in params.items()},
            "momentum": {
                n: {k: np.asarray(v) for k, v in fields.items() if k != "step"}
                for n, fields in joptim.torch_style_state(opt_state, list(params)).items()
            },
            "buffers": {k: np.asarray(v) for k, v in buffers.items()},
        }
        report = compare_float64(reference, candidate, computed_in)
        if images and report.failures():
            tier = "float32" if computed_in == "float32" else "float64"

            def alternates(
                runs, start=start, rng_state=rng_state, draws=draws, reference=reference, tier=tier
            ):
                # one run at a time (each holds a whole state: a large model's six at
                # once would not fit); a run is a measure of rounding only where it
                # computed the same loss (a model that treats examples by position
                # would not, the batch reversed)
                for how in runs:
                    let_go()  # the last run's twin
                    run = torch_noise_step(
                        module,
                        start,
                        rng_state,
                        args,
                        kwargs,
                        targets,
                        how,
                        draws=draws,
                        hyper=hyper,
                        unit=tier,
                    )
                    if run is not None and _same_loss(run, reference, tier):
                        yield run

            counts = calibrate_by_torch_noise(
                report,
                reference,
                candidate,
                alternates(NOISE_RUNS),
                more=alternates(MORE_NOISE_RUNS),
            )
            noise["steps"] += 1
            noise["leaves"] += counts[0]
            noise["torch_outside"] += counts[1]
        for leaf in report.leaves:
            leaf.path = f"step {index + 1} {leaf.path}"
        leaves.extend(report.leaves)
        problems.extend(f"step {index + 1}: {p}" for p in report.structure_problems)
        del reference, candidate, params, buffers, opt_state, start
        let_go()
    info = {
        "noise": noise,
        "first_call_seconds": first_call,
        "random_ops": len(model.train_program.random_nodes()) if exported else 0,
        "dropped": (dropped, drawn),
    }
    return ParityReport(leaves=leaves, structure_problems=problems, name=name), info


RULE_TORCH_NOISE = "torch's own rounding"
"""``LeafResult.rule`` of a float64 training leaf outside the tier that lies within
``jaxgrad.parity.CALIBRATION_MULTIPLE`` times torch's own distance from itself."""


NOISE_RUNS = (
    "channels-last",
    "batch reversed",
    "BatchNorm by torch.mean",
    "one ulp",
    "one ulp, seed 2",
    "one ulp, seed 3",
)
MORE_NOISE_RUNS = tuple(f"one ulp, seed {k}" for k in range(4, 13))
"""Up to nine more one-ulp runs, only while a leaf still fails after ``NOISE_RUNS``
(``calibrate_by_torch_noise``'s ``more``): torch's largest distance on a leaf is the
maximum of a sample. Measured on torchvision's resnet152 (evaluation-mode float64
gradient of layer2.6.conv3.weight): twelve one-ulp seeds put torch 0.68x to 11.8x the
tier from itself, where the five runs had reached 1.45x and jaxgrad stood 7.35x."""
"""torch's training step run again from the same state on the same random draws
(replayed), as a measure of its rounding: in the channels-last layout and with the batch
reversed (the same arithmetic summed in other orders: BatchNorm's statistics and every
weight gradient sum over the batch; each example's dropout mask reversed with it), with
every training-mode batch norm's statistics summed by ``torch.mean``
(``_batch_norm_sums``: torch's kernel sums each channel in one sequential loop, whose
rounding no other run changes: ~100-170 ulps of its statistics at 100k values a channel,
where jaxgrad's is within 3), and three
times with the inputs, the parameters and every layer's output each moved by one unit
in the last place, up or down at random (Monte Carlo arithmetic: each value perturbed by
the size of its own rounding; three seeds, as one sample of noise can fall small). A
result that moves beyond the tier under perturbations the size of rounding is
ill-conditioned at the tier."""


def let_go() -> None:
    """Free what only the cycle collector frees, now: a large model's copies held in
    reference cycles (a twin module whose hooks close over its layers; torch's
    autograd records) outlive their step until Python's collector happens to run, which
    counts objects, not bytes. Measured on torchvision's vgg11 (1 GB of float64
    parameters) training: 10.8 GB resident at the third step's comparison without a
    collection per step, 8.9 GB with one."""
    gc.collect()


def torch_noise_step(
    module,
    start,
    rng_state,
    args,
    kwargs,
    targets,
    how: str,
    *,
    draws=None,
    hyper=SGD,
    unit: str = "float64",
) -> dict | None:
    """torch's training step again from the same state ``start`` (``_torch_state``) and
    random state ``rng_state``, changed as ``how`` (one of ``NOISE_RUNS``) says: the
    record ``torch_step`` gives. ``module`` is copied, not touched; torch's random state
    is restored afterwards.

    ``draws``: the reference step's random draws, replayed (``torchref.random_draws.
    replaying``): the same numbers at the same places in every layout, and reversed
    with the batch. A run that cannot take them (the forward draws in another order, a
    draw not made per example under the batch reversed) measures nothing: None is
    returned for it.

    ``unit``: the one-ulp runs' unit in the last place: ``"float64"``'s, or
    ``"float32"``'s (2⁻²⁴ relative) for a float64 model whose own code computes in
    float32 in places (EfficientViT's linear attention): a float64 ulp vanishes in its
    cast to float32, and the leaves are judged at the float32 tier anyway.
    """
    runs = NOISE_RUNS + MORE_NOISE_RUNS
    if how not in runs:
        raise ValueError(f"`how` must be one of {runs}, got {how!r}")
    perturbed = how.startswith("one ulp")
    # one ulp seed k draws from SEED_TRAIN + k + 1 ("one ulp" is seed 1)
    seed = SEED_TRAIN + 1 + (int(how.rsplit(" ", 1)[1]) if "seed" in how else 1)
    rng = np.random.default_rng(seed)
    expected = list(draws or ())
    if how == "channels-last" and not _has_layout_input(args):
        return None  # channels-last is a layout of image (4-D) and clip (5-D) batches
    by_mean = how == "BatchNorm by torch.mean"
    if by_mean and not has_batch_norm(module):
        return None  # no batch statistics to sum otherwise
    if how == "batch reversed":
        batch = {a.shape[0] for a in args if isinstance(a, np.ndarray)}
        if kwargs or len(batch) != 1 or any(t.shape[:1] != tuple(batch) for t in targets):
            return None  # no one batch axis
        if any(not d.values.ndim or d.values.shape[0] not in batch for d in expected):
            return None  # a draw not made per example (its reversal is no such draw)
        args = [a[::-1].copy() for a in args]
        targets = [t[::-1].copy() for t in targets]
        # each example keeps its own dropout mask: the masks reversed with the batch
        expected = [Draw(d.op, d.values.flip(0)) for d in expected]

    def nudged(values: np.ndarray) -> torch.Tensor:
        values = np.array(values, copy=True)
        if perturbed and values.dtype.kind == "f":
            values = one_ulp(values, rng, unit)
        return torch.from_numpy(values)

    twin = copy_module(module)
    with torch.no_grad():
        for name, param in named_parameters(twin).items():
            param.copy_(nudged(start["params"][name]))
        for name, buffer in persistent_buffers(twin).items():
            buffer.copy_(torch.from_numpy(start["buffers"][name]))
    channels_last = how == "channels-last"
    if channels_last:
        twin = _module_channels_last(twin)
    if perturbed:
        round_every_layer(twin, seed, unit)
    optimizer = toptim.make_optimizer("sgd", named_parameters(twin).values(), **hyper)
    saved = start["optimizer"]
    optimizer.load_state_dict(
        {
            "state": {
                i: {k: torch.from_numpy(v.copy()) for k, v in entry.items()}
                for i, entry in saved["state"].items()
            },
            "param_groups": copy.deepcopy(saved["param_groups"]),
        }
    )
    current = torch.get_rng_state()
    torch.set_rng_state(rng_state)
    try:
        inputs = [nudged(a) if isinstance(a, np.ndarray) else a for a in args]
        torch_args, torch_kwargs = _torch_inputs(inputs, kwargs, channels_last=channels_last)
        # torch's draws replayed (its generator alone would fill a channels-last mask in
        # memory order, other numbers at each place)
        summing = BatchNormByMean() if by_mean else contextlib.nullcontext()
        with replaying(expected) as replayer, summing:
            record, own = torch_step(twin, optimizer, torch_args, torch_kwargs, targets)
    except ValueError as error:
        if str(error).startswith("replaying:"):
            return None  # the forward draws otherwise than recorded: no measure
        raise
    finally:
        torch.set_rng_state(current)
    same = replayer.used == len(expected) and len(own) == len(expected)
    if by_mean and not summing.calls:
        return None  # every batch norm in evaluation mode: torch's own step again
    return record if same else None


def round_every_layer(module, seed: int, unit: str = "float64") -> None:
    """Forward hooks on every leaf layer of ``module`` (a copy: they stay) moving each
    floating output one unit in the last place (``unit``: float64's, or float32's
    2⁻²⁴ relative; an exact zero stays), up or down at random: the rounding of each
    layer's own arithmetic (Monte Carlo arithmetic), drawn from a generator of its own
    (torch's untouched)."""
    generator = torch.Generator().manual_seed(seed)

    def round_away(layer, inputs, output):
        if not (isinstance(output, torch.Tensor) and output.is_floating_point()):
            return output
        up = torch.rand(output.shape, generator=generator) < 0.5
        if unit == "float32":
            sign = torch.where(up, 1.0, -1.0).to(output.dtype)
            return output + sign * output.abs() * 2.0**-24
        towards = torch.where(up, math.inf, -math.inf).to(output.dtype)
        # an exact zero (ReLU's) carries no rounding, and one ulp of it is a subnormal
        # number: every convolution after it ran ~30x slower on subnormal inputs
        return torch.where(output == 0, output, torch.nextafter(output, towards))

    for layer in module.modules():
        if not any(True for _ in layer.children()):
            layer.register_forward_hook(round_away)


def one_ulp(values: np.ndarray, rng, unit: str = "float64") -> np.ndarray:
    """``values`` (floating) each moved by one unit in the last place, up or down at
    random (``unit`` as ``round_every_layer``)."""
    sign = rng.choice(np.array([-1.0, 1.0], values.dtype), size=values.shape)
    step = np.spacing(values) if unit == "float64" else np.abs(values) * 2.0**-24
    # an exact zero stays (no rounding to model; its ulp would be subnormal)
    return np.where(values == 0, values, values + sign * step)


def copy_module(module):
    """``copy.deepcopy(module)``, also where the module caches tensors computed with
    gradients (timm's EfficientViT keeps its attention biases in a dict after a forward):
    torch deep-copies only graph leaves, so those are copied detached."""
    memo: dict = {}

    def detach(value, depth=0):
        if isinstance(value, torch.Tensor):
            if not value.is_leaf and id(value) not in memo:
                memo[id(value)] = value.detach().clone()
        elif isinstance(value, dict) and depth < 3:
            for item in value.values():
                detach(item, depth + 1)
        elif isinstance(value, (list, tuple)) and depth < 3:
            for item in value:
                detach(item, depth + 1)

    for layer in module.modules():
        detach(vars(layer))
    return copy.deepcopy(module, memo)


def _same_loss(run: dict, reference: dict, tier: str = "float64") -> bool:
    loss, expected = np.asarray(run["loss"]), np.asarray(reference["loss"])
    rtol, atol = jaxgrad.parity.tolerance_for(tier, np.asarray(expected, np.float64))
    return bool(np.all(np.abs(loss - expected) <= atol + rtol * np.abs(expected)))


def calibrate_by_torch_noise(report, reference, candidate, alternates, more=()) -> tuple[int, int]:
    """The float64 analogue of ``compare``'s calibrated float32 rule, for a training step
    (in place on ``report``'s leaves).

    float64 has no wider answer to measure a step against, so the measure of its
    rounding is torch against itself: ``alternates``, the same step run again as
    ``NOISE_RUNS`` say (``torch_noise_step``); torch's distance is the largest over
    them. A leaf outside its tier (float64; or float32, for a float64 model whose own
    code casts to float32) passes when jaxgrad's distance from torch is within
    ``CALIBRATION_MULTIPLE`` times torch's own distance from itself, both in units of
    the leaf's tolerance (``headroom`` and
    ``reference_headroom`` record them; ``rule`` is ``RULE_TORCH_NOISE``). A wrong
    gradient is orders of magnitude beyond rounding (a backward 0.1 % off is 10⁷ times
    the tier) and still fails.

    ``more``: further runs (more one-ulp seeds), taken one at a time only while a leaf
    still fails the rule after ``alternates``: torch's largest distance on a leaf is a
    sample's maximum, and a few runs can miss its spread (``MORE_NOISE_RUNS``).

    Returns:
      ``(leaves passed by the rule, leaves where torch against itself is outside the
      tier)``.
    """
    ref_flat, cand_flat = jaxgrad.parity.flatten(reference), jaxgrad.parity.flatten(candidate)
    leaves = {leaf.path: leaf for leaf in report.leaves}

    def tolerance(path):  # the leaf's own tier (float32: a model's casts)
        return leaves[path].atol + leaves[path].rtol * np.abs(ref_flat[path])

    # leaf path: torch's largest headroom so far (None: not measurable); no copies kept
    measured: dict = {}
    for path, leaf in leaves.items():
        if leaf.tier not in ("float64", "float32") or path not in cand_flat or path not in ref_flat:
            continue
        ref = np.asarray(ref_flat[path], np.float64)
        cand = np.asarray(cand_flat[path], np.float64)
        if ref.shape != cand.shape or not ref.size:
            continue
        if np.isfinite(ref).all() and np.isfinite(cand).all():
            measured[path] = 0.0

    def distance(path, values) -> float:
        ref = np.asarray(ref_flat[path], np.float64)
        return float(np.max(np.abs(np.asarray(values, np.float64) - ref) / tolerance(path)))

    def measure(alternate) -> None:
        alt_flat = jaxgrad.parity.flatten(alternate)
        for path, so_far in measured.items():
            value = alt_flat.get(path)
            alt = None if value is None else np.asarray(value, np.float64)
            if so_far is None or alt is None or alt.shape != np.shape(ref_flat[path]):
                measured[path] = None
            elif not np.isfinite(alt).all():
                measured[path] = None
            else:
                measured[path] = max(so_far, distance(path, alt))

    def still_failing() -> bool:
        return any(
            measured.get(leaf.path) is not None
            and not leaf.passed
            and distance(leaf.path, cand_flat[leaf.path])
            > jaxgrad.parity.CALIBRATION_MULTIPLE * measured[leaf.path]
            for leaf in report.leaves
        )

    runs = 0
    for alternate in alternates:  # one at a time: each is a whole training state
        runs += 1
        measure(alternate)
        del alternate
    if not runs:
        return 0, 0
    more = iter(more)
    while still_failing():  # checked before a run is made: none is made in vain
        alternate = next(more, None)
        if alternate is None:
            break
        runs += 1
        measure(alternate)
        del alternate
    passed = outside = 0
    for leaf in report.leaves:
        torch_headroom = measured.get(leaf.path)
        if torch_headroom is None:
            continue
        outside += torch_headroom > 1.0
        if leaf.passed:
            continue
        jax_headroom = distance(leaf.path, cand_flat[leaf.path])
        leaf.headroom, leaf.reference_headroom = jax_headroom, torch_headroom
        if jax_headroom <= jaxgrad.parity.CALIBRATION_MULTIPLE * torch_headroom:
            leaf.problem, leaf.rule = None, RULE_TORCH_NOISE
            passed += 1
        else:
            leaf.problem += (
                f"; torch against itself (largest of {runs} runs): "
                f"{torch_headroom:.3g}x the tier, "
                f"jaxgrad {jax_headroom:.3g}x (passes within "
                f"{jaxgrad.parity.CALIBRATION_MULTIPLE:g} x torch's)"
            )
    return passed, outside


def _output_shapes(module, args, kwargs):
    """The output of one training-mode forward (for the targets' shapes: a model may
    return more in training, as GoogLeNet's auxiliary logits), on a copy of the module
    (its running statistics untouched), without gradients and with torch's random state
    restored."""
    twin = copy_module(module).train()
    with torch.random.fork_rng(devices=[]), torch.no_grad():
        return twin(*[_torch(a) for a in args], **{k: _torch(v) for k, v in kwargs.items()})


# ------------------------------------------------------------------- one model
@contextlib.contextmanager
def _precision():
    """float64 available (float64 rows, int64 token ids, ``num_batches_tracked``) and
    highest-precision matmuls; float32 rows still compute in float32 (their params and
    inputs are float32, and every leaf's dtype is compared)."""
    with jax.default_matmul_precision("highest"), jax.enable_x64(True):
        yield


def _example(args):
    return tuple(_torch(a) for a in args)


def convert(
    module,
    args,
    kwargs,
    capture: str = "auto",
    batch_one: bool = False,
    dynamic_shapes: str = "auto",
):
    """``from_torch(module, example=..., with_buffers=True, capture=capture,
    batch_one=..., dynamic_shapes=...)`` and its wall time: ``(model, params, buffers,
    seconds)``; with ``batch_one`` the export front end captures torch's batch-1 program
    too (the shapes column)."""
    began = time.perf_counter()
    model, params, buffers = jaxgrad.nn.from_torch(
        module,
        example=_example(args),
        example_kwargs={k: _torch(v) for k, v in kwargs.items()} or None,
        with_buffers=True,
        capture=capture,
        batch_one=batch_one,
        dynamic_shapes=dynamic_shapes,
    )
    parameters = dict(module.named_parameters())
    setattr(module, STATE_PARAMETERS, tuple(k for k in buffers if k in parameters))
    return model, params, buffers, time.perf_counter() - began


# ------------------------------------------------------------------ other shapes
def _length_is_dynamic(model, leaves) -> bool:
    """Whether the captured program keeps the 2-D inputs' second size (a sequence
    length) symbolic: a captured model's recorded input shapes say so (a 2-D input whose
    columns torch fixed, features into a Linear, is no sequence); a layer-path model has
    no recorded shapes and runs at any, so token ids (2-D integers) count."""
    if isinstance(model, ExportedModule):
        metas = [
            meta
            for _, meta in model.input_meta
            if isinstance(meta, TensorMeta) and len(meta.shape) == 2
        ]
        return bool(metas) and all(isinstance(meta.shape[1], SymDim) for meta in metas)
    return all(a.dtype.kind in "iu" for a in leaves if isinstance(a, np.ndarray) and a.ndim == 2)


def other_shapes(args, kwargs, model=None) -> dict:
    """``{label: (args, kwargs)}``: the example at batch 1 and at a larger batch (its
    rows repeated), and for a sequence (2-D inputs whose second size the capture keeps
    dynamic: token ids, audio) at a longer length (its columns repeated), every input
    cut or grown alike."""
    leaves = [*args, *kwargs.values()]
    batch = next((a.shape[0] for a in leaves if isinstance(a, np.ndarray) and a.ndim), None)
    if batch is None:
        return {}

    def along(axis, size):
        def resize(a):
            if not isinstance(a, np.ndarray) or a.ndim <= axis:
                return a
            reps = -(-size // a.shape[axis])
            return np.take(np.concatenate([a] * reps, axis=axis), range(size), axis=axis)

        return tuple(resize(a) for a in args), {k: resize(v) for k, v in kwargs.items()}

    shapes = {"batch 1": along(0, 1), f"batch {batch + 2}": along(0, batch + 2)}
    sequences = [a for a in leaves if isinstance(a, np.ndarray) and a.ndim == 2]
    if (
        sequences
        and len({a.shape[1] for a in sequences}) == 1
        and _length_is_dynamic(model, leaves)
    ):
        length = sequences[0].shape[1]
        longer = length + max(1, length // 2)
        shapes[f"length {longer}"] = along(1, longer)
    return shapes


def shapes_report(module64, model, params, buffers, args, kwargs, computed_in=None):
    """float64 forward and every gradient at ``other_shapes``, from the one conversion
    (``computed_in``: the tier of a model that computes in float32 inside, as the
    float64 column judges it)."""
    reference, candidate = {}, {}
    for label, (shape_args, shape_kwargs) in other_shapes(args, kwargs, model).items():
        reference[label], cotangents = torch_eval(module64, shape_args, shape_kwargs)
        candidate[label] = jax_eval(model, params, buffers, shape_args, shape_kwargs, cotangents)
    report = compare_float64(reference, candidate, computed_in, name="other shapes")
    report.zoo_note = "at " + ", ".join(reference)
    return report


_RELOAD = """
import sys, json
import jax
import numpy as np
jax.config.update("jax_enable_x64", True)
from jaxgrad.nn import load_exported
artifact = load_exported(sys.argv[1])
data = np.load(sys.argv[2])
args = [data[f"arg{i}"] for i in range(int(data["nargs"]))]
kwargs = {k[6:]: data[k] for k in data.files if k.startswith("kwarg_")}
leaves = jax.tree_util.tree_leaves(artifact(*args, **kwargs))
np.savez(sys.argv[3], *[np.asarray(leaf) for leaf in leaves])
print(json.dumps({"torch imported": "torch" in sys.modules}))
"""


def artifact_report(
    module64, model, params, buffers, args, kwargs, capture, dynamic_shapes="auto", computed_in=None
):
    """``save_exported`` the float64 evaluation program (a layer-path model is captured
    with torch.export for it), reload it with ``load_exported`` in a fresh process that
    never imports torch, run it on the example: its output against torch's."""
    import os
    import subprocess
    import sys
    import tempfile

    if not isinstance(model, ExportedModule):
        model, params, buffers, _ = convert(
            module64, args, kwargs, "export", batch_one=False, dynamic_shapes=dynamic_shapes
        )
    reference, _ = torch_eval(module64, args, kwargs)
    with tempfile.TemporaryDirectory(prefix="jaxgrad-zoo-") as folder:
        path = os.path.join(folder, "model.jaxgrad")
        jaxgrad.nn.save_exported(path, model, params, buffers or None)
        inputs = {f"arg{i}": a for i, a in enumerate(args)}
        inputs.update({f"kwarg_{k}": v for k, v in kwargs.items()})
        np.savez(os.path.join(folder, "inputs.npz"), nargs=len(args), **inputs)
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _RELOAD,
                path,
                os.path.join(folder, "inputs.npz"),
                os.path.join(folder, "out.npz"),
            ],
            capture_output=True,
            text=True,
            timeout=900,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"load_exported in a fresh process failed: "
                f"{done.stderr.strip().splitlines()[-1][:300]}"
            )
        if json.loads(done.stdout.strip().splitlines()[-1])["torch imported"]:
            raise RuntimeError("the reloaded artifact imported torch")
        with np.load(os.path.join(folder, "out.npz")) as out:
            leaves = [out[f"arr_{i}"] for i in range(len(out.files))]
    expected = [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(reference["output"])]
    return compare_float64(
        expected,
        leaves[: len(expected)] if len(leaves) >= len(expected) else leaves,
        computed_in,
        name="artifact",
    )


def compare_float64(reference, candidate, computed_in, *, name: str = "") -> ParityReport:
    """``jaxgrad.parity.compare`` of a float64 model's results, at the tier of the
    arithmetic that made them (``computed_in``):

    - ``"float64"``: declared, so that a leaf of pure rounding noise (a key projection's
      bias, whose gradient is zero in exact arithmetic: softmax ignores a shift shared
      by every key) is not taken for float32 arithmetic by its few significant bits.
      Where the model keeps a leaf in float32 (ViTMAE's mask), the float64 leaves are
      declared one by one and that leaf is judged at its dtype's tier.
    - ``"float32"`` (a model whose own code casts to float32 inside): the float64
      reference (its float32 leaves widened) is also ``reference64``, for the rule of a
      leaf zero in exact arithmetic (tolerance at its neighbours' scale): the same key
      bias is otherwise held to 1e-6 of its own ~1e-19 noise.
    """
    reference64 = None
    dtypes = [np.asarray(leaf).dtype for leaf in jax.tree_util.tree_leaves(reference)]
    floating = [d for d in dtypes if d.kind in "fc"]
    if computed_in == "float64" and not all(d in (np.float64, np.complex128) for d in floating):
        # a leaf the model keeps in float32 (ViTMAE's mask): the float64 leaves declared
        # one by one, the others judged at their dtype's tier
        reference, candidate = jaxgrad.parity.flatten(reference), jaxgrad.parity.flatten(candidate)
        computed_in = {
            path: "float64"
            for path, leaf in reference.items()
            if np.asarray(leaf).dtype in (np.float64, np.complex128)
        }
    elif computed_in == "float32":
        reference64 = _widened(reference)
    report = jaxgrad.parity.compare(
        reference, candidate, computed_in=computed_in, reference64=reference64, name=name
    )
    zero = zero_note(report)
    if zero:
        report.zoo_note = zero
    return report


def float64_report(
    module64, reference64, candidate, args, kwargs, cotangents, computed_in, *, name=""
) -> ParityReport:
    """The float64 column: ``compare_float64``; a leaf outside its tier (output or
    gradient) is then measured against torch's own rounding, as a training step's is
    (``calibrate_by_torch_noise``), on torch's results in other summation orders
    (``torch_float32_runs``: channels-last for images and clips, the batch reversed) and three
    times with every value one ulp off (``round_every_layer``, ``one_ulp``): a weight
    gradient element that cancels to ~1e-9 of its terms is beyond the float64 tier for
    torch against itself too (torchvision's fcn_resnet50: one of 9.4M elements)."""
    report = compare_float64(reference64, candidate, computed_in, name=name)
    if report.failures():
        orders = torch_float32_runs(module64, args, kwargs, cotangents)
        unit = "float32" if computed_in == "float32" else "float64"
        counted = []

        def one_ulp_runs(seeds):  # Monte Carlo arithmetic, as the training steps' runs
            for seed in seeds:
                rng = np.random.default_rng(SEED_TRAIN + 10 + seed)
                twin = copy_module(module64)
                with torch.no_grad():
                    for param in twin.parameters():
                        param.copy_(torch.from_numpy(one_ulp(param.detach().numpy(), rng, unit)))
                round_every_layer(twin, SEED_TRAIN + 10 + seed, unit)
                nudged = [
                    _torch(
                        one_ulp(a, rng, unit)
                        if isinstance(a, np.ndarray) and a.dtype.kind == "f"
                        else a
                    )
                    for a in args
                ]
                counted.append(seed)
                yield _torch_grads(
                    twin, nudged, {k: _torch(v) for k, v in kwargs.items()}, cotangents
                )
                del twin
                let_go()

        passed, outside = calibrate_by_torch_noise(
            report,
            reference64,
            candidate,
            itertools.chain(orders, one_ulp_runs(range(3))),
            more=one_ulp_runs(range(3, 3 + len(MORE_NOISE_RUNS))),
        )
        runs = len(orders) + len(counted)
        if runs:
            note = (
                f"torch against itself ({runs} runs: other summation orders, "
                f"every value one ulp off): "
                f"{outside} leaves outside their tier; {passed} of jaxgrad's leaves outside "
                f"it pass within {jaxgrad.parity.CALIBRATION_MULTIPLE:g}x torch's own distance"
            )
            report.zoo_note = "; ".join(filter(None, (getattr(report, "zoo_note", None), note)))
    return report


def zero_note(report: ParityReport) -> str | None:
    """How many leaves passed as zero in exact arithmetic (``compare``'s rule), or None."""
    zero = [leaf for leaf in report.leaves if leaf.rule == jaxgrad.parity.RULE_ZERO]
    if not zero:
        return None
    return (
        f"{len(zero)} leaves zero in exact arithmetic (rounding noise on both sides, "
        f"e.g. {zero[0].path}) judged at their neighbours' scale"
    )


def float32_regions(model) -> list[str]:
    """The torch module paths where a float64 captured program computes in float32 (the
    model's own casts); empty for a model that is not float64 or not captured."""
    if not isinstance(model, ExportedModule):
        return []
    if not any(meta.dtype == "float64" for _, meta in model.params):
        return []
    paths = []
    for program in (model.train_program, model.eval_program):
        for node in program.nodes:
            metas = node.meta if isinstance(node.meta, tuple) else (node.meta,)
            if any(isinstance(m, TensorMeta) and m.dtype == "float32" for m in metas):
                if node.path not in paths:
                    paths.append(node.path)
    return paths


def _front_end(model) -> str:
    return "export" if isinstance(model, ExportedModule) else "layers"


def _parameter_count(module) -> int:
    return sum(p.numel() for p in module.parameters())  # tied weights counted once


def run_model(entry, *, columns=COLUMNS, capture: str | None = None, progress=None) -> ZooResult:
    """Every comparison of ``columns`` for one zoo entry (see the module docstring), the
    model converted with ``capture`` (default: the entry's own).

    ``progress(message)`` is called before each stage (the CLI prints it on stderr).
    Nothing raises for a model that fails: the row records the error.
    """
    say = progress or (lambda message: None)
    result = ZooResult(entry.name, entry.library, entry.notes)
    began = time.perf_counter()
    absent = zoo_models.missing(entry)
    if absent:
        result.skipped = f"{absent} is not installed ({zoo_models.INSTALL})"
        return result
    try:
        with _precision():
            _run(entry, result, columns, capture or entry.capture, say)
    finally:
        result.seconds = time.perf_counter() - began
    return result


def _run(entry, result, columns, capture, say):
    say("build")
    built = zoo_models.build(entry)
    result.parameters = _parameter_count(built[0])
    module64, args64, kwargs64 = zoo_models.instance(built, "float64")
    say("convert float64")
    try:
        model, params, buffers, seconds = convert(
            module64,
            args64,
            kwargs64,
            capture,
            batch_one="shapes" in columns,
            dynamic_shapes=entry.dynamic_shapes,
        )
    except Exception as error:  # noqa: BLE001 - the row records why
        result.error = _first_line(error)
        return
    result.front_end, result.convert_seconds = _front_end(model), seconds
    evaluation_writes = _restore_state_written_in_evaluation(module64, model)
    if isinstance(model, ExportedModule):
        result.constants = tuple(sorted(model.constants.arrays))
    reference64 = cotangents = None
    if {"float64", "float32", "float32_grads"} & set(columns):
        say("float64 forward and gradients")
        reference64, cotangents = torch_eval(module64, args64, kwargs64)
    lowered = float32_regions(model)
    computed_in = "float64"  # both sides compute in float64 (compare_float64)
    if lowered:
        # the model's own code computes in float32 inside the float64 model (Llama's and
        # T5's RMSNorm: hidden_states.to(torch.float32)); float32 rounding then reaches
        # every leaf, which the policy judges at the tier of that arithmetic
        computed_in = "float32"
        shown = ", ".join(lowered[:3]) + (
            f" and {len(lowered) - 3} more" if len(lowered) > 3 else ""
        )
        result.computed_in_note = (
            f"the float64 model computes in float32 where its own "
            f"code casts (at {shown}): its float64 leaves are judged "
            f"at the float32 tier, the tier of that arithmetic"
        )
    if "float64" in columns:
        result.columns["float64"] = _column(
            lambda: float64_report(
                module64,
                reference64,
                jax_eval(model, params, buffers, args64, kwargs64, cotangents),
                args64,
                kwargs64,
                cotangents,
                computed_in,
                name=f"{entry.name} float64",
            )
        )
    if "float32" in columns or "float32_grads" in columns:
        say("float32 forward and gradients")
        try:
            forward, grads = _float32(entry, built, cotangents, reference64, capture)
        except Exception as error:  # noqa: BLE001 - a crashing comparison is an error cell
            forward = grads = error
        result.columns["float32"] = _column(lambda: _raised(forward))
        result.columns["float32_grads"] = _column(lambda: _raised(grads))
    if "shapes" in columns:
        say("other shapes")
        result.columns["shapes"] = _column(
            lambda: shapes_report(module64, model, params, buffers, args64, kwargs64, computed_in)
        )
    if "artifact" in columns:
        say("artifact")
        result.columns["artifact"] = _column(
            lambda: artifact_report(
                module64,
                model,
                params,
                buffers,
                args64,
                kwargs64,
                capture,
                entry.dynamic_shapes,
                computed_in,
            )
        )
    if "train" in columns:
        say(f"{STEPS} training steps")
        # the last column starts every step from torch's state: the conversion's params
        # and the float64 column's results are let go first (a large model's copies)
        params = reference64 = cotangents = None
        if evaluation_writes is not None:  # training carries the written state on
            evaluation_writes.remove()
        result.columns["train"] = _column(
            lambda: _train(
                entry,
                built,
                module64,
                model,
                params,
                buffers,
                args64,
                kwargs64,
                result,
                computed_in,
            )
        )


def _column(run) -> Column:
    try:
        report = run()
    except Exception as error:  # noqa: BLE001 - a crashing comparison is an error cell
        return Column("error", error=_first_line(error) + _where(error))
    note = getattr(report, "zoo_note", None)
    return Column("pass" if report.passed else "fail", report=report, note=note)


def _where(error: BaseException) -> str:
    """The innermost frame of an unexpected error (a bug to report, not a refusal)."""
    if isinstance(error, ValueError):
        return ""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" (at {last.filename.rsplit('/', 2)[-2:][-1]}:{last.lineno})"


def _raised(value):
    if isinstance(value, BaseException):
        raise value
    return value


def _widened(tree):
    """``tree`` with its float16/32 leaves as float64 (exactly: a float64 model's output
    that the model itself keeps in float32, ViTMAE's mask, is its own float64 answer)."""
    return jax.tree_util.tree_map(
        lambda leaf: (
            leaf.astype(np.float64)
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind == "f" and leaf.dtype != np.float64
            else leaf
        ),
        tree,
    )


def _float32(entry, built, cotangents, reference64, capture) -> tuple:
    """``(forward report, gradients report)`` of the float32 model, each judged by
    ``compare``'s calibrated float32 rule against ``reference64`` (torch's float64 run of
    an exact copy of the float32 model, on the same inputs and cotangents); each report's
    ``zoo_note`` counts the leaves passed by each rule (``calibrated_note``)."""
    module32, args32, kwargs32 = zoo_models.instance(built, "float32")
    model, params, buffers, _ = convert(
        module32, args32, kwargs32, capture, dynamic_shapes=entry.dynamic_shapes
    )
    reference32, _ = torch_eval(module32, args32, kwargs32, cotangents)
    candidate32 = jax_eval(model, params, buffers, args32, kwargs32, cotangents)
    reports = []
    for part, label in (("output", "forward"), ("grads", "gradients")):
        report = jaxgrad.parity.compare(
            {part: reference32[part]},
            {part: candidate32[part]},
            reference64={part: _widened(reference64[part])},
            name=f"{entry.name} float32 {label}",
        )
        report.zoo_note = calibrated_note(report)
        reports.append(report)
    return tuple(reports)


def torch_float32_runs(module, args, kwargs, cotangents) -> list[dict]:
    """torch's outputs and gradients of the same model in other summation orders (each
    ``{"output", "grads"}`` as ``torch_eval`` gives them, the output in the example's
    batch order): channels-last tensors where an input is an image or a clip, and the batch
    reversed where every input and output leaf is batched the same way."""
    runs = []
    if _has_layout_input(args):
        twin = _module_channels_last(copy_module(module))
        torch_args, torch_kwargs = _torch_inputs(args, kwargs, channels_last=True)
        runs.append(_torch_grads(twin, torch_args, torch_kwargs, cotangents))
    batched = [a for a in (*args, *kwargs.values()) if isinstance(a, np.ndarray)]
    sizes = {a.shape[0] for a in batched if a.ndim}
    if (
        len(sizes) == 1
        and sizes.pop() > 1
        and all(c.ndim and c.shape[0] == batched[0].shape[0] for c in cotangents)
    ):
        flip = lambda a: np.ascontiguousarray(a[::-1]) if isinstance(a, np.ndarray) else a
        run = _torch_grads(
            module,
            [_torch(flip(a)) for a in args],
            {k: _torch(flip(v)) for k, v in kwargs.items()},
            [flip(c) for c in cotangents],
        )
        if "output" in run:  # each example back in its place
            run["output"] = jax.tree_util.tree_map(
                lambda a: flip(a) if a.ndim and a.shape[0] == batched[0].shape[0] else a,
                run["output"],
            )
        runs.append(run)
    return runs


def _torch_grads(module, torch_args, torch_kwargs, cotangents) -> dict:
    """torch's evaluation-mode ``{"output", "grads"}`` (of ``Σ c·output``), as
    ``torch_eval`` records them, on inputs already made; ``{"grads": {}}`` where the
    output has other floating leaves than ``cotangents``."""
    module.eval()
    module.zero_grad(set_to_none=True)
    output = plain(module(*torch_args, **torch_kwargs))
    leaves = float_leaves(output)
    if len(leaves) != len(cotangents):
        return {"grads": {}}
    sum(
        (torch.from_numpy(np.ascontiguousarray(c)) * o).sum() for c, o in zip(cotangents, leaves)
    ).backward()
    grads = {
        n: p.grad.numpy().copy() for n, p in named_parameters(module).items() if p.grad is not None
    }
    module.zero_grad(set_to_none=True)
    return {"output": _detached(output), "grads": grads}


def calibrated_note(report: ParityReport) -> str | None:
    """How many float32 leaves outside the tier against torch's float32 passed by each
    calibrated rule of ``compare`` (``LeafResult.rule``), and how far jaxgrad and torch
    were from the float64 answer on them (in units of the float32 tier); None when the
    tier passed every leaf."""
    calibrated = [leaf for leaf in report.leaves if leaf.passed and leaf.rule != "tier"]
    if not calibrated:
        return None
    counts = {}
    for leaf in calibrated:
        counts[leaf.rule] = counts.get(leaf.rule, 0) + 1
    worst = max(calibrated, key=lambda leaf: leaf.headroom)
    return (
        f"{len(calibrated)} of {len(report.leaves)} float32 leaves outside the tier "
        f"against torch's float32 pass against its float64 answer ("
        + ", ".join(f"{rule}: {n}" for rule, n in sorted(counts.items()))
        + f"; jaxgrad up to {worst.headroom:.2f}x the tier from float64, torch "
        f"{worst.reference_headroom:.2f}x on that leaf)"
    )


def _train(
    entry, built, module64, model, params, buffers, args, kwargs, result, computed_in=None
) -> ParityReport:
    del params, buffers  # every step starts from torch's state (train_steps)
    if not isinstance(model, ExportedModule) and torch_draws_in_training(module64, args, kwargs):
        model, _, _, _ = convert(
            module64, args, kwargs, "export", dynamic_shapes=entry.dynamic_shapes
        )
        result.random_note = (
            "trained through capture='export': the layer path takes no injected random draws"
        )
    report, info = train_steps(
        module64,
        model,
        args,
        kwargs,
        computed_in=computed_in,
        name=f"{entry.name} {STEPS} train steps",
    )
    result.compile_seconds = info["first_call_seconds"]
    result.random_ops = info["random_ops"]
    result.dropped = info["dropped"]
    noise = info["noise"]
    notes = [zero_note(report)]
    if noise["steps"]:
        notes.append(
            f"torch against itself (channels-last; the batch reversed; BatchNorm's "
            f"statistics summed by torch.mean; every value one ulp "
            f"off, 3 seeds, up to 12 while a leaf still fails) on "
            f"the {noise['steps']} step(s) with leaves outside the tier: "
            f"{noise['torch_outside']} leaves outside their tier; "
            f"{noise['leaves']} of jaxgrad's leaves outside it pass within "
            f"{jaxgrad.parity.CALIBRATION_MULTIPLE:g}x torch's own distance"
        )
    if any(notes):
        report.zoo_note = "; ".join(note for note in notes if note)
    return report


__all__ = [
    "run_model",
    "ZooResult",
    "Column",
    "COLUMNS",
    "VERDICT",
    "COLUMN_TITLES",
    "STEPS",
    "SGD",
    "torch_eval",
    "jax_eval",
    "train_steps",
    "torch_step",
    "torch_noise_step",
    "compare_float64",
    "float64_report",
    "round_every_layer",
    "one_ulp",
    "copy_module",
    "zero_note",
    "NOISE_RUNS",
    "calibrate_by_torch_noise",
    "RULE_TORCH_NOISE",
    "convert",
    "plain",
    "calibrated_note",
    "torch_float32_runs",
    "square_loss_torch",
    "square_loss_jax",
]
