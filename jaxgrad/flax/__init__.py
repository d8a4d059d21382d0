"""``jaxgrad.flax``: torch-keyed jaxgrad models as idiomatic ``flax.nnx`` modules and
back, every torch convention mapped (see ``convert`` for the rules and ``modules`` for
the few layers stock flax cannot express)."""

from jaxgrad.flax.convert import LAYOUTS
from jaxgrad.flax.convert import SUPPORTED
from jaxgrad.flax.convert import from_nnx
from jaxgrad.flax.convert import FrozenParam
from jaxgrad.flax.convert import grads_to_torch
from jaxgrad.flax.convert import is_image_model
from jaxgrad.flax.convert import nnx_state_dict
from jaxgrad.flax.convert import to_nnx
from jaxgrad.flax.io import load_nnx
from jaxgrad.flax.io import save_nnx
from jaxgrad.flax.notes import conversion_notes
from jaxgrad.flax import modules
