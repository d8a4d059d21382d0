"""torchref: the idiomatic PyTorch side of every jaxgrad parity check.

Plain ``torch.nn`` modules and imperative loops (``zero_grad`` / ``backward`` /
``step``), written the way a PyTorch user writes them. Never imports jax.
"""

from torchref import accumulate
from torchref import autodiff
from torchref import checkpoint
from torchref import clipping
from torchref import cost
from torchref import data
from torchref import depth
from torchref import diagnostics
from torchref import gradcheck
from torchref import graph
from torchref import lessons
from torchref import manual
from torchref import memory
from torchref import models
from torchref import optim
from torchref import train
from torchref.gradcheck import strict_gradcheck
from torchref.graph import autograd_graph
from torchref.models import load_numpy
from torchref.models import mlp
from torchref.models import state_dict_numpy
