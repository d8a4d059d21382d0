"""The one op table of captured programs: core ATen ops -> JAX.

``from_torch`` captures what ``torch.fx.symbolic_trace`` cannot take (Hugging Face
transformers, vision transformers, forwards with shape assertions or control flow on
sizes) with ``torch.export`` and decomposes it to core ATen (``jaxgrad.nn.capture.export``).
Every ``call_function`` node of that program is looked up here by the name torch
prints for its overload, ``"aten.add.Tensor"``, ``"aten.convolution.default"``
(``str(torch.ops.aten.add.Tensor)``), and run on JAX arrays with the ATen schema's
arguments, positional and keyword, exactly as the node holds them:

- tensors are JAX arrays; dtypes arrive as numpy dtypes (``canonical_dtype``),
  devices and layouts as strings, memory formats as ``None``: jaxgrad has one
  device per array and no strides;
- every entry follows torch's semantics, including its type promotion
  (``_promote.result_type``: a dimensioned tensor outranks a zero-dim tensor, which
  outranks a Python number, within each of bool < integer < float < complex); the
  interpreter checks each node's result against the shape and dtype torch recorded
  for it, so a table entry that disagrees with torch fails loudly at trace time,
  naming the node, never silently;
- a *random* op (``native_dropout``, ``bernoulli``, ``rand``…) is two functions:
  ``sample(key, *args, **kwargs) -> draw`` (the random numbers, from the node's own
  ``jax.random`` key) and ``fn(draw, *args, **kwargs) -> output``. The interpreter
  calls ``sample`` with the key of the op's path, or takes the draw the caller
  supplies (``random_draws=``: torch's own draws, to compare a training step with
  dropout active against torch).

Entries are added with ``@register("aten.X.overload", ...)`` in the family modules
(``_pointwise``, ``_reduce``, ``_shape``, ``_index``, ``_factory``, ``_nn``,
``_random``; ``_autograd`` for jaxgrad's own marks of autograd written in a
forward); each is held to its ``op_db`` samples in ``parity_tests``. Nothing
here imports torch.
"""

from __future__ import annotations

# the families register their entries on import
from jaxgrad.nn.aten import (
    _autograd,  # noqa: E402,F401
    _factory,  # noqa: E402,F401
    _index,  # noqa: E402,F401
    _nn,  # noqa: E402,F401
    _pointwise,  # noqa: E402,F401
    _random,  # noqa: E402,F401
    _reduce,  # noqa: E402,F401
    _shape,  # noqa: E402,F401
)
from jaxgrad.nn.aten._table import OPS, AtenOp, lookup, register, supported

__all__ = ["AtenOp", "OPS", "register", "lookup", "supported"]
