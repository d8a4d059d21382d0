"""A notebook for the chain rule done by hand: each step is one multiplication, recorded.

``Working.step("dL/dw1", "dL/dz1 · x", dL_dz1, x)`` multiplies the factors, stores
the product under its name and records the line
``dL/dw1 = dL/dz1 · x = 7.05 × 2 = 14.1`` — the lessons' "each node prints the
multiplication it did". Plain Python floats: no framework is involved.
"""

from __future__ import annotations

import dataclasses
import math


def _num(value: float) -> str:
    return f"{value:.6g}"


@dataclasses.dataclass
class Working:
    """The values and printed steps of one hand computation."""

    values: dict = dataclasses.field(default_factory=dict)
    steps: list = dataclasses.field(default_factory=list)

    def let(self, name: str, formula: str, value: float) -> float:
        """Record a forward value: ``z1 = w1·x + b1 = 1.1``."""
        value = float(value)
        self.values[name] = value
        self.steps.append(f"{name} = {formula} = {_num(value)}")
        return value

    def step(self, name: str, formula: str, *factors: float) -> float:
        """Record a backward step, ``name = formula = f1 × f2 × … = product``."""
        product = math.prod(float(f) for f in factors)
        self.values[name] = product
        shown = " × ".join(_num(f) for f in factors)
        line = f"{name} = {formula} = {shown}" if len(factors) > 1 else f"{name} = {formula}"
        self.steps.append(f"{line} = {_num(product)}")
        return product
