"""Jit-compiled training steps and epochs, and their evaluation twin.

A train step is one pure function ``(params, opt_state, batch) -> (params,
opt_state, metrics)``: forward, ``jax.value_and_grad``, optimizer update. It is
the functional twin of torch's ``zero_grad(); loss.backward(); optimizer.step()``:
nothing accumulates between calls, so nothing needs zeroing.

- ``batch`` is ``(x, y)``: inputs `(batch, *features)` and targets `(batch, *)`.
- ``metrics`` is ``{"loss": scalar, "grad_norm": scalar, "grads_finite":
  {param name: bool scalar}}``; the loop uses ``grads_finite`` to name the first
  parameter whose gradient went non-finite.
- ``params`` and ``opt_state`` are donated: the arrays passed in are consumed and
  must not be used again (the returned ones replace them), so XLA updates in place.

Options compose the autograd-semantics pieces: ``accumulate=K`` splits each batch
into K equal micro-batches and averages their gradients with
``jaxgrad.accumulate.accumulate_grads`` (torch: K ``backward()`` calls on ``loss/K``
before one ``step()``); ``clip`` is torch's ``clip_grad_norm_`` before the
optimizer; ``frozen`` keeps the named parameters fixed (torch:
``requires_grad_(False)``). ``compute_dtype="bfloat16"`` is mixed precision: the
forward and backward run in bfloat16, the master parameters, the loss and the
optimizer stay float32.

``make_train_epoch`` fuses a whole run of pre-batched data into one call with
``jax.lax.scan``: one dispatch per epoch instead of one per step.
``make_train_stretch`` runs any stretch ``[start, stop)`` of an epoch's stacked batches
in one compiled call per epoch shape (what ``Trainer`` runs between checkpoints).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

import jax
import jax.numpy as jnp
import optax

from jaxgrad.accumulate import accumulate_grads, split_batch
from jaxgrad.nn.functional._lowering import in_loop
from jaxgrad.optim import clip_grad_norm_transform, freeze, global_norm
from jaxgrad.optim.clipping import leaf_norms, total_of_norms

COMPUTE_DTYPES = (None, "float32", "float64", "bfloat16")


def build_optimizer(
    optimizer: optax.GradientTransformation,
    *,
    clip: float | None = None,
    frozen: Iterable[str] | Callable | None = None,
) -> optax.GradientTransformation:
    """``optimizer`` with torch's norm clipping in front and frozen parameters masked.

    ``frozen`` is what ``jaxgrad.optim.freeze`` takes: name prefixes (``["0"]``
    freezes ``0.weight`` and ``0.bias``) or a predicate on the dotted name.

    Clipping sees only trainable parameters, as torch's ``clip_grad_norm_`` over
    ``model.parameters()`` skips frozen ones (their ``.grad`` is None).

    Args:
      optimizer: an optax transformation (``jaxgrad.optim.sgd(...)``…).
      clip: ``clip_grad_norm_``'s ``max_norm`` (None: no clipping).
      frozen: parameters to freeze, as ``jaxgrad.optim.freeze`` takes them (None: none).

    Returns:
      An optax transformation.

    Raises:
      ValueError: a ``clip`` that is not positive.
    """
    if clip is not None:
        if not clip > 0:
            raise ValueError(f"`clip` (={clip}) must be a positive max norm, or None.")
        optimizer = optax.chain(clip_grad_norm_transform(clip), optimizer)
    if callable(frozen) or frozen:  # a predicate on names, or name prefixes
        optimizer = freeze(optimizer, frozen)
    return optimizer


def forward(model, compute_dtype, params, x):
    """``model.apply`` in ``compute_dtype``; bfloat16 outputs come back as float32.

    Casting the float32 master params inside the differentiated function makes
    their gradients float32 again (the cast's transpose), as torch autocast does.
    Integer inputs (token ids) are never cast: bfloat16 holds integers exactly only
    up to 256, and torch's autocast leaves them alone too.
    """
    if compute_dtype is not None:
        params = jax.tree_util.tree_map(lambda p: p.astype(compute_dtype), params)
        if jnp.issubdtype(x.dtype, jnp.floating):
            x = x.astype(compute_dtype)
    outputs = model.apply(params, x)
    if compute_dtype == "bfloat16":
        outputs = outputs.astype(jnp.float32)
    return outputs


def _objective(model, loss_fn: Callable, compute_dtype):
    """``(params, (x, y)) -> loss``, float32 loss whatever the compute dtype."""

    def objective(params, batch):
        x, y = batch
        return loss_fn(forward(model, compute_dtype, params, x), y)

    return objective


def compute_dtype_error(model, loss_fn: Callable, params, batch, compute_dtype) -> dict:
    """How far one step's loss and gradients in ``compute_dtype`` are from the params' dtype.

    The price of a faster, lower-precision path (``"bfloat16"``: bf16 matmuls, AMX
    tiles on CPUs that have them) measured on the batch itself, to print beside its
    speed.

    Args:
      model: a ``jaxgrad.nn`` model.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``.
      params: the parameters (in the dtype the reference step computes in).
      batch: ``(x, y)``.
      compute_dtype: the lower precision to measure (``"bfloat16"``).

    Returns:
      ``{"loss": |l - l_ref| / |l_ref|, "grads": ||g - g_ref|| / ||g_ref||}`` (global
      2-norms over every parameter), as Python floats.
    """
    _check_options(1, compute_dtype)

    @jax.jit
    def errors(params, batch):
        loss_ref, grads_ref = jax.value_and_grad(_objective(model, loss_fn, None))(params, batch)
        loss, grads = jax.value_and_grad(_objective(model, loss_fn, compute_dtype))(params, batch)
        difference = jax.tree_util.tree_map(lambda a, b: a.astype(b.dtype) - b, grads, grads_ref)
        return (
            jnp.abs(loss - loss_ref) / jnp.abs(loss_ref),
            global_norm(difference) / global_norm(grads_ref),
        )

    loss_error, grads_error = errors(params, batch)
    return {"loss": float(loss_error), "grads": float(grads_error)}


def _check_options(accumulate: int, compute_dtype) -> None:
    if not isinstance(accumulate, int) or isinstance(accumulate, bool) or accumulate < 1:
        raise ValueError(f"`accumulate` (={accumulate!r}) must be an int >= 1.")
    if compute_dtype not in COMPUTE_DTYPES:
        raise ValueError(f"`compute_dtype` (={compute_dtype!r}) must be one of {COMPUTE_DTYPES}.")


def _all_finite(gradient, norm):
    """Whether every element of ``gradient`` is finite, given its 2-norm: a finite norm
    (a sum of squares) has no NaN or ±∞ among its terms, so only a non-finite one (or
    an overflowing sum of huge finite values) reads the gradient again. One pass over
    the gradients per step instead of two (the check alone was about 9 % of the
    784-256-10 MLP's step at batch 128 on XLA:CPU)."""
    return jax.lax.cond(
        jnp.isfinite(norm),
        lambda g: jnp.asarray(True),
        lambda g: jnp.all(jnp.isfinite(g)),
        gradient,
    )


def step_fn(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    accumulate: int = 1,
    compute_dtype=None,
    shardings: tuple | None = None,
) -> Callable:
    """The un-jitted step body shared by ``make_train_step`` and ``make_train_epoch``.

    ``shardings``: ``(params shardings, opt_state shardings)``, pytrees of
    ``NamedSharding`` like them (``jaxgrad.train.fsdp``); each step's new params and
    state are held in them (``with_sharding_constraint``: XLA reduce-scatters the
    gradients to fit), its metrics replicated. None: XLA chooses (data parallelism keeps
    the inputs' replication).
    """
    _check_options(accumulate, compute_dtype)
    objective = _objective(model, loss_fn, compute_dtype)
    update = update_fn(optimizer, shardings=shardings)

    def step(params, opt_state, batch):
        if accumulate == 1:
            loss, grads = jax.value_and_grad(objective)(params, batch)
        else:
            loss, grads = accumulate_grads(
                objective, params, split_batch(batch, accumulate), reduction="mean"
            )
        return update(params, opt_state, loss, grads)

    return step


def update_fn(optimizer: optax.GradientTransformation, *, shardings: tuple | None = None):
    """``(params, opt_state, loss, grads) -> (params, opt_state, metrics)``: the second
    half of every step (plain or with buffers): the optimizer's update and the step's
    metrics, the new state held in ``shardings`` (``step_fn``'s) when given."""
    if shardings is not None:
        param_shardings, state_shardings = shardings
        mesh = jax.tree_util.tree_leaves(param_shardings)[0].mesh
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def update(params, opt_state, loss, grads):
        updates, opt_state = optimizer.update(grads, opt_state, params)
        params = optax.apply_updates(params, updates)
        names = sorted(grads)  # jax.tree.leaves' order: global_norm's bits
        norms = leaf_norms([grads[k] for k in names])
        metrics = {
            "loss": loss,
            "grad_norm": total_of_norms(norms),
            "grads_finite": {k: _all_finite(grads[k], n) for k, n in zip(names, norms)},
        }
        if shardings is not None:
            params = jax.lax.with_sharding_constraint(params, param_shardings)
            opt_state = jax.lax.with_sharding_constraint(opt_state, state_shardings)
            metrics = jax.tree_util.tree_map(
                lambda m: jax.lax.with_sharding_constraint(m, replicated), metrics
            )
        return params, opt_state, metrics

    return update


def make_train_step(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    accumulate: int = 1,
    compute_dtype=None,
    donate: bool = True,
    jit: bool = True,
    shardings: tuple | None = None,
) -> Callable:
    """A jitted ``(params, opt_state, (x, y)) -> (params, opt_state, metrics)``.

    Args:
      model: a ``jaxgrad.nn`` layer (``apply(params, x)``).
      loss_fn: ``loss_fn(outputs, targets) -> scalar``, e.g. ``jaxgrad.losses.cross_entropy``.
      optimizer: an optax transformation (``build_optimizer`` adds clipping/freezing).
      accumulate: micro-batches per step (the batch's leading dim must divide by it).
      compute_dtype: None (the params' dtype) or ``"bfloat16"`` for mixed precision.
      donate: donate ``params`` and ``opt_state`` to the call (in-place update).
      jit: False returns the plain Python function, for debugging and parity tests.
      shardings: ``(params shardings, opt_state shardings)`` the step's outputs are
        kept in (``jaxgrad.train.fsdp``; None: XLA chooses).

    Returns:
      The step function; ``metrics`` holds the step's ``loss``, the gradients'
      ``grad_norm`` (before clipping) and whether they were finite (module docstring).
    """
    step = step_fn(
        model,
        loss_fn,
        optimizer,
        accumulate=accumulate,
        compute_dtype=compute_dtype,
        shardings=shardings,
    )
    if not jit:
        return step
    return jax.jit(step, donate_argnums=(0, 1) if donate else ())


def make_train_epoch(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    accumulate: int = 1,
    compute_dtype=None,
    donate: bool = True,
    unroll: int | bool = 1,
) -> Callable:
    """A jitted ``(params, opt_state, (xs, ys)) -> (params, opt_state, metrics)``.

    ``xs`` `(steps, batch, *features)` and ``ys`` `(steps, batch, *)` hold the
    epoch's batches stacked; ``jax.lax.scan`` runs the steps in order inside one
    compiled call, and every metric comes back with a leading `(steps,)` axis.
    Each distinct ``steps`` compiles once.

    Args:
      model: a ``jaxgrad.nn`` layer, as ``make_train_step``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``.
      optimizer: an optax transformation.
      accumulate: micro-batches per step.
      compute_dtype: None (the params' dtype) or ``"bfloat16"``.
      donate: donate ``params`` and ``opt_state`` to the call.
      unroll: ``lax.scan``'s ``unroll``: 1 a rolled loop, K copies of the step per loop
        iteration, True no loop at all (compile time grows with ``steps``).

    Returns:
      The jitted epoch function; ``metrics`` as ``make_train_step``'s, each `(steps,)`.
    """
    step = step_fn(model, loss_fn, optimizer, accumulate=accumulate, compute_dtype=compute_dtype)

    def epoch(params, opt_state, batches):
        def body(carry, batch):
            params, opt_state, metrics = step(*carry, batch)
            return (params, opt_state), metrics

        with in_loop(unroll is not True):  # convolutions in a rolled loop: patches
            (params, opt_state), metrics = jax.lax.scan(
                body, (params, opt_state), batches, unroll=unroll
            )
        return params, opt_state, metrics

    return jax.jit(epoch, donate_argnums=(0, 1) if donate else ())


def make_train_stretch(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    accumulate: int = 1,
    compute_dtype=None,
    donate: bool = True,
    unroll: int | bool = 1,
    shardings: tuple | None = None,
) -> Callable:
    """A jitted ``(params, opt_state, (xs, ys), start, stop) -> (params, opt_state, metrics)``
    that runs steps ``start … stop - 1`` of an epoch's stacked batches.

    ``xs`` `(steps, batch, *features)` and ``ys`` `(steps, batch, *)` hold the whole
    epoch; ``start`` and ``stop`` are traced int scalars, so every stretch of the epoch
    (between checkpoints, after a resume) runs the one compiled call of that epoch's
    shape: a checkpoint never compiles a new length, and each step runs the same
    compiled code whichever stretch it falls in. Metrics come back `(steps,)` long;
    only ``[start:stop]`` is written (the rest is zero).

    Args:
      model: as ``make_train_epoch``.
      loss_fn: as ``make_train_epoch``.
      optimizer: as ``make_train_epoch``.
      accumulate: as ``make_train_epoch``.
      compute_dtype: as ``make_train_epoch``.
      donate: as ``make_train_epoch``.
      unroll: 1 a rolled loop of ``stop - start`` iterations (a dynamic trip count);
        K blocks of K steps, each step guarded by a ``lax.cond`` on ``i < stop``; True
        no loop, one guarded step per position (compile time grows with ``steps``).
      shardings: as ``make_train_step``: every step's params and state kept in them.

    Returns:
      The jitted stretch function; ``metrics`` as ``make_train_step``'s, each `(steps,)`.
    """
    step = step_fn(
        model,
        loss_fn,
        optimizer,
        accumulate=accumulate,
        compute_dtype=compute_dtype,
        shardings=shardings,
    )
    run = stretch_loop(
        lambda state, batch, i: _state_and_metrics(step(*state, batch)), unroll=unroll
    )

    def stretch(params, opt_state, batches, start, stop):
        (params, opt_state), metrics = run((params, opt_state), batches, start, stop)
        return params, opt_state, metrics

    return jax.jit(stretch, donate_argnums=(0, 1) if donate else ())


def _state_and_metrics(outputs):
    *state, metrics = outputs
    return tuple(state), metrics


def stretch_loop(step: Callable, *, unroll: int | bool = 1) -> Callable:
    """The loop of ``make_train_stretch``, over any training state.

    Args:
      step: ``(state, batch, i) -> (state, metrics)``; ``state`` a tuple of pytrees
        (``(params, opt_state)``, or with buffers), ``i`` the step's traced index in
        the epoch (what keys its randomness).
      unroll: as ``make_train_stretch``'s.

    Returns:
      ``(state, batches, start, stop) -> (state, metrics)``, un-jitted: steps ``start …
      stop - 1`` of the stacked batches; metrics `(steps,)` long, written at
      ``[start:stop]`` only (the rest is zero).
    """
    if not (unroll is True or (isinstance(unroll, int) and unroll >= 1)):
        raise ValueError(f"`unroll` (={unroll!r}) must be True or an int >= 1.")

    def stretch(state, batches, start, stop):
        length = jax.tree_util.tree_leaves(batches)[0].shape[0]
        first = jax.tree_util.tree_map(lambda a: a[0], batches)
        shapes = jax.eval_shape(lambda s, b: step(s, b, 0)[1], state, first)
        metrics = jax.tree_util.tree_map(lambda s: jnp.zeros((length,) + s.shape, s.dtype), shapes)

        def one(i, carry):
            state, metrics = carry
            batch = jax.tree_util.tree_map(
                lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), batches
            )
            state, new = step(state, batch, i)
            metrics = jax.tree_util.tree_map(
                lambda buf, v: jax.lax.dynamic_update_index_in_dim(buf, v, i, 0), metrics, new
            )
            return state, metrics

        def guarded(i, carry, valid):
            return jax.lax.cond(valid, lambda c: one(i, c), lambda c: c, carry)

        carry = (state, metrics)
        with in_loop(unroll is not True):  # convolutions in a rolled loop: patches
            if unroll is True:
                for i in range(length):
                    carry = guarded(i, carry, (i >= start) & (i < stop))
            elif unroll == 1:
                carry = jax.lax.fori_loop(start, stop, one, carry)
            else:

                def block(b, carry):
                    for j in range(unroll):
                        i = start + b * unroll + j
                        carry = guarded(i, carry, i < stop)
                    return carry

                blocks = (stop - start + unroll - 1) // unroll
                carry = jax.lax.fori_loop(0, blocks, block, carry)
        return carry

    return stretch


@functools.partial(jax.jit, static_argnums=(0, 1, 2))
def _eval_batch(model, loss_fn, compute_dtype, params, x, y):
    outputs = forward(model, compute_dtype, params, x)
    correct = jnp.sum(jnp.argmax(outputs, axis=-1) == y)
    return loss_fn(outputs, y) * x.shape[0], correct


def evaluate(
    model, params, x, y, *, loss_fn: Callable, batch_size: int = 1024, compute_dtype=None
) -> dict:
    """Mean loss and accuracy of ``model`` on ``(x, y)``, batched, no gradients.

    Args:
      model: a ``jaxgrad.nn`` model.
      params: its parameters.
      x: inputs `(n, *features)`.
      y: integer class labels `(n,)`.
      loss_fn: a mean-reduced ``loss_fn(outputs, targets)``.
      batch_size: examples per forward pass.
      compute_dtype: None (the params' dtype) or ``"bfloat16"``.

    Returns:
      ``{"loss": float, "accuracy": float in [0, 1], "examples": n}``.
    """
    n = len(x)
    if n == 0:
        raise ValueError("evaluate: `x` is empty.")
    total_loss, total_correct = 0.0, 0
    for start in range(0, n, batch_size):
        loss_sum, correct = _eval_batch(
            model,
            loss_fn,
            compute_dtype,
            params,
            jnp.asarray(x[start : start + batch_size]),
            jnp.asarray(y[start : start + batch_size]),
        )
        total_loss += float(loss_sum)
        total_correct += int(correct)
    return {"loss": total_loss / n, "accuracy": total_correct / n, "examples": n}
