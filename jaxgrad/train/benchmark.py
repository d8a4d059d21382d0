"""Can a speed measurement be trusted? Round statistics, warm-up and verdicts.

Contract: everything here works on plain numbers (seconds per round, load
averages, CPU counts) and text (``/proc/cpuinfo``), so every verdict is testable on
synthetic timings. Only ``warm_up`` runs anything: it calls the function it is
given and reads the clock it is given (``time.perf_counter`` by default). Nothing
here imports a framework; ``scripts/bench.py`` does the timing and prints.

Each configuration (row) of a run gets its own verdict (``verdict``). A row is
*trusted* only when all of these hold:

- **load**: the 1-minute load average before the run is at most
  ``load_per_cpu × cpus`` (other work already running), and after it at most
  ``cpus + load_per_cpu × cpus`` (the benchmark itself keeps every core busy, so
  it adds up to ``cpus`` to the average). On a busy machine torch's OpenMP threads
  spin-wait for cores other processes hold, and one framework is slowed far more
  than the other: a ratio measured there describes the machine, not the frameworks.
- **spread**: for every contender of the row, the interquartile range of its
  per-round times is at most ``max_spread`` × their median (the min-max ratio is
  reported beside it but one outlier round does not condemn a run).
- **steady state**: each contender of the row reached two consecutive warm-up rounds
  that agree within ``tolerance`` before its cap.

Load is run-wide: a loaded machine makes every row untrusted. A row's own noise
makes only that row untrusted. The matmul-peak probe's noise marks only what is
measured against the peak (the fraction-of-peak column, the peak goals): its rounds
are a few matmuls, far shorter than a row's, and one noisy probe must not void
rows that were steady. An untrusted row still prints its measurements, but never a
goal verdict; ``--strict`` turns any untrusted row into a non-zero exit status.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import time
from collections.abc import Callable, Mapping, Sequence

LOAD_PER_CPU = 0.5  # other work tolerated, in runnable processes per CPU
MAX_SPREAD = 0.10  # interquartile range / median of a contender's round times
WARMUP_TOLERANCE = 0.10  # two consecutive warm-up rounds within 10 % of each other
WARMUP_MAX_ROUNDS = 8

# /proc/cpuinfo flags that decide which matmul kernels the frameworks can use.
VECTOR_FLAGS = (
    "sse4_2",
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_vnni",
    "avx512_bf16",
    "avx512_fp16",
    "amx_tile",
    "amx_bf16",
    "amx_fp16",
    "amx_int8",
    "asimd",
    "sve",
)

# Environment variables that set thread pools or XLA's code generation.
THREAD_ENVIRONMENT = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "XLA_FLAGS",
    "TF_NUM_INTRAOP_THREADS",
    "ONEDNN_MAX_CPU_ISA",
)


@dataclasses.dataclass(frozen=True)
class Spread:
    """Spread of one contender's per-round times (seconds).

    ``relative_iqr`` is `(q3 - q1) / median`; ``max_over_min`` is the slowest
    round over the fastest.
    """

    median: float
    relative_iqr: float
    max_over_min: float
    rounds: int


def spread(times: Sequence[float]) -> Spread:
    """The median, relative IQR and max/min of per-round ``times`` (seconds, > 0)."""
    times = [float(t) for t in times]
    if not times:
        raise ValueError("`times` is empty: a contender needs at least one timed round.")
    if any(not t > 0 for t in times):
        raise ValueError(f"`times` (={times}) must all be positive seconds.")
    median = statistics.median(times)
    if len(times) >= 2:
        q1, _, q3 = statistics.quantiles(times, n=4, method="inclusive")
    else:
        q1 = q3 = times[0]
    return Spread(
        median=median,
        relative_iqr=(q3 - q1) / median,
        max_over_min=max(times) / min(times),
        rounds=len(times),
    )


@dataclasses.dataclass(frozen=True)
class WarmUp:
    """Warm-up rounds (seconds) and whether the last two agreed within the tolerance."""

    times: tuple
    steady: bool


def agree(a: float, b: float, tolerance: float) -> bool:
    """Two round times within ``tolerance`` of each other, relative to the faster."""
    return abs(a - b) <= tolerance * min(a, b)


def warm_up(
    run: Callable[[], object],
    *,
    tolerance: float = WARMUP_TOLERANCE,
    max_rounds: int = WARMUP_MAX_ROUNDS,
    clock: Callable[[], float] = time.perf_counter,
) -> WarmUp:
    """Call ``run`` until two consecutive rounds agree within ``tolerance`` (or ``max_rounds``).

    ``run`` must finish its work before returning (block on the device). Returns
    every warm-up round's time and whether steady state was reached; the timed
    rounds come after, so caches, allocators and thread pools are warm by then.
    """
    if not isinstance(max_rounds, int) or max_rounds < 2:
        raise ValueError(
            f"`max_rounds` (={max_rounds!r}) must be an int >= 2: steady state "
            "needs two rounds to compare."
        )
    if not tolerance > 0:
        raise ValueError(f"`tolerance` (={tolerance!r}) must be > 0.")
    times = []
    for _ in range(max_rounds):
        began = clock()
        run()
        times.append(clock() - began)
        if len(times) >= 2 and agree(times[-2], times[-1], tolerance):
            return WarmUp(tuple(times), True)
    return WarmUp(tuple(times), False)


@dataclasses.dataclass(frozen=True)
class Trust:
    """A run's verdict on itself: trusted, or the reasons it is not."""

    reasons: tuple = ()

    @property
    def trusted(self) -> bool:
        return not self.reasons

    def describe(self) -> str:
        return "trusted" if self.trusted else "untrusted: " + "; ".join(self.reasons)


def load_reasons(
    load_before: float, load_after: float, cpus: int, *, load_per_cpu: float = LOAD_PER_CPU
) -> list[str]:
    """Why the 1-minute load averages around a run make it untrustworthy (``[]``: they don't)."""
    if not isinstance(cpus, int) or cpus < 1:
        raise ValueError(f"`cpus` (={cpus!r}) must be an int >= 1.")
    reasons = []
    before_limit = load_per_cpu * cpus
    after_limit = cpus + load_per_cpu * cpus  # the benchmark itself keeps `cpus` busy
    if load_before > before_limit:
        reasons.append(
            f"load {load_before:.1f} on {cpus} cores before the run (limit {before_limit:.1f})"
        )
    if load_after > after_limit:
        reasons.append(
            f"load {load_after:.1f} on {cpus} cores after the run "
            f"(limit {after_limit:.1f}, the benchmark's own {cpus} included)"
        )
    return reasons


def spread_reasons(spreads: Mapping[str, Spread], *, max_spread: float = MAX_SPREAD) -> list[str]:
    """Why the contenders' round spreads make a measurement untrustworthy."""
    return [
        f"{name} rounds spread {100 * s.relative_iqr:.1f}% (IQR/median, limit "
        f"{100 * max_spread:.0f}%; max/min {s.max_over_min:.2f})"
        for name, s in spreads.items()
        if s.relative_iqr > max_spread
    ]


def warmup_reasons(
    warmups: Mapping[str, WarmUp], *, tolerance: float = WARMUP_TOLERANCE
) -> list[str]:
    """Contenders whose warm-up never reached two rounds within ``tolerance``."""
    return [
        f"{name} never steady in {len(w.times)} warm-up rounds (consecutive rounds "
        f"differ by > {100 * tolerance:.0f}%)"
        for name, w in warmups.items()
        if not w.steady
    ]


def judge(
    *,
    run_reasons: Sequence[str] = (),
    spreads: Mapping[str, Spread] = {},
    warmups: Mapping[str, WarmUp] = {},
    max_spread: float = MAX_SPREAD,
    tolerance: float = WARMUP_TOLERANCE,
) -> Trust:
    """One measurement's ``Trust``: the run-wide reasons plus its own spread and warm-up."""
    return Trust(
        tuple(run_reasons)
        + tuple(spread_reasons(spreads, max_spread=max_spread))
        + tuple(warmup_reasons(warmups, tolerance=tolerance))
    )


def combine(*trusts: Trust) -> Trust:
    """One ``Trust`` with every reason of ``trusts``, each once, in order."""
    reasons = []
    for trust in trusts:
        reasons.extend(r for r in trust.reasons if r not in reasons)
    return Trust(tuple(reasons))


@dataclasses.dataclass(frozen=True)
class Verdict:
    """A whole run's verdict: run-wide (load), per row, and for the matmul-peak probe.

    ``rows[name]`` holds the run-wide reasons plus that row's own spreads and
    warm-ups: it decides whether the row's ratios are results. ``peak`` holds only
    the probe's own spread: it decides whether fractions of the peak are results
    (``peak_column``). ``trusted`` (every row trusted) is what ``--strict`` requires.
    """

    run: Trust
    rows: Mapping[str, Trust]
    peak: Trust

    @property
    def trusted(self) -> bool:
        return self.run.trusted and all(t.trusted for t in self.rows.values())

    @property
    def untrusted_rows(self) -> list[str]:
        return [name for name, trust in self.rows.items() if not trust.trusted]

    def peak_column(self, row: str) -> Trust:
        """The trust of ``row``'s fraction of the peak: the row's and the probe's reasons."""
        return combine(self.rows[row], self.peak)


PEAK_NOISY = "peak probe noisy"


def peak_reasons(
    peak_spreads: Mapping[str, Spread], *, max_spread: float = MAX_SPREAD
) -> list[str]:
    """Why the matmul-peak probe's rounds make fractions of the peak untrustworthy."""
    return [
        f"{PEAK_NOISY}: {reason}"
        for reason in spread_reasons(
            {f"matmul peak ({side})": s for side, s in peak_spreads.items()}, max_spread=max_spread
        )
    ]


def verdict(
    *,
    run_reasons: Sequence[str] = (),
    row_spreads: Mapping[str, Mapping[str, Spread]],
    row_warmups: Mapping[str, Mapping[str, WarmUp]] = {},
    peak_spreads: Mapping[str, Spread] = {},
    max_spread: float = MAX_SPREAD,
    tolerance: float = WARMUP_TOLERANCE,
) -> Verdict:
    """Judge a run: each row by the load and its own contenders, the peak by its probe.

    Args:
      run_reasons: run-wide reasons (``load_reasons``); they make every row untrusted.
      row_spreads: ``{row: {contender: Spread}}``.
      row_warmups: ``{row: {contender: WarmUp}}`` (rows missing here: not checked).
      peak_spreads: ``{side: Spread}`` of the matmul-peak probe (``"jax"``, ``"torch"``).
      max_spread, tolerance: as ``judge``.

    Returns:
      A ``Verdict``.
    """
    rows = {
        name: judge(
            run_reasons=run_reasons,
            spreads=spreads,
            warmups=row_warmups.get(name, {}),
            max_spread=max_spread,
            tolerance=tolerance,
        )
        for name, spreads in row_spreads.items()
    }
    return Verdict(
        run=Trust(tuple(run_reasons)),
        rows=rows,
        peak=Trust(tuple(peak_reasons(peak_spreads, max_spread=max_spread))),
    )


def goal_verdict(ratio: float, goal: float, trust: Trust) -> str:
    """``"met"`` / ``"NOT met"`` for a trusted measurement, else ``"untrusted: ..."``.

    An untrusted ratio is never compared with its goal: a starved contender can make
    either side look arbitrarily fast.
    """
    if not trust.trusted:
        return trust.describe()
    return "met" if ratio >= goal else "NOT met"


def judge_timings(load_before: float, load_after: float, spreads: Mapping[str, Spread]) -> Trust:
    """The ``Trust`` of a side measurement (no warm-up record): this machine's load
    before and after it, and each timed contender's spread of rounds."""
    return judge(run_reasons=load_reasons(load_before, load_after, usable_cpus()), spreads=spreads)


def describe_cpu() -> str:
    """``"<model>, N usable CPUs; vector extensions: avx2 ..."``, for a header line."""
    cpu = cpu_info()
    return (
        f"{cpu['model']}, {usable_cpus()} usable CPUs; vector extensions: "
        f"{' '.join(cpu['flags']) or 'none found'}"
    )


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return os.cpu_count() or 1


def parse_cpuinfo(text: str) -> dict:
    """``{"model": str, "logical_cpus": int, "flags": [the VECTOR_FLAGS present]}``.

    ``text`` is ``/proc/cpuinfo`` (x86 ``model name``/``flags``, Arm ``Features``);
    the first processor's model and flags stand for all.
    """
    model, flags, logical = None, None, 0
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "processor":
            logical += 1
        elif key in ("model name", "cpu model", "hardware") and model is None:
            model = value.strip()
        elif key in ("flags", "features") and flags is None:
            flags = set(value.split())
    return {
        "model": model or "unknown",
        "logical_cpus": logical,
        "flags": [f for f in VECTOR_FLAGS if f in (flags or ())],
    }


def cpu_info(path: str = "/proc/cpuinfo") -> dict:
    """``parse_cpuinfo`` of this machine, or ``platform``'s answer where there is no such file."""
    try:
        with open(path) as handle:
            return parse_cpuinfo(handle.read())
    except OSError:
        import platform

        return {
            "model": platform.processor() or platform.machine(),
            "logical_cpus": os.cpu_count() or 0,
            "flags": [],
        }


def thread_environment(environ: Mapping[str, str] = os.environ) -> dict:
    """The thread-pool and XLA variables of ``environ`` that are set."""
    return {k: environ[k] for k in THREAD_ENVIRONMENT if k in environ}
