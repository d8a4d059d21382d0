"""Canaries for the known bugs of the jax/jaxlib backend: wrong results and crashes.

Contract: each ``Canary`` is a small jax program from a bug report on JAX's tracker,
with an expected value that does not come from jax (a hand-derived exact result, or
numpy's answer in float64). ``run_canary(canary)`` runs the program in a child Python
process, so a segfault or a hang is reported, never fatal: the child imports jaxgrad
first (``import_jaxgrad=True``, what a user's program does, so jaxgrad's XLA settings
apply; ``jaxgrad._xla_flags``), runs the jitted program, and saves the result with
``np.save`` to a file the parent names. ``judge`` turns the child's exit status, its
stderr and the result into a ``Finding``: ``ok``,
``wrong`` (a result outside the tolerance), ``crash`` (killed by a signal, or an
error exit), or ``hang`` (past the timeout). ``check_backend()`` runs every canary of
``CANARIES`` and returns the findings; ``format_findings`` writes one line per known
bug found, with the issue and what to do. Nothing here imports torch; only the
children import jax.

Tolerances (the parity policy, docs/parity.md): a float64 program at the float64 tier
(rtol 1e-10, atol 1e-12), a float32 one at the float32 tier (rtol 1e-5,
atol 1e-6 x max|expected|); the bugs caught here are off by 0.2 % to 43 %, or crash.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from jaxgrad import _xla_flags

TIMEOUT_S = 120.0  # a canary's child: jax's import, one compile, one run (~5 s here)

# the child's prologue and epilogue around a canary's program (which sets `result`)
_PROLOGUE = """\
import sys
{import_jaxgrad}import jax
jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
import jax.numpy as jnp
import numpy as np
"""
_EPILOGUE = """
np.save(sys.argv[1], np.asarray(result))
"""


@dataclasses.dataclass(frozen=True)
class Canary:
    """One known backend bug and the program that shows it.

    Attributes:
      issue: where it is reported (``"jax-ml/jax#39103"``).
      checks: what the program computes, in words.
      symptom: what the bug does (``"wrong result"``, ``"segfault"``).
      program: Python source run in the child after ``jax``, ``jnp``, ``np`` are
        imported and x64 is enabled; it must set ``result`` (an array).
      expected: ``() -> np.ndarray``, the right answer, computed without jax.
      dtype: the result's dtype (``"float64"`` or ``"float32"``); picks the tier.
      fix: what to do about it, one line.
    """

    issue: str
    checks: str
    symptom: str
    program: str
    expected: Callable[[], np.ndarray]
    dtype: str
    fix: str


@dataclasses.dataclass(frozen=True)
class Finding:
    """What one canary found: ``status`` is ``ok``, ``wrong``, ``crash`` or ``hang``;
    ``detail`` says how (the error in units of the tolerance, the signal, the last
    line of the child's stderr)."""

    canary: Canary
    status: str
    detail: str

    @property
    def ok(self) -> bool:
        return self.status == "ok"


_FIX = (
    "pip install jax==0.10.1 jaxlib==0.10.1 (constraints.txt's pin), or "
    f"XLA_FLAGS={_xla_flags.YNN_WORKAROUND} (what import jaxgrad sets for jaxlib "
    f"{' and '.join(_xla_flags.YNN_AFFECTED)}, unless XLA_FLAGS already names that "
    "flag or jax started before jaxgrad was imported)"
)


def _matvec_expected() -> np.ndarray:
    # (eye(3) @ (i, 0, 0))**2 summed is i**2 exactly (whole numbers below 2**53);
    # the random rows: numpy in float64
    i = np.arange(16_385, dtype=np.float64)
    x, m = _matvec_random()
    return np.concatenate([i**2, ((x @ m.T) ** 2).sum(axis=1)])


def _matvec_random() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(39103)
    return rng.normal(size=(16_385, 3)), rng.normal(size=(3, 3))


_MATVEC = """\
n = 16_385
i = jnp.arange(n, dtype=jnp.float64)
x = jnp.stack((i, jnp.zeros_like(i), jnp.zeros_like(i)), axis=1)
rng = np.random.default_rng(39103)
xr, mr = rng.normal(size=(n, 3)), rng.normal(size=(3, 3))

def f(m, x):
    return jax.vmap(lambda row: jnp.sum((m @ row) ** 2))(x)

g = jax.jit(f)
result = np.concatenate([np.asarray(g(jnp.eye(3, dtype=jnp.float64), x)),
                         np.asarray(g(jnp.asarray(mr), jnp.asarray(xr)))])
"""


def _rank7_inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(40412)
    shape = (3, 1, 2, 2, 8, 8, 8)
    return rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)


def _rank7_expected() -> np.ndarray:
    u, v = _rank7_inputs()
    return (u.astype(np.float64) * v.astype(np.float64)).sum(axis=3)


_RANK7 = """\
rng = np.random.default_rng(40412)
shape = (3, 1, 2, 2, 8, 8, 8)
u = rng.normal(size=shape).astype(np.float32)
v = rng.normal(size=shape).astype(np.float32)
result = jax.jit(lambda a, b: jnp.sum(a * b, axis=3))(jnp.asarray(u), jnp.asarray(v))
"""


def _rank8_expected() -> np.ndarray:
    # every product is 1 * 1, six of them summed: log(6) everywhere
    return np.full((10, 4, 9, 9, 9, 9, 9), np.log(6.0))


_RANK8 = """\
def f(obs, a):
    lik = jnp.sum(obs[..., None, None, None, None, None] * a, axis=2)
    return jnp.log(jnp.maximum(lik, 2.220446049250313e-16))

obs = jnp.ones((10, 4, 6), jnp.float32)
a = jnp.ones((10, 4, 6, 9, 9, 9, 9, 9), jnp.float32)
result = jax.jit(f)(obs, a)
"""

CANARIES: tuple[Canary, ...] = (
    Canary(
        issue="jax-ml/jax#39103",
        checks="jit of a vmapped 3x3 matrix-vector product then a sum, 16,385 rows, "
        "float64 (rows (i,0,0) against i**2, random rows against numpy)",
        symptom="wrong result",
        program=_MATVEC,
        expected=_matvec_expected,
        dtype="float64",
        fix=_FIX,
    ),
    Canary(
        issue="jax-ml/jax#40412",
        checks="jit of sum(a * b, axis=3) on rank-7 float32 arrays with a size-1 "
        "dimension, (3,1,2,2,8,8,8), against numpy in float64",
        symptom="segfault",
        program=_RANK7,
        expected=_rank7_expected,
        dtype="float32",
        fix=_FIX,
    ),
    Canary(
        issue="jax-ml/jax#39257",
        checks="jit of log(max(sum(obs[...,None x5] * A, axis=2), eps)), a rank-3 "
        "operand broadcast into rank 8, float32 ones, against log(6)",
        symptom="segfault (a hang on some CPUs)",
        program=_RANK8,
        expected=_rank8_expected,
        dtype="float32",
        fix=_FIX,
    ),
)


def child_source(canary: Canary, *, import_jaxgrad: bool = True) -> str:
    """The whole program the child runs for ``canary``."""
    prologue = _PROLOGUE.format(import_jaxgrad="import jaxgrad\n" if import_jaxgrad else "")
    return prologue + canary.program + _EPILOGUE


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else "no output"


def compare(canary: Canary, got: np.ndarray) -> Finding:
    """``got`` against ``canary.expected()`` at the tier of ``canary.dtype``."""
    want = np.asarray(canary.expected(), dtype=np.float64)
    if got.shape != want.shape:
        return Finding(canary, "wrong", f"shape {got.shape}, expected {want.shape}")
    if canary.dtype == "float64":
        rtol, atol = 1e-10, 1e-12
    else:
        rtol, atol = 1e-5, 1e-6 * float(np.max(np.abs(want)))
    error = np.abs(got - want)
    allowed = atol + rtol * np.abs(want)
    worst = int(np.argmax(np.where(np.isnan(error), np.inf, error / allowed)))
    if np.all(error <= allowed):
        return Finding(canary, "ok", f"max |error| {float(error.max()):.3g}, within the tier")
    index = np.unravel_index(worst, want.shape)
    g, w = float(got[index]), float(want[index])
    rel = abs(g - w) / abs(w) if w else float("inf")
    return Finding(
        canary,
        "wrong",
        f"{int(np.sum(~(error <= allowed)))} of {want.size} values outside the "
        f"{canary.dtype} tier; worst at {tuple(int(k) for k in index)}: {g!r}, "
        f"expected {w!r} ({rel:.2%} off)",
    )


def judge(
    canary: Canary,
    returncode: int | None,
    stderr: str,
    result: np.ndarray | None,
    *,
    timed_out: bool = False,
) -> Finding:
    """A ``Finding`` from the child's exit: ``returncode`` (negative: killed by that
    signal), its ``stderr``, and the ``result`` it saved (None if it saved none)."""
    if timed_out:
        return Finding(canary, "hang", f"no answer within {TIMEOUT_S:g} s")
    if returncode is not None and returncode < 0:
        import signal

        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return Finding(canary, "crash", f"the process was killed by {name}")
    if returncode != 0 or result is None:
        return Finding(canary, "crash", f"exit status {returncode}: {_last_line(stderr)}")
    return compare(canary, np.asarray(result, dtype=np.float64))


def run_canary(
    canary: Canary,
    *,
    env: Mapping[str, str] | None = None,
    import_jaxgrad: bool = True,
    timeout: float = TIMEOUT_S,
    python: str = sys.executable,
) -> Finding:
    """Run ``canary`` in a child process (``python -c``) and judge what it did.

    Args:
      env: the child's environment (default: this process's, where ``XLA_FLAGS``
        holds what ``import jaxgrad`` set here, and the child's own ``import jaxgrad``
        keeps a user's setting).
      import_jaxgrad: import jaxgrad before jax in the child, as a user's program does.
    """
    env = dict(os.environ if env is None else env)
    env.setdefault("JAX_PLATFORMS", "cpu")
    with tempfile.TemporaryDirectory(prefix="jaxgrad-canary-") as folder:
        path = os.path.join(folder, "result.npy")
        try:
            done = subprocess.run(
                [python, "-c", child_source(canary, import_jaxgrad=import_jaxgrad), path],
                capture_output=True,
                text=True,
                env=env,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired:
            return judge(canary, None, "", None, timed_out=True)
        result = np.load(path) if os.path.exists(path) else None
    return judge(canary, done.returncode, done.stderr, result)


def check_backend(canaries: Sequence[Canary] = CANARIES, **run_kwargs) -> list[Finding]:
    """Every canary's ``Finding``, in order (``run_kwargs`` go to ``run_canary``)."""
    return [run_canary(canary, **run_kwargs) for canary in canaries]


def format_findings(findings: Sequence[Finding]) -> str:
    """One line per known bug found (issue, symptom, what happened, what to do), or one
    line saying that every canary passed."""
    bad = [f for f in findings if not f.ok]
    if not bad:
        issues = ", ".join(f.canary.issue for f in findings)
        return f"backend canaries: all {len(findings)} pass ({issues})"
    return "\n".join(
        f"{f.canary.issue} ({f.canary.symptom}): {f.status} - {f.detail}; "
        f"{f.canary.checks}. Fix: {f.canary.fix}"
        for f in bad
    )
