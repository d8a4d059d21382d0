"""The torch twins of ``jaxgrad.manual``: the same functions through torch autograd.

``REFERENCES[name]`` takes the same arguments as ``jaxgrad.manual.FUNCTIONS[name]``
and is built from torch's own differentiable ops, so ``backward()`` on it is the
reference each hand-written JAX backward is compared against.
``scaled_backward(fn, scale)`` is the twin of the deliberately wrong JAX backward: a
``torch.autograd.Function`` whose backward is ``scale`` times the true one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

REFERENCES = {
    "linear": F.linear,
    "relu": torch.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "layer_norm": lambda x, weight, bias: F.layer_norm(x, x.shape[-1:], weight, bias, 1e-5),
    "softmax_cross_entropy": F.cross_entropy,
    "sigmoid_binary_cross_entropy": F.binary_cross_entropy_with_logits,
}


def forward_backward(name: str, *inputs) -> dict:
    """Run ``REFERENCES[name]`` on numpy ``inputs``; return output and input gradients.

    Floating inputs become leaves with ``requires_grad=True``; the output is reduced
    with ``sum()`` before ``backward()`` (a loss is already a scalar), so the gradients
    are the VJP of a cotangent of ones. Returns ``{"output": …, "grads": [grad or None]}``.
    """
    tensors = [torch.tensor(x, requires_grad=torch.tensor(x).is_floating_point()) for x in inputs]
    output = REFERENCES[name](*tensors)
    output.sum().backward()
    return {"output": output.detach(), "grads": [t.grad for t in tensors]}


def scaled_backward(fn, scale: float):
    """``fn`` with a backward ``scale`` times the true one (a planted bug)."""

    class ScaledBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *inputs):
            ctx.save_for_backward(*inputs)
            return fn(*inputs)

        @staticmethod
        def backward(ctx, grad_out):
            inputs = [x.detach().requires_grad_(x.requires_grad) for x in ctx.saved_tensors]
            with torch.enable_grad():
                output = fn(*inputs)
            wanted = [x for x in inputs if x.requires_grad]
            grads = iter(torch.autograd.grad(output, wanted, grad_out))
            return tuple(next(grads) * scale if x.requires_grad else None for x in inputs)

    return ScaledBackward.apply
