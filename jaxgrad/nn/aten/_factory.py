"""Factory ATen ops: ``arange``, ``full``, ``empty``, ``zeros_like``… A new tensor's
dtype is the one the node holds (export records it explicitly), its device and
layout are jaxgrad's one device; ``empty`` is zeros (torch leaves it undefined)."""

from __future__ import annotations
