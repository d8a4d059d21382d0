"""jaxgrad: PyTorch's autograd workflows as pure JAX functions.

Parameters are flat dicts keyed like torch's ``state_dict()``; gradients are values
returned by functions, never state; every workflow is checked against a PyTorch
reference with ``jaxgrad.parity``.
"""

from jaxgrad import (
    accumulate,
    autodiff,
    data,
    diagnostics,
    gradcheck,
    graph,
    html,
    losses,
    manual,
    memory,
    nn,
    optim,
    parity,
    train,
)
from jaxgrad._version import __version__  # noqa: E402
from jaxgrad.accumulate import accumulate_grads
from jaxgrad.data import Dataset, load_digits, load_fashion_mnist
from jaxgrad.diagnostics import gradient_report, layer_grad_norms
from jaxgrad.gradcheck import GradcheckReport
from jaxgrad.parity import assert_parity, compare
