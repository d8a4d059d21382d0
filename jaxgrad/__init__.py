"""jaxgrad: PyTorch's autograd workflows as pure JAX functions.

Parameters are flat dicts keyed like torch's ``state_dict()``; gradients are values
returned by functions, never state; every workflow is checked against a PyTorch
reference with ``jaxgrad.parity``.
"""

from jaxgrad import accumulate
from jaxgrad import autodiff
from jaxgrad import data
from jaxgrad import diagnostics
from jaxgrad import gradcheck
from jaxgrad import graph
from jaxgrad import html
from jaxgrad import losses
from jaxgrad import manual
from jaxgrad import memory
from jaxgrad import nn
from jaxgrad import optim
from jaxgrad import parity
from jaxgrad import train
from jaxgrad.accumulate import accumulate_grads
from jaxgrad.data import Dataset
from jaxgrad.data import load_digits
from jaxgrad.data import load_fashion_mnist
from jaxgrad.diagnostics import gradient_report
from jaxgrad.diagnostics import layer_grad_norms
from jaxgrad.gradcheck import GradcheckReport
from jaxgrad.parity import assert_parity
from jaxgrad.parity import compare

from jaxgrad._version import __version__  # noqa: E402
