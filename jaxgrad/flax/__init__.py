"""``jaxgrad.flax``: torch-keyed jaxgrad models as idiomatic ``flax.nnx`` modules and
back, every torch convention mapped (see ``convert`` for the rules and ``modules`` for
the few layers stock flax cannot express)."""

from jaxgrad.flax import modules
from jaxgrad.flax.convert import (
    LAYOUTS,
    SUPPORTED,
    FrozenParam,
    from_nnx,
    grads_to_torch,
    is_image_model,
    nnx_state_dict,
    to_nnx,
)
from jaxgrad.flax.io import load_nnx, save_nnx
from jaxgrad.flax.notes import conversion_notes
