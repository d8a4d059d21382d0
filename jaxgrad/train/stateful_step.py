"""Training steps for models with buffers (BatchNorm) or randomness (Dropout).

The twin of ``jaxgrad.train.step`` for models whose ``apply`` needs ``buffers`` and a
``key``. A step is one pure function

    ``(params, buffers, opt_state, batch, key) -> (params, buffers, opt_state, metrics)``

— torch's ``module.train(); loss = loss_fn(module(x), y); loss.backward();
optimizer.step()``, where the forward also updates the running statistics: the
buffers returned by the training-mode forward become the next step's buffers.
Gradients are taken with respect to ``params`` only, as torch's buffers get none.

- ``batch`` is ``(x, y)``; ``key`` a ``jax.random`` key for this step (dropout masks;
  layers derive their own from it by path); ``metrics`` as ``jaxgrad.train.step``'s
  (``loss``, ``grad_norm``, ``grads_finite``).
- ``accumulate=K``: torch's K forwards and ``backward()`` calls on ``loss / K`` before
  one ``step()``. The micro-batches run in order, each forward updating the buffers the
  next one reads (BatchNorm's running statistics move K times per step, as torch's
  do); micro-batch ``j`` draws with ``fold_in(key, j)``.
- ``make_stateful_train_epoch`` scans a stack of batches in one compiled call, step
  ``i`` drawing with ``fold_in(key, i)``; ``make_stateful_train_stretch`` runs any
  ``[start, stop)`` of them, as ``make_train_stretch`` does (what ``Trainer`` runs for
  a model with buffers), with the same keys.
- ``evaluate_stateful``: evaluation mode (running statistics, no dropout).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxgrad.nn.functional._lowering import in_loop
from jaxgrad.train.step import stretch_loop, update_fn

STATEFUL_COMPUTE_DTYPES = (None, "float32", "float64")


def as_key(key):
    """A typed ``jax.random`` key, from one or from its raw ``uint32`` data
    (``jax.random.key_data``: what a host passes to a step that spans processes); None
    stays None (a model that draws nothing)."""
    if key is None or jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return key
    return jax.random.wrap_key_data(key)


def step_key(seed: int, epoch: int, index: int | None = None) -> np.ndarray:
    """The raw key data of ``fold_in(fold_in(key(seed), epoch), index)``: the key of
    step ``index`` of ``epoch`` (None: the epoch's key, which a stretch folds itself)."""
    key = jax.random.fold_in(jax.random.key(seed), epoch)
    if index is not None:
        key = jax.random.fold_in(key, index)
    return np.asarray(jax.random.key_data(key))


def stateful_step_fn(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    accumulate: int = 1,
    compute_dtype=None,
    shardings: tuple | None = None,
):
    """The un-jitted step (see the module docstring).

    Args:
      model: a ``jaxgrad.nn`` model taking ``buffers`` and ``key``.
      loss_fn: ``loss_fn(outputs, targets) -> scalar``.
      optimizer: an optax transformation.
      accumulate: micro-batches per step (the batch's leading dim must divide by it).
      compute_dtype: None: the params' own dtype (a model with buffers computes in it;
        bfloat16 autocast is for models without).
      shardings: ``(params shardings, opt_state shardings)`` as ``step_fn``'s; the
        buffers are kept replicated.

    Raises:
      ValueError: a bad ``accumulate`` or ``compute_dtype``.
    """
    if not isinstance(accumulate, int) or isinstance(accumulate, bool) or accumulate < 1:
        raise ValueError(f"`accumulate` (={accumulate!r}) must be an int >= 1.")
    if compute_dtype not in STATEFUL_COMPUTE_DTYPES:
        raise ValueError(
            f"`compute_dtype` (={compute_dtype!r}): a model with buffers trains in its own "
            f"dtype; expected one of {STATEFUL_COMPUTE_DTYPES}."
        )
    update = update_fn(optimizer, shardings=shardings)
    if shardings is not None:
        mesh = jax.tree_util.tree_leaves(shardings[0])[0].mesh
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

    def objective(params, buffers, batch, key):
        x, y = batch
        outputs, new_buffers = model.apply(params, x, buffers=buffers, train=True, key=key)
        return loss_fn(outputs, y), new_buffers

    value_and_grad = jax.value_and_grad(objective, has_aux=True)

    def gradients(params, buffers, batch, key):
        if accumulate == 1:
            (loss, buffers), grads = value_and_grad(params, buffers, batch, key)
            return loss, grads, buffers
        micro = jax.tree_util.tree_map(
            lambda a: a.reshape(accumulate, a.shape[0] // accumulate, *a.shape[1:]), batch
        )

        def body(carry, inputs):
            loss_total, grads_total, buffers = carry
            index, micro_batch = inputs
            micro_key = None if key is None else jax.random.fold_in(key, index)
            (loss, buffers), grads = value_and_grad(params, buffers, micro_batch, micro_key)
            grads_total = jax.tree_util.tree_map(jnp.add, grads_total, grads)
            return (loss_total + loss, grads_total, buffers), None

        loss_dtype = jax.eval_shape(
            objective, params, buffers, jax.tree_util.tree_map(lambda a: a[0], micro), key
        )[0].dtype
        zeros = (jnp.zeros((), loss_dtype), jax.tree_util.tree_map(jnp.zeros_like, params))
        with in_loop():  # convolutions in a rolled loop: patches (nn.functional._lowering)
            (loss, grads, buffers), _ = jax.lax.scan(
                body, (*zeros, buffers), (jnp.arange(accumulate), micro)
            )
        # the mean over micro-batches, as jaxgrad.accumulate.accumulate_grads takes it
        return loss / accumulate, jax.tree_util.tree_map(lambda g: g / accumulate, grads), buffers

    def step(params, buffers, opt_state, batch, key):
        loss, grads, buffers = gradients(params, buffers, batch, as_key(key))
        params, opt_state, metrics = update(params, opt_state, loss, grads)
        if shardings is not None:
            buffers = jax.lax.with_sharding_constraint(buffers, replicated)
        return params, buffers, opt_state, metrics

    return step


def make_stateful_train_step(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    jit: bool = True,
    donate: bool = True,
    **options,
) -> Callable:
    """A jitted ``(params, buffers, opt_state, (x, y), key) -> (params, buffers,
    opt_state, metrics)``; ``params``, ``buffers`` and ``opt_state`` are donated.
    ``options``: ``stateful_step_fn``'s (``accumulate``, ``compute_dtype``, ``shardings``)."""
    step = stateful_step_fn(model, loss_fn, optimizer, **options)
    if not jit:
        return step
    return jax.jit(step, donate_argnums=(0, 1, 2) if donate else ())


def make_stateful_train_epoch(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    donate: bool = True,
    unroll: int | bool = 1,
    **options,
) -> Callable:
    """A jitted ``(params, buffers, opt_state, (xs, ys), key) -> (params, buffers,
    opt_state, metrics)`` over batches stacked `(steps, batch, *)`, with
    ``jax.lax.scan``; step ``i`` gets ``fold_in(key, i)``; metrics gain a `(steps,)` axis.

    ``unroll`` is ``lax.scan``'s (True: no loop, at the price of a compilation that
    grows with the step count). On XLA's CPU backend a convolution inside a rolled loop
    body is not canonicalised and ran the ResNet of ``torchref.models`` 4–5× slower;
    convolutions traced in the rolled loop are lowered as patches and a matrix product
    instead (``jaxgrad.nn.functional._lowering``). ``options``: ``stateful_step_fn``'s."""
    step = stateful_step_fn(model, loss_fn, optimizer, **options)

    def epoch(params, buffers, opt_state, batches, key):
        xs, ys = batches

        def body(carry, inputs):
            index, x, y = inputs
            params, buffers, opt_state, metrics = step(
                *carry, (x, y), jax.random.fold_in(key, index)
            )
            return (params, buffers, opt_state), metrics

        indices = jnp.arange(xs.shape[0])
        with in_loop(unroll is not True):  # convolutions in a rolled loop: patches
            (params, buffers, opt_state), metrics = jax.lax.scan(
                body, (params, buffers, opt_state), (indices, xs, ys), unroll=unroll
            )
        return params, buffers, opt_state, metrics

    return jax.jit(epoch, donate_argnums=(0, 1, 2) if donate else ())


def make_stateful_train_stretch(
    model,
    loss_fn: Callable,
    optimizer: optax.GradientTransformation,
    *,
    donate: bool = True,
    unroll: int | bool = 1,
    **options,
) -> Callable:
    """A jitted ``(params, buffers, opt_state, (xs, ys), start, stop, key) -> (params,
    buffers, opt_state, metrics)`` running steps ``start … stop - 1`` of an epoch's
    stacked batches (``make_train_stretch``'s contract), step ``i`` drawing with
    ``fold_in(key, i)`` as in ``make_stateful_train_epoch``. ``options``:
    ``stateful_step_fn``'s."""
    step = stateful_step_fn(model, loss_fn, optimizer, **options)

    def indexed(state, batch, i, key):
        params, buffers, opt_state, metrics = step(*state, batch, jax.random.fold_in(key, i))
        return (params, buffers, opt_state), metrics

    def stretch(params, buffers, opt_state, batches, start, stop, key):
        key = as_key(key)
        run = stretch_loop(lambda state, batch, i: indexed(state, batch, i, key), unroll=unroll)
        (params, buffers, opt_state), metrics = run(
            (params, buffers, opt_state), batches, start, stop
        )
        return params, buffers, opt_state, metrics

    return jax.jit(stretch, donate_argnums=(0, 1, 2) if donate else ())


def evaluate_stateful(
    model, params, buffers, x, y, *, loss_fn: Callable, batch_size: int = 1024
) -> dict:
    """Mean loss and accuracy in evaluation mode (running statistics, no dropout).

    A last batch of one example is evaluated beside a copy of itself (its output is
    the first row): a model captured with a dynamic batch (``torch.export``) runs from
    batch 2 up, and in evaluation mode no example's output depends on another's.

    Args:
      x: inputs `(n, *features)`; y: integer labels `(n,)`.

    Returns:
      ``{"loss": float, "accuracy": float in [0, 1], "examples": n}``.
    """
    n = len(x)
    if n == 0:
        raise ValueError("evaluate_stateful: `x` is empty.")

    @jax.jit
    def batch_metrics(params, buffers, x, y):
        outputs, _ = model.apply(params, x, buffers=buffers)
        outputs = outputs[: y.shape[0]]
        return loss_fn(outputs, y) * y.shape[0], jnp.sum(jnp.argmax(outputs, -1) == y)

    total_loss, total_correct = 0.0, 0
    for start in range(0, n, batch_size):
        inputs = x[start : start + batch_size]
        if len(inputs) == 1:
            inputs = np.concatenate([inputs, inputs])
        loss_sum, correct = batch_metrics(
            params, buffers, jnp.asarray(inputs), jnp.asarray(y[start : start + batch_size])
        )
        total_loss += float(loss_sum)
        total_correct += int(correct)
    return {"loss": total_loss / n, "accuracy": total_correct / n, "examples": n}
