"""torchref: the idiomatic PyTorch side of every jaxgrad parity check.

Plain ``torch.nn`` modules and imperative loops (``zero_grad`` / ``backward`` /
``step``), written the way a PyTorch user writes them. Never imports jax.
"""

from torchref import (
    accumulate,
    autodiff,
    checkpoint,
    clipping,
    cost,
    data,
    depth,
    diagnostics,
    gradcheck,
    graph,
    lessons,
    manual,
    memory,
    models,
    optim,
    train,
)
from torchref.gradcheck import strict_gradcheck
from torchref.graph import autograd_graph
from torchref.models import load_numpy, mlp, state_dict_numpy
