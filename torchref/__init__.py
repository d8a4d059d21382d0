"""torchref: the idiomatic PyTorch side of every jaxgrad parity check.

Plain ``torch.nn`` modules and imperative loops (``zero_grad`` / ``backward`` /
``step``), written the way a PyTorch user writes them. Never imports jax.
"""

from torchref import lessons
from torchref import models
from torchref.models import load_numpy
from torchref.models import mlp
from torchref.models import state_dict_numpy
