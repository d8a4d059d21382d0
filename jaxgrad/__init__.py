"""jaxgrad: PyTorch's autograd workflows as pure JAX functions.

Parameters are flat dicts keyed like torch's ``state_dict()``; gradients are values
returned by functions, never state; every workflow is checked against a PyTorch
reference with ``jaxgrad.parity``.
"""

# before jax starts its backend: XLA reads XLA_FLAGS once (jaxgrad/_xla_flags.py)
from jaxgrad import _xla_flags

if _xla_warning := _xla_flags.late_start_warning(_xla_flags.apply_workarounds()):
    import warnings

    warnings.warn(_xla_warning, RuntimeWarning, stacklevel=2)

from jaxgrad import (  # noqa: E402
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
