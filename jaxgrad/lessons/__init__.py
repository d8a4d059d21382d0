"""The backprop lessons' worked examples: by hand, and with ``jax.grad``."""

from jaxgrad.lessons import cost, depth, scalar_examples, two_layer
from jaxgrad.lessons.hand import Working
from jaxgrad.lessons.scalar_examples import (
    EXAMPLES,
    ScalarExample,
    agrees_to_printed_digits,
    hand_result,
    jax_result,
)
