"""``Linear`` to a stock ``nnx.Linear`` and back: torch's ``(out, in)`` weight is
flax's ``(in, out)`` kernel transposed (``x @ W.T``), the bias as it is.

``convert`` dispatches ``Linear`` here, and the transformer layers build their
``linear1``/``linear2`` with the same two functions.
"""

from __future__ import annotations

from flax import nnx

from jaxgrad import nn
from jaxgrad.flax._util import as_numpy, empty, rngs, set_value, value_of


def linear_to_nnx(layer, params, buffers, dtype):
    module = empty(
        lambda: nnx.Linear(
            layer.in_features,
            layer.out_features,
            use_bias=layer.bias,
            param_dtype=dtype,
            rngs=rngs(),
        )
    )
    set_value(
        module.kernel, as_numpy(params["weight"]).T
    )  # torch (out, in) -> flax kernel (in, out)
    if layer.bias:
        set_value(module.bias, params["bias"])
    return module


def linear_from_nnx(module, context):
    kernel = value_of(module.kernel)
    layer = nn.Linear(
        module.in_features, module.out_features, bias=module.use_bias, dtype=kernel.dtype
    )
    params = {"weight": kernel.T}
    if module.use_bias:
        params["bias"] = value_of(module.bias)
    return layer, params, {}
