"""parity_tests/_zoo_extra.py: tests that need the zoo extra skip without it, naming the
command that installs it (issue 55: the README's install, ``.[test]``, then its test
command, failed on two resnet18 cases)."""

from __future__ import annotations

import importlib.util
import os
import re

import pytest

from parity_tests import _zoo_extra

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_packages_are_the_zoo_extras_own():
    # pyproject.toml's `zoo = ["torchvision>=0.28", ...]` (tomllib is Python 3.11+)
    with open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8") as handle:
        specs = re.search(r"^zoo = \[(.*?)\]", handle.read(), re.M | re.S)[1]
    names = {re.match(r'\s*"([\w-]+)', spec)[1] for spec in specs.split(",") if spec.strip()}
    assert names == set(_zoo_extra.LIBRARIES)


def test_a_missing_package_skips_naming_the_install_command(monkeypatch):
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name in ("timm", "torchax") else object(),
    )
    assert _zoo_extra.missing("torchvision", "timm", "torchax") == ["timm", "torchax"]
    mark = _zoo_extra.requires("timm", "torchax")
    assert mark.args == (True,)
    assert mark.kwargs["reason"] == (
        'timm, torchax not installed (the zoo extra: pip install -c constraints.txt -e ".[test,zoo]")'
    )
    with pytest.raises(pytest.skip.Exception, match=r'timm not installed .*"\.\[test,zoo\]"'):
        _zoo_extra.skip_unless_installed("timm")


def test_an_installed_package_does_not_skip(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: object())
    assert _zoo_extra.missing() == []
    assert _zoo_extra.requires("torchvision").args == (False,)
    _zoo_extra.skip_unless_installed(*_zoo_extra.LIBRARIES)  # returns


def test_a_package_outside_the_extra_is_a_mistake_in_the_test():
    with pytest.raises(ValueError, match="'torchvison' is not a package of the zoo extra"):
        _zoo_extra.requires("torchvison")
