"""Importing the ``zoo`` extra's libraries (torchvision, timm, transformers) where
torchvision's wheel does not load against a CPU-only torch.

Some package indexes (this project's machine: torchvision ``0.28.0+cu130`` beside
``torch 2.13.0+cpu``) serve torchvision as a CUDA build whose C extension does not load
against the CPU torch. ``import torchvision`` then fails while registering a fake
kernel for one of its custom ops (``RuntimeError: operator torchvision::nms does not
exist``), and so do ``import timm`` and ``import transformers``, which import
torchvision themselves. The models are pure Python and never call those ops, so
``import_torchvision()`` declares the two op schemas the import registers kernels for
and imports again. Where torchvision imports cleanly it only imports it: declaring the
schemas before a working extension loads would clash with the extension's own.

Usage, before anything imports torchvision::

    from jaxgrad.zoo_imports import import_library, import_torchvision

    torchvision = import_torchvision()
    timm = import_library("timm")  # torchvision's import first, then timm

``import jaxgrad`` never imports this module, nor torch: torch is imported inside the
functions, on the first call.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys

LIBRARIES = ("torchvision", "timm", "transformers")
"""The ``zoo`` extra's libraries (``pip install -c constraints.txt -e ".[zoo]"``)."""

_SHIM_LIBRARIES: list = []  # the torch.library.Library the shim defined, kept alive


def import_torchvision():
    """``import torchvision``, declaring its two custom op schemas first when its C
    extension cannot load against the installed torch (see the module docstring).

    Returns:
      The ``torchvision`` module; a second call returns the same module and changes
      nothing.

    Raises:
      ModuleNotFoundError: torchvision is not installed.
      RuntimeError: torchvision's import fails for another reason than its missing
        ``torchvision::nms`` op (raised as torchvision raised it).
    """
    import torch

    try:
        return importlib.import_module("torchvision")
    except RuntimeError as error:
        if "torchvision::nms" not in str(error):
            raise
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]  # the failed import's half-initialised modules
    library = torch.library.Library("torchvision", "DEF")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _SHIM_LIBRARIES.append(library)
    return importlib.import_module("torchvision")


def import_library(name: str):
    """One of ``LIBRARIES``, imported, with ``import_torchvision()`` first wherever
    torchvision is installed (timm and transformers import it themselves).

    Args:
      name: ``"torchvision"``, ``"timm"`` or ``"transformers"``.

    Returns:
      The imported module.

    Raises:
      ValueError: ``name`` is not one of ``LIBRARIES``.
      ModuleNotFoundError: the library is not installed.
    """
    if name not in LIBRARIES:
        raise ValueError(f"`name` (={name!r}) must be one of {', '.join(LIBRARIES)}.")
    if name == "torchvision" or importlib.util.find_spec("torchvision") is not None:
        import_torchvision()
    return importlib.import_module(name)


__all__ = ["LIBRARIES", "import_library", "import_torchvision"]
