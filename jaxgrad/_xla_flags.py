"""XLA:CPU settings ``import jaxgrad`` makes before jax starts its backend.

Contract: ``apply_workarounds(environ)`` appends
``--xla_cpu_experimental_ynn_fusion_type=`` (an empty list: no YNNPACK fusions) to
``environ["XLA_FLAGS"]`` when the installed jaxlib is one of ``YNN_AFFECTED`` and the
user's ``XLA_FLAGS`` does not already name that flag (a user's own setting always wins, whatever its value), and
returns what it did as one line (``None`` when it changed nothing). It imports
nothing but the standard library, reads the jaxlib version from the installed
package's metadata (never importing jaxlib), and only has an effect when it runs before
jax starts its backend (XLA reads ``XLA_FLAGS`` once, when the CPU client is created:
``jax.devices()`` or the first computation). Where jax's backend already runs,
``import jaxgrad`` warns (``late_start_warning``) that the workaround could not apply.

Why: jaxlib 0.10.2 widened XLA:CPU's YNNPACK fusions, which are wrong or crash on
three programs from JAX's tracker, checked by ``jaxgrad.backend_canaries``:
jax-ml/jax#39103 (``jit`` of a vmapped matrix-vector product then a sum, silently wrong
in float64 too), #40412 (a segfault on a rank-7 reduce) and #39257 (a segfault, or a
hang on some CPUs, on a rank-8 broadcast-reduce). ``constraints.txt`` pins jaxlib
0.10.1, which predates them; this is for an install outside the constraints
(``pyproject.toml`` accepts any jax >= 0.10). All YNN fusions off fixes the three; so
does removing only the ``reduce`` type (``=-reduce``), which measured no faster
(``docs/measurements.md``, "The backend's known bugs") and leaves the other YNN types
on, one of which crashed torchvision's raft_large (``scripts/_garden.py``).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import MutableMapping

YNN_FLAG = "--xla_cpu_experimental_ynn_fusion_type"
# XLA's syntax: the list of YNN fusion types to enable, here none
YNN_WORKAROUND = f"{YNN_FLAG}="
# jaxlib versions whose YNN fusions fail the canaries: 0.10.2 measured here;
# 0.11.0 per jax-ml/jax#39257. A version not listed is left alone (an unknown flag or
# value is fatal to XLA, and a fixed jaxlib needs no workaround); the canaries of
# `scripts/doctor.py --env` say whether it needs one.
YNN_AFFECTED = ("0.10.2", "0.11.0")
# set to 1 to make `import jaxgrad` leave XLA_FLAGS alone
OPT_OUT = "JAXGRAD_NO_XLA_WORKAROUNDS"


def installed_jaxlib() -> str | None:
    """The installed jaxlib's version (``"0.10.2"``), from its metadata; None if absent."""
    try:
        return importlib.metadata.version("jaxlib")
    except importlib.metadata.PackageNotFoundError:
        return None


def user_sets_ynn_fusion(flags: str) -> bool:
    """Whether the ``XLA_FLAGS`` text ``flags`` already sets the YNN fusion type."""
    return any(token.split("=", 1)[0] == YNN_FLAG for token in flags.split())


def apply_workarounds(
    environ: MutableMapping[str, str] | None = None, jaxlib_version: str | None = None
) -> str | None:
    """Append the YNN workaround to ``environ["XLA_FLAGS"]`` where it is needed.

    Args:
      environ: the environment to change (default ``os.environ``).
      jaxlib_version: the jaxlib to decide for (default: the installed one).

    Returns:
      One line naming the flag added and why, or None when nothing was changed
      (jaxlib not affected, the user's XLA_FLAGS names the flag, or
      ``JAXGRAD_NO_XLA_WORKAROUNDS=1``).
    """
    environ = os.environ if environ is None else environ
    version = installed_jaxlib() if jaxlib_version is None else jaxlib_version
    flags = environ.get("XLA_FLAGS", "")
    if environ.get(OPT_OUT) == "1" or version not in YNN_AFFECTED or user_sets_ynn_fusion(flags):
        return None
    environ["XLA_FLAGS"] = f"{flags} {YNN_WORKAROUND}".strip()
    return (
        f"added {YNN_WORKAROUND} to XLA_FLAGS: jaxlib {version}'s YNN fusions are "
        "wrong or crash (jax-ml/jax#39103, #40412, #39257)"
    )


def backend_started() -> bool:
    """Whether jax is imported and has already created its backends (so XLA has read
    ``XLA_FLAGS``); never imports jax itself."""
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge

        return bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a jax without that function: cannot tell
        return False


def late_start_warning(applied: str | None) -> str | None:
    """The warning ``import jaxgrad`` gives when it ``applied`` the workaround (the line
    ``apply_workarounds`` returned) after jax's backend had started; else None."""
    if applied is None or not backend_started():
        return None
    return (
        f"jaxgrad was imported after jax started its backend, so {YNN_WORKAROUND} "
        "cannot take effect in this process, and jit may give wrong results or crash "
        "(jax-ml/jax#39103, #40412, #39257): import jaxgrad before jax computes anything, "
        f"or start Python with XLA_FLAGS={YNN_WORKAROUND}"
    )
