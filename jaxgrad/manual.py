"""Backward passes written by hand, as ``jax.custom_vjp``: forward and backward side by side.

Each function has three parts next to each other: the forward rule (``_x_fwd``),
which also returns what the backward needs saved — the activation memory the lessons
talk about — and the backward rule (``_x_bwd``), which turns the upstream gradient
``grad_out`` into one gradient per input. JAX's autodiff is not consulted: these are
the formulas of the lessons, and ``jaxgrad.gradcheck`` plus the tests check each one
against ``jax.grad`` of the plain function, against central differences, and against
torch autograd.

==============================  ==========================  ===============================
function                        forward                     backward (``g`` = upstream)
==============================  ==========================  ===============================
linear(x, weight, bias)         x @ weightᵀ + bias          g @ weight, gᵀ @ x, Σ g
relu(x)                         max(x, 0)                   g · [x > 0]
sigmoid(x)                      a = 1/(1 + e⁻ˣ)             g · a(1 − a)
tanh(x)                         t = tanh x                  g · (1 − t²)
layer_norm(x, w, b, eps)        x̂·w + b, x̂ = (x − μ)/σ      see ``_layer_norm_bwd``
softmax_cross_entropy(z, t)     mean(−log softmax(z)[t])    g · (softmax(z) − onehot(t))/N
sigmoid_binary_cross_entropy    mean(BCE(σ(z), y))          g · (σ(z) − y)/n  (the lessons'
  (z, y)                                                    cancellation of a(1 − a))
==============================  ==========================  ===============================

``scaled_backward(fn, scale)`` is a deliberately wrong backward (the true VJP times
``scale``) for proving that a checker catches errors.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# --- linear: y = x @ weight.T + bias ---------------------------------------------


@jax.custom_vjp
def _linear(x, weight, bias):
    return _linear_fwd(x, weight, bias)[0]


def _linear_fwd(x, weight, bias):
    return x @ weight.T + bias, (x, weight)  # saved: the input and the weight


def _linear_bwd(saved, grad_out):
    x, weight = saved
    grad_x = grad_out @ weight  # (*, out) @ (out, in) -> (*, in)
    rows_x = x.reshape(-1, x.shape[-1])  # every leading axis is a batch axis
    rows_g = grad_out.reshape(-1, grad_out.shape[-1])
    grad_weight = rows_g.T @ rows_x  # (out, N) @ (N, in) -> (out, in)
    grad_bias = rows_g.sum(axis=0)  # the bias is added to every row
    return grad_x, grad_weight, grad_bias


_linear.defvjp(_linear_fwd, _linear_bwd)


def linear(x, weight, bias):
    """``F.linear``: ``x @ weight.T + bias``.

    Args:
      x: `(*, in_features)`.
      weight: `(out_features, in_features)`, torch's layout.
      bias: `(out_features,)`.

    Returns:
      `(*, out_features)`.
    """
    if weight.ndim != 2 or x.shape[-1:] != weight.shape[1:]:
        raise ValueError(
            f"linear: `weight` shape {tuple(weight.shape)} must be (out_features, "
            f"in_features) with in_features = the input's last dimension "
            f"(input shape {tuple(x.shape)})."
        )
    if tuple(bias.shape) != weight.shape[:1]:
        raise ValueError(
            f"linear: `bias` shape {tuple(bias.shape)} must be (out_features,) = "
            f"{tuple(weight.shape[:1])}."
        )
    return _linear(x, weight, bias)


# --- relu: max(x, 0) -----------------------------------------------------------------


@jax.custom_vjp
def relu(x):
    """``torch.relu`` on `(*)`; the gradient at exactly 0 is 0, as torch's."""
    return _relu_fwd(x)[0]


def _relu_fwd(x):
    positive = x > 0
    return jnp.where(positive, x, jnp.zeros_like(x)), positive  # saved: one bit per element


def _relu_bwd(positive, grad_out):
    return (jnp.where(positive, grad_out, jnp.zeros_like(grad_out)),)


relu.defvjp(_relu_fwd, _relu_bwd)


# --- sigmoid: a = 1 / (1 + exp(-x)) ------------------------------------------------


@jax.custom_vjp
def sigmoid(x):
    """``torch.sigmoid`` on `(*)`."""
    return _sigmoid_fwd(x)[0]


def _sigmoid_fwd(x):
    a = jax.nn.sigmoid(x)
    return a, a  # saved: the output; the derivative needs nothing else


def _sigmoid_bwd(a, grad_out):
    return (grad_out * a * (1 - a),)  # a(1 − a) ≤ 0.25: where gradients start to vanish


sigmoid.defvjp(_sigmoid_fwd, _sigmoid_bwd)


# --- tanh ------------------------------------------------------------------------------


@jax.custom_vjp
def tanh(x):
    """``torch.tanh`` on `(*)`."""
    return _tanh_fwd(x)[0]


def _tanh_fwd(x):
    t = jnp.tanh(x)
    return t, t


def _tanh_bwd(t, grad_out):
    return (grad_out * (1 - t * t),)


tanh.defvjp(_tanh_fwd, _tanh_bwd)


# --- layer_norm over the last axis ---------------------------------------------------


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(x, weight, bias, eps):
    return _layer_norm_fwd(x, weight, bias, eps)[0]


def _layer_norm_fwd(x, weight, bias, eps):
    mean = jnp.mean(x, axis=-1, keepdims=True)
    centered = x - mean
    variance = jnp.mean(centered * centered, axis=-1, keepdims=True)  # biased, as torch
    inv_std = 1 / jnp.sqrt(variance + eps)
    normalized = centered * inv_std
    return normalized * weight + bias, (normalized, inv_std, weight)


def _layer_norm_bwd(eps, saved, grad_out):
    normalized, inv_std, weight = saved
    size = normalized.shape[-1]
    grad_normalized = grad_out * weight
    # x̂ depends on every element of its row through μ and σ: the gradient loses its
    # mean and its component along x̂, then is rescaled by 1/σ.
    grad_x = inv_std * (
        grad_normalized
        - jnp.mean(grad_normalized, axis=-1, keepdims=True)
        - normalized * jnp.sum(grad_normalized * normalized, axis=-1, keepdims=True) / size
    )
    rows = (-1, size)
    grad_weight = jnp.sum((grad_out * normalized).reshape(rows), axis=0)
    grad_bias = jnp.sum(grad_out.reshape(rows), axis=0)
    return grad_x, grad_weight, grad_bias


_layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def layer_norm(x, weight, bias, eps: float = 1e-5):
    """``F.layer_norm(x, (D,), weight, bias, eps)``: normalise the last axis of `(*, D)`.

    ``weight`` and ``bias`` are `(D,)`; ``eps`` defaults to torch's 1e-5 (flax: 1e-6).
    """
    size = x.shape[-1:]
    if tuple(weight.shape) != size or tuple(bias.shape) != size:
        raise ValueError(
            f"layer_norm: `weight` {tuple(weight.shape)} and `bias` {tuple(bias.shape)} "
            f"must both have shape {size}, the input's last dimension."
        )
    return _layer_norm(x, weight, bias, float(eps))


# --- softmax cross-entropy on logits, integer targets, mean over the batch ------------


@jax.custom_vjp
def _softmax_cross_entropy(logits, target):
    return _softmax_cross_entropy_fwd(logits, target)[0]


def _softmax_cross_entropy_fwd(logits, target):
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    onehot = jax.nn.one_hot(target, logits.shape[-1], dtype=logits.dtype)
    loss = -jnp.mean(jnp.sum(onehot * log_probs, axis=-1))
    return loss, (jnp.exp(log_probs), onehot)


def _softmax_cross_entropy_bwd(saved, grad_out):
    probs, onehot = saved
    batch = probs.shape[0]
    return grad_out * (probs - onehot) / batch, None  # class indices get no gradient


_softmax_cross_entropy.defvjp(_softmax_cross_entropy_fwd, _softmax_cross_entropy_bwd)


def softmax_cross_entropy(logits, target):
    """``F.cross_entropy(logits, target)`` (mean): logits `(N, C)`, integer target `(N,)`."""
    if (
        logits.ndim != 2
        or not jnp.issubdtype(target.dtype, jnp.integer)
        or (tuple(target.shape) != logits.shape[:1])
    ):
        raise ValueError(
            f"softmax_cross_entropy: expected logits (N, C) and integer target (N,), got "
            f"logits {tuple(logits.shape)} and target {tuple(target.shape)} {target.dtype}."
        )
    return _softmax_cross_entropy(logits, target)


# --- sigmoid + binary cross-entropy on logits, mean over every element ---------------


@jax.custom_vjp
def _sigmoid_binary_cross_entropy(logits, target):
    return _sigmoid_binary_cross_entropy_fwd(logits, target)[0]


def _sigmoid_binary_cross_entropy_fwd(logits, target):
    # max(z, 0) − z·y + log(1 + e^−|z|): finite for every z, unlike log σ(z).
    losses = jnp.maximum(logits, 0) - logits * target + jnp.log1p(jnp.exp(-jnp.abs(logits)))
    return jnp.mean(losses), (logits, target)


def _sigmoid_binary_cross_entropy_bwd(saved, grad_out):
    logits, target = saved
    count = logits.size
    # d/dz of BCE(σ(z), y) is (a − y)/(a(1 − a)) · a(1 − a): the sigmoid's derivative
    # cancels, so a saturated but wrong unit still gets a full-sized gradient.
    grad_logits = grad_out * (jax.nn.sigmoid(logits) - target) / count
    grad_target = -grad_out * logits / count
    return grad_logits, grad_target


_sigmoid_binary_cross_entropy.defvjp(
    _sigmoid_binary_cross_entropy_fwd, _sigmoid_binary_cross_entropy_bwd
)


def sigmoid_binary_cross_entropy(logits, target):
    """``F.binary_cross_entropy_with_logits(logits, target)`` (mean), shapes `(*)`, equal."""
    if tuple(logits.shape) != tuple(target.shape):
        raise ValueError(
            f"sigmoid_binary_cross_entropy: `target` shape {tuple(target.shape)} must equal "
            f"`logits` shape {tuple(logits.shape)}."
        )
    return _sigmoid_binary_cross_entropy(logits, target)


# --- a deliberately wrong backward ----------------------------------------------------


def scaled_backward(fn, scale: float):
    """``fn`` with a backward ``scale`` times the true one: a planted bug for checkers.

    The forward is ``fn`` unchanged; the backward returns ``scale × vjp`` for every
    floating input (``scale=1.001`` is the 0.1 % error torch's default gradcheck
    tolerances let through).
    """

    @jax.custom_vjp
    def wrong(*args):
        return fn(*args)

    def wrong_fwd(*args):
        return jax.vjp(fn, *args)

    def wrong_bwd(vjp_fn, grad_out):
        return tuple(jax.tree_util.tree_map(lambda g: g * scale, vjp_fn(grad_out)))

    wrong.defvjp(wrong_fwd, wrong_bwd)
    return functools.wraps(fn)(wrong)


FUNCTIONS = {
    "linear": linear,
    "relu": relu,
    "sigmoid": sigmoid,
    "tanh": tanh,
    "layer_norm": layer_norm,
    "softmax_cross_entropy": softmax_cross_entropy,
    "sigmoid_binary_cross_entropy": sigmoid_binary_cross_entropy,
}


def value_and_vjp(fn, inputs, cotangent=None, *, jit: bool = False):
    """``(fn(*inputs), [VJP for each floating input])``: what ``backward()`` fills in.

    Args:
      fn: one of ``FUNCTIONS`` (or any function of arrays).
      inputs: the arguments; integer ones (class targets) get no gradient.
      cotangent: the upstream gradient, shaped like the output; default ones, the
        gradient torch's ``out.sum().backward()`` computes.
      jit: run under ``jax.jit``.
    """
    inputs = [jnp.asarray(x) for x in inputs]
    positions = [i for i, x in enumerate(inputs) if jnp.issubdtype(x.dtype, jnp.floating)]

    def run(inputs, cotangent):
        def of_floats(*floats):
            full = list(inputs)
            for i, value in zip(positions, floats):
                full[i] = value
            return fn(*full)

        out, vjp_fn = jax.vjp(of_floats, *[inputs[i] for i in positions])
        upstream = jnp.ones_like(out) if cotangent is None else jnp.asarray(cotangent, out.dtype)
        return out, list(vjp_fn(upstream))

    return (jax.jit(run) if jit else run)(inputs, cotangent)


# The same forward rules without the custom backward: what ``jax.grad`` differentiates
# by itself, the first of the three references each hand-written backward must match.
PLAIN = {
    "linear": lambda x, weight, bias: _linear_fwd(x, weight, bias)[0],
    "relu": lambda x: _relu_fwd(x)[0],
    "sigmoid": lambda x: _sigmoid_fwd(x)[0],
    "tanh": lambda x: _tanh_fwd(x)[0],
    "layer_norm": lambda x, weight, bias: _layer_norm_fwd(x, weight, bias, 1e-5)[0],
    "softmax_cross_entropy": lambda z, t: _softmax_cross_entropy_fwd(z, t)[0],
    "sigmoid_binary_cross_entropy": lambda z, y: _sigmoid_binary_cross_entropy_fwd(z, y)[0],
}


def example_inputs(name: str, rng: np.random.Generator, dtype: str = "float64") -> tuple:
    """Small numpy inputs for ``FUNCTIONS[name]``, shared by tests, report and script.

    Inputs of ``relu`` stay at least 0.1 away from its kink, so that a central
    difference with eps ≪ 0.1 never straddles it.
    """

    def normal(*shape):
        return rng.standard_normal(shape).astype(dtype)

    if name == "linear":
        return normal(4, 3), normal(2, 3), normal(2)
    if name == "relu":
        x = normal(3, 4)
        return (np.where(np.abs(x) < 0.1, np.sign(x) * 0.1 + x, x).astype(dtype),)
    if name in ("sigmoid", "tanh"):
        return (normal(3, 4),)
    if name == "layer_norm":
        return normal(3, 5), 1 + 0.1 * normal(5), 0.1 * normal(5)
    if name == "softmax_cross_entropy":
        return normal(4, 3), rng.integers(0, 3, size=(4,)).astype(np.int64)
    if name == "sigmoid_binary_cross_entropy":
        return normal(3, 2), rng.uniform(size=(3, 2)).astype(dtype)
    raise ValueError(f"`name` (={name!r}) must be one of {', '.join(FUNCTIONS)}.")


__all__ = [*FUNCTIONS, "FUNCTIONS", "PLAIN", "example_inputs", "scaled_backward", "value_and_vjp"]
