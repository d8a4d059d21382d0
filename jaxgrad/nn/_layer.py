"""``Layer``: the base of jaxgrad's stateless layers that can fail on their input.

A stateless layer implements ``forward(params, *inputs)`` only, so it never sees its
path in the model. ``Layer.forward_with_state`` (what containers call) re-raises a
``ValueError``/``TypeError`` of ``forward`` with the layer's class and path in front —
``"Conv2d at 'features.0': conv2d: `in_channels` (=3) must match…"`` — so an error deep
in a model says where it happened.
"""

from __future__ import annotations

from jaxgrad.nn.module import Module


class Layer(Module):
    """A stateless layer whose input errors name its path in the model."""

    def init(self, key):
        return {}

    def forward_with_state(self, params, *inputs, buffers, train, key, path, **options):
        del train, key
        try:
            output = self.forward(params, *inputs, **options)
        except (ValueError, TypeError) as exc:
            if not path:
                raise
            raise type(exc)(f"{type(self).__name__} at {path!r}: {exc}") from exc
        return output, dict(buffers)
