"""Tests that need the ``zoo`` extra (torchvision, timm, transformers, torchax) skip where
it is not installed, naming the command that installs it.

The README's install is ``.[test]``; CI installs ``.[test,zoo,docs]``. A test that builds
a real model from one of the zoo's libraries (directly, or through a script it drives:
``train.py --model torchvision:...``, ``port.py timm:...``, ``bench.py --zoo``) is marked
with ``requires(...)`` or calls ``skip_unless_installed(...)``, so the README's own test
command passes after the README's own install.

Usage::

    from parity_tests._zoo_extra import requires, skip_unless_installed

    pytestmark = requires("torchvision", "timm")      # a whole module

    @requires("transformers")                          # one test
    def test_bert(): ...

    pytest.param("torchvision:resnet18", marks=requires("torchvision"))  # one case

    def test_x():
        skip_unless_installed("timm")                  # inside a test, before importing
"""

from __future__ import annotations

import importlib.util

import pytest

LIBRARIES = ("torchvision", "timm", "transformers", "torchax")
"""The ``zoo`` extra's packages (``[project.optional-dependencies] zoo`` in pyproject.toml)."""

INSTALL = 'pip install -c constraints.txt -e ".[test,zoo]"'
"""The command (in the repository root, in the virtualenv) that installs them."""


def missing(*libraries: str) -> list[str]:
    """The ones of ``libraries`` (default: all of the extra's) that are not installed."""
    unknown = [name for name in libraries if name not in LIBRARIES]
    if unknown:
        raise ValueError(
            f"{unknown[0]!r} is not a package of the zoo extra (expected one of {LIBRARIES})"
        )
    return [name for name in libraries or LIBRARIES if importlib.util.find_spec(name) is None]


def reason(absent: list[str]) -> str:
    """The skip's one line: what is missing, and the command that installs it."""
    return f"{', '.join(absent)} not installed (the zoo extra: {INSTALL})"


def requires(*libraries: str) -> pytest.MarkDecorator:
    """A ``skipif`` mark: skip unless every one of ``libraries`` is installed."""
    absent = missing(*libraries)
    return pytest.mark.skipif(bool(absent), reason=reason(absent))


def skip_unless_installed(*libraries: str) -> None:
    """Inside a test: skip it unless every one of ``libraries`` is installed."""
    absent = missing(*libraries)
    if absent:
        # reported at the test's line, as a skipif mark is, not at this helper's
        raise pytest.skip.Exception(reason(absent), _use_item_location=True)
