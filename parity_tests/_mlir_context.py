"""One MLIR context per test process, instead of jax's one per lowered program.

jax lowers every program it compiles into a new MLIR context
(``jax._src.interpreters.mlir.make_ir_context``: create a context, load and register its
dialects, ~4 ms, and ~1 ms to tear it down). A user compiling a few programs never
notices; the suite lowers thousands of small ones, once each, and those contexts were
~13% of its CPU time and most of its peak memory. An MLIR context only owns uniqued
types and attributes; every module lowered into it is its own, so the text jax hands XLA
is the same either way (``test_suite_setup.py`` lowers programs both ways and compares).
"""

from __future__ import annotations


def share_one_mlir_context(mlir) -> bool:
    """Make ``mlir.make_ir_context`` return one context for the whole process.

    ``mlir`` is jax's ``jax._src.interpreters.mlir`` (a parameter so a test can pass a
    stand-in). Returns False, changing nothing, where it has no ``make_ir_context``
    (another jax version: the suite keeps jax's own contexts and is only slower). The
    wrapper keeps jax's function as ``.fresh``. Calling this twice wraps once.
    """
    make = getattr(mlir, "make_ir_context", None)
    if make is None:
        return False
    if getattr(make, "fresh", None) is not None:
        return True
    contexts = []

    def make_ir_context():
        if not contexts:
            contexts.append(make())
        return contexts[0]

    make_ir_context.fresh = make
    mlir.make_ir_context = make_ir_context
    return True
