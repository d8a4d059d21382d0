"""jaxgrad: PyTorch's autograd workflows as pure JAX functions.

Parameters are flat dicts keyed like torch's ``state_dict()``; gradients are values
returned by functions, never state; every workflow is checked against a PyTorch
reference with ``jaxgrad.parity``.
"""

from jaxgrad import gradcheck
from jaxgrad import graph
from jaxgrad import losses
from jaxgrad import manual
from jaxgrad import nn
from jaxgrad import parity
from jaxgrad.gradcheck import GradcheckReport
from jaxgrad.parity import assert_parity
from jaxgrad.parity import compare

__version__ = "0.1.0"
