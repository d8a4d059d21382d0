"""The convention doctor: localise a port's first diverging layer, name the cause.

- ``diagnose(torch_module, port, example_input)``: per-layer errors end to end and
  with input injection, then the ``CATALOGUE`` of porting conventions tested on the
  first layer whose own error exceeds the tier (``jaxgrad.doctor.diagnose``); a port
  it cannot see into (a custom ``nnx.Module``, a pytree module, ``fn(params, x)``) is
  traced and matched to torch by value (``jaxgrad.doctor.anyport``);
- ``diagnose_optimizer``: a torch optimizer vs an optax transformation on the same
  gradients, against the ``OPTIMIZER_CATALOGUE`` (``jaxgrad.doctor.optimizer``);
- ``training_drift``: the first step where two training runs' parameters leave the
  tier and whether the forward, the gradient or the update made it
  (``jaxgrad.doctor.drift``).

A float32 torch module is also run in float64 (a copy, ``jaxgrad.doctor.calibrate``),
and every float32 verdict is ``jaxgrad.parity.compare``'s calibrated one: a layer
where torch's own float32 misses the tier does not blame a correct port.

jaxgrad never imports torch: torch objects are driven by duck typing.
"""

from jaxgrad.doctor.catalogue import CATALOGUE, Convention
from jaxgrad.doctor.diagnose import diagnose
from jaxgrad.doctor.drift import DriftReport, training_drift
from jaxgrad.doctor.optimizer import OPTIMIZER_CATALOGUE, OptimizerReport, diagnose_optimizer
from jaxgrad.doctor.report import Cause, Report
