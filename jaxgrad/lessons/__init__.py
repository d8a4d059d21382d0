"""The backprop lessons' worked examples: by hand, and with ``jax.grad``."""

from jaxgrad.lessons import cost
from jaxgrad.lessons import depth
from jaxgrad.lessons import scalar_examples
from jaxgrad.lessons import two_layer
from jaxgrad.lessons.hand import Working
from jaxgrad.lessons.scalar_examples import EXAMPLES
from jaxgrad.lessons.scalar_examples import ScalarExample
from jaxgrad.lessons.scalar_examples import agrees_to_printed_digits
from jaxgrad.lessons.scalar_examples import hand_result
from jaxgrad.lessons.scalar_examples import jax_result
