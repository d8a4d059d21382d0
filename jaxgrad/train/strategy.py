"""Which execution strategy runs a training run fastest: candidates, cost model, cache.

A run of ``total_steps`` steps can be executed as:

- ``"step"``: one jitted step per batch (one compile, one dispatch per step);
- ``"epoch"``: each stretch of steps as one ``lax.scan`` call (rolled loop);
- ``"unroll:K"``: the same scan with ``unroll=K`` (K copies of the step in the loop body);
- ``"unrolled"``: the scan fully unrolled (no loop; compile time grows with the length).

They compute the same float32 arithmetic (float32 tier, see the trainers' tests) but run
at very different speeds depending on the model and the backend: on XLA:CPU
convolutions inside a rolled loop run several times slower, while small MLPs gain
most from one dispatch per epoch. So ``"auto"`` measures instead of guessing: each
candidate runs a few steps (``probe``), the first call's compile time is counted, and
``choose`` picks the smallest estimated total

    ``compile × compiles + total_steps × seconds per step``

(a fully unrolled call's compile time is scaled by its length over the probe's), plus,
for the fused strategies, ``calls × seconds per call``: a fused call costs a fixed time
beyond its steps (its arguments, outputs and buffers), which an 8-step probe would
spread over 8 steps where the run spreads it over a whole epoch. So the rolled epoch is
also timed at a longer call (``overhead_steps``: the run's longest, at most
``OVERHEAD_STEPS``, when that is at least twice the probe's), and the two lengths separate the per-call from the per-step time
(``split_call_overhead``; the fused candidates are assumed to share the per-call
part). Measured on the 784-256-10 MLP at batch 128 (AVX-512 + AMX Xeon): the epoch
took 0.80 ms/step in 8-step calls and 0.67 in 100-step ones, about 1.1 ms per call,
and the 8-step probe chose the per-step loop (0.82 ms/step) over it. The
probe's timings are cached on disk (``read_cache`` / ``write_cache``), keyed by what
decides them: the model, shapes and dtypes, jax and jaxlib versions, the CPU model and
vector extensions (``jaxgrad.train.benchmark.cpu_info``), the device kind, jaxgrad's
version and how it lowers convolutions (``jaxgrad.nn.conv_lowering``); the choice itself is recomputed from them for each run's length. A corrupt cache warns and
is probed again, never an error.

The probe is bounded by the run it serves (``probe_budget``): ``"step"`` is probed
first, and a fused candidate only while the run could win back what probing it costs
at least (a compile of the step, and its calls); a run shorter than that keeps the
step (its compile is the run's own) and says so in the ``Choice``'s ``note``.

Everything here is a pure function of numbers and mappings except ``probe`` (calls the
runners it is given, reads the clock it is given) and the cache's file I/O, so the
choice is testable with injected timings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence

STRATEGIES = ("auto", "step", "epoch", "unroll:K", "unrolled")
PROBE_STEPS = 8  # steps per probe call (fewer when a call is shorter)
PROBE_REPEATS = 3  # rounds of warm calls after the first (compile) calls; the fastest counts
OVERHEAD_STEPS = 64  # the rolled epoch's second probe length, at most (see split_call_overhead)
UNROLL_FACTOR = 4  # the partially unrolled candidate, "unroll:4"
MAX_UNROLLED_STEPS = 256  # longer calls are not fully unrolled: compile would take minutes
CACHE_VERSION = 2  # 2: timings carry call_seconds
CACHE_FILE = "strategy.json"


def parse_strategy(value, argument: str = "strategy") -> str:
    """The canonical form of a strategy string; raises ``ValueError`` naming ``argument``.

    Args:
      value: ``"auto"``, ``"step"``, ``"epoch"``, ``"unroll:K"`` (an int K >= 2) or
        ``"unrolled"``.
      argument: the name the error message gives the value (``"strategy"``, ``"--strategy"``).

    Returns:
      The strategy, e.g. ``"unroll:4"``.

    Raises:
      ValueError: anything else.
    """
    expected = "one of 'auto', 'step', 'epoch', 'unroll:K' (an int K >= 2) or 'unrolled'"
    if not isinstance(value, str):
        raise ValueError(f"`{argument}` (={value!r}) must be {expected}.")
    text = value.strip().lower()
    if text in ("auto", "step", "epoch", "unrolled"):
        return text
    match = re.fullmatch(r"unroll:(\d+)", text)
    if match and int(match.group(1)) >= 2:
        return f"unroll:{int(match.group(1))}"
    raise ValueError(f"`{argument}` (={value!r}) must be {expected}.")


def scan_unroll(strategy: str) -> int | bool:
    """``lax.scan``'s ``unroll`` for a fused strategy: ``"epoch"`` 1, ``"unroll:K"`` K,
    ``"unrolled"`` True. Raises ``ValueError`` for ``"step"`` and ``"auto"`` (no scan)."""
    strategy = parse_strategy(strategy)
    if strategy == "epoch":
        return 1
    if strategy == "unrolled":
        return True
    if strategy.startswith("unroll:"):
        return int(strategy.split(":")[1])
    raise ValueError(f"`strategy` (={strategy!r}) runs no scan; it has no `unroll`.")


def candidates(
    longest_call: int, *, unroll: int = UNROLL_FACTOR, max_unrolled: int = MAX_UNROLLED_STEPS
) -> list[str]:
    """The strategies worth probing when a fused call runs at most ``longest_call`` steps.

    A one-step call has nothing to fuse (``["step"]``); ``"unroll:K"`` only where a
    call is longer than K; ``"unrolled"`` only up to ``max_unrolled`` steps per call.
    """
    if not isinstance(longest_call, int) or longest_call < 1:
        raise ValueError(f"`longest_call` (={longest_call!r}) must be an int >= 1.")
    if longest_call == 1:
        return ["step"]
    names = ["step", "epoch"]
    if longest_call > unroll:
        names.append(f"unroll:{unroll}")
    if longest_call <= max_unrolled:
        names.append("unrolled")
    return names


def probe_steps(call_lengths: Sequence[int], steps: int = PROBE_STEPS) -> int:
    """Steps per probe call: ``steps``, or the longest call when that is shorter."""
    return max(1, min(steps, max(call_lengths)))


def overhead_steps(
    call_lengths: Sequence[int], probe_steps: int, most: int = OVERHEAD_STEPS
) -> int | None:
    """The rolled epoch's second probe length: the longest call, at most ``most``;
    None when that is shorter than twice ``probe_steps``: the probe's calls are then
    most of a real call already, and the slope between two close lengths would
    divide two timings' noise by a few steps (10-step calls against 8-step ones put
    23 ms "per call" on a 25 ms transformer step)."""
    steps = min(max(call_lengths), most)
    return steps if steps >= 2 * probe_steps else None


@dataclasses.dataclass(frozen=True)
class Timing:
    """One candidate's probe: compile seconds (first call minus a warm call), seconds
    per step of a warm call and, for a fused strategy whose call overhead was measured
    (``split_call_overhead``), the seconds each call costs beyond its steps."""

    compile_seconds: float
    step_seconds: float
    call_seconds: float = 0.0


def probe(
    runners: Mapping[str, Callable[[], object]],
    *,
    steps: int | Mapping[str, int],
    repeats: int = PROBE_REPEATS,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Time each runner: one first call each (compile + run), then ``repeats`` rounds
    of warm calls, every runner once per round.

    Each runner must run ``steps`` steps (one count for all, or a count per runner's
    name) and block until they are done. The fastest
    warm call gives the seconds per step; the first call minus it, the compile time.
    Interleaving the warm calls round by round means a machine whose speed drifts
    (a shared VM's cores do, by 20-60 % between runs) slows every candidate alike
    instead of the ones probed last.
    """
    counts = dict(steps) if isinstance(steps, Mapping) else {name: steps for name in runners}
    for name in runners:
        if not isinstance(counts.get(name), int) or counts[name] < 1:
            raise ValueError(
                f"`steps` (={steps!r}) must be an int >= 1 for every runner ({name!r})."
            )

    def timed(run) -> float:
        began = clock()
        run()
        return clock() - began

    first = {name: timed(run) for name, run in runners.items()}
    warm = {name: [] for name in runners}
    for _ in range(max(1, repeats)):
        for name, run in runners.items():
            warm[name].append(timed(run))
    return {
        name: Timing(
            compile_seconds=max(first[name] - min(warm[name]), 0.0),
            step_seconds=min(warm[name]) / counts[name],
        )
        for name in runners
    }


def split_call_overhead(
    timings: Mapping[str, Timing], *, probe_steps: int, long_name: str, long_steps: int
) -> dict[str, Timing]:
    """The fused candidates' timings with their per-call overhead taken out of the
    per-step time, from the rolled epoch timed at two call lengths.

    ``timings[long_name]`` is the rolled epoch at ``long_steps`` steps per call,
    ``timings["epoch"]`` the same at ``probe_steps``: with a call costing ``a + n·b``,
    ``b`` is the slope between the two (at least 0) and ``a`` the short call's rest
    (between 0 and the whole short call). Every fused candidate (not ``"step"``, whose
    calls are its steps) keeps its own short-call time minus ``a``, per step, and
    ``call_seconds = a``; the long probe's entry is dropped (its compile belongs to a
    call length the run may use, not to a candidate).
    """
    short, longer = timings["epoch"], timings[long_name]
    short_call = short.step_seconds * probe_steps
    per_step = max(
        (longer.step_seconds * long_steps - short_call) / (long_steps - probe_steps), 0.0
    )
    overhead = min(max(short_call - probe_steps * per_step, 0.0), short_call)
    result = {}
    for name, timing in timings.items():
        if name == long_name:
            continue
        if name == "step":
            result[name] = timing
            continue
        rest = max(timing.step_seconds * probe_steps - overhead, 0.0) / probe_steps
        result[name] = Timing(timing.compile_seconds, rest, overhead)
    return result


def estimate_seconds(
    strategy: str,
    timing: Timing,
    *,
    total_steps: int,
    call_lengths: Sequence[int],
    probe_steps: int,
    calls: int | None = None,
) -> float:
    """Estimated wall time of a run: compiles plus ``total_steps`` × seconds per step,
    plus the fused calls' ``call_seconds`` each.

    ``call_lengths`` are the distinct lengths the run's fused calls compile for (each
    compiles once); ``calls`` the number of fused calls (None: ``ceil(total_steps /
    longest)``); ``"step"`` compiles once whatever they are; ``"unrolled"`` compiles
    in time proportional to the call's length, scaled from the probe's ``probe_steps``.
    """
    if total_steps < 0:
        raise ValueError(f"`total_steps` (={total_steps!r}) must be >= 0.")
    strategy = parse_strategy(strategy)
    lengths = sorted(set(int(n) for n in call_lengths)) or [1]
    if strategy == "step":
        compile_total = timing.compile_seconds
    elif strategy == "unrolled":
        compile_total = sum(timing.compile_seconds * n / probe_steps for n in lengths)
    else:
        compile_total = timing.compile_seconds * len(lengths)
    if strategy == "step":
        calls = 0
    elif calls is None:
        calls = -(-total_steps // max(lengths))
    return compile_total + total_steps * timing.step_seconds + calls * timing.call_seconds


def choose(
    timings: Mapping[str, Timing],
    *,
    total_steps: int,
    call_lengths: Sequence[int],
    probe_steps: int,
    calls: int | None = None,
) -> tuple[str, dict[str, float]]:
    """The candidate with the smallest estimated total, and every estimate (seconds).

    Ties go to the earlier candidate in ``timings``' order (``"step"`` first: the
    simplest). ``"unrolled"`` is dropped where a call is longer than
    ``MAX_UNROLLED_STEPS``.
    """
    if not timings:
        raise ValueError("`timings` is empty: nothing to choose from.")
    longest = max(call_lengths) if call_lengths else 1
    estimates = {
        name: estimate_seconds(
            name,
            timing,
            total_steps=total_steps,
            call_lengths=call_lengths,
            probe_steps=probe_steps,
            calls=calls,
        )
        for name, timing in timings.items()
        if not (name == "unrolled" and longest > MAX_UNROLLED_STEPS)
    }
    if not estimates:
        raise ValueError("no candidate can run calls of this length.")
    best = min(estimates, key=lambda name: (estimates[name], list(estimates).index(name)))
    return best, estimates


# ------------------------------------------------------------------------------ cache
def cache_path(environ: Mapping[str, str] = os.environ) -> str:
    """Where probed timings are cached: ``$JAXGRAD_CACHE_DIR/strategy.json``, else
    ``$XDG_CACHE_HOME/jaxgrad/strategy.json``, else ``~/.cache/jaxgrad/strategy.json``."""
    if environ.get("JAXGRAD_CACHE_DIR"):
        return os.path.join(environ["JAXGRAD_CACHE_DIR"], CACHE_FILE)
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxgrad", CACHE_FILE)


def describe_model(model) -> str:
    """A model's configuration as text (its dataclass repr, object addresses removed)."""
    return re.sub(r" at 0x[0-9a-fA-F]+", "", repr(model))


def environment(device=None) -> dict:
    """What besides the model decides the timings: jax, jaxlib, CPU model and vector
    extensions, ``device``'s kind (the default device when None), jaxgrad's version, its
    convolution lowering (mode and rules) and whether freed host memory is kept
    (``jaxgrad.train.keep_freed_host_memory``)."""
    import jax
    import jaxlib

    from jaxgrad._version import __version__
    from jaxgrad.nn.functional import _lowering
    from jaxgrad.train.benchmark import cpu_info
    from jaxgrad.train.host_memory import host_memory_state

    device = device if device is not None else jax.devices()[0]
    cpu = cpu_info()
    return {
        "jax": jax.__version__,
        "jaxlib": jaxlib.__version__,
        "cpu": cpu["model"],
        "cpu_flags": cpu["flags"],
        "platform": device.platform,
        "device_kind": device.device_kind,
        "jaxgrad": __version__,
        # how convolutions compile changes the timings (jaxgrad.nn.conv_lowering)
        "conv_lowering": [_lowering.current_mode(), _lowering.RULES],
        # page faults on each call's buffers cost per-step calls most (host_memory)
        "host_memory": host_memory_state(),
    }


def cache_key(parts: Mapping) -> str:
    """A stable key for ``parts`` (JSON-able): a SHA-256 of their sorted JSON, 32 hex digits."""
    text = json.dumps(parts, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _load(path: str) -> dict:
    """The cache file's entries; ``{}`` when missing; warns and returns ``{}`` when corrupt."""
    try:
        with open(path) as handle:
            data = json.load(handle)
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        warnings.warn(
            f"strategy cache {path} is unreadable ({exc}); probing again.",
            RuntimeWarning,
            stacklevel=3,
        )
        return {}
    if (
        not isinstance(data, dict)
        or data.get("version") != CACHE_VERSION
        or not isinstance(data.get("entries"), dict)
    ):
        warnings.warn(
            f"strategy cache {path} is not a version-{CACHE_VERSION} cache; probing again.",
            RuntimeWarning,
            stacklevel=3,
        )
        return {}
    return data["entries"]


def timings_from_json(entry) -> dict[str, Timing] | None:
    """An entry's ``timings`` as ``Timing`` objects, or None if they are malformed."""
    try:
        timings = {
            str(name): Timing(
                float(t["compile_seconds"]),
                float(t["step_seconds"]),
                float(t.get("call_seconds", 0.0)),
            )
            for name, t in entry["timings"].items()
        }
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    if not timings or any(
        not (t.compile_seconds >= 0 and t.step_seconds >= 0 and t.call_seconds >= 0)
        for t in timings.values()
    ):
        return None
    return timings


def read_cache(path: str, key: str) -> dict[str, Timing] | None:
    """The timings cached under ``key`` in ``path``, or None (missing, or corrupt: warned)."""
    entries = _load(path)
    if key not in entries:
        return None
    timings = timings_from_json(entries[key])
    if timings is None:
        warnings.warn(
            f"strategy cache {path}: entry {key} is malformed; probing again.",
            RuntimeWarning,
            stacklevel=2,
        )
    return timings


def write_cache(
    path: str, key: str, timings: Mapping[str, Timing], *, description: Mapping | None = None
) -> bool:
    """Store ``timings`` under ``key`` (atomically: a temporary file renamed over ``path``).

    A corrupt existing file is replaced; a file that cannot be written warns and
    returns False (the run goes on uncached).
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a corrupt file was already reported by the read
        entries = _load(path)
    entries[key] = {
        "timings": {k: dataclasses.asdict(t) for k, t in timings.items()},
        "description": dict(description or {}),
        "probed_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    try:
        directory = os.path.dirname(os.path.abspath(path))
        os.makedirs(directory, exist_ok=True)
        handle, temporary = tempfile.mkstemp(dir=directory, prefix=".strategy-", suffix=".json")
        with os.fdopen(handle, "w") as out:
            json.dump({"version": CACHE_VERSION, "entries": entries}, out, indent=1)
        os.replace(temporary, path)
    except OSError as exc:
        warnings.warn(
            f"strategy cache {path} could not be written ({exc}).", RuntimeWarning, stacklevel=2
        )
        return False
    return True


# ----------------------------------------------------------------------------- choice
def describe_timings(timings: Mapping[str, Timing]) -> str:
    """``"step 0.76 ms/step + 0.0 s compile, epoch 0.60 ms/step + 1.71 ms/call + ..."``."""
    return ", ".join(
        f"{name} {1e3 * t.step_seconds:.2f} ms/step + "
        + (f"{1e3 * t.call_seconds:.2f} ms/call + " if t.call_seconds else "")
        + f"{t.compile_seconds:.1f} s compile"
        for name, t in timings.items()
    )


@dataclasses.dataclass(frozen=True)
class Choice:
    """The strategy a run uses and where it came from.

    ``source`` is ``"forced"`` (asked for by name), ``"only"`` (calls of one step:
    nothing to fuse), ``"multi-process"`` (``"auto"`` in a run of several processes,
    which must not choose apart: ``"step"``), ``"probed"`` (measured now),
    ``"cached"`` (measured earlier, read from ``cache_path``) or ``"checkpoint"``
    (the strategy of the run being resumed, so a resumed run repeats its arithmetic).
    """

    strategy: str
    source: str
    timings: Mapping[str, Timing] = dataclasses.field(default_factory=dict)
    estimates: Mapping[str, float] = dataclasses.field(default_factory=dict)
    cache_path: str | None = None
    note: str = ""  # why the probe was cut short, if it was (``select``)

    def describe(self) -> str:
        """``"epoch (probed: step 12.1 ms, epoch 9.8 ms, ...; cached in PATH)"``."""
        if self.source == "forced":
            return f"{self.strategy} (forced)"
        if self.source == "multi-process":
            return (
                f"{self.strategy} (several processes would each probe alone and might "
                "disagree; force another with strategy=...)"
            )
        if self.source == "only":
            return f"{self.strategy} (one step per call: nothing to fuse)"
        if self.source == "checkpoint":
            return f"{self.strategy} (the resumed checkpoint's)"
        per_step = describe_timings(self.timings)
        where = (
            f"; cached in {self.cache_path}"
            if self.source == "probed" and self.cache_path
            else f"; from {self.cache_path}"
            if self.cache_path
            else ""
        )
        note = f"; {self.note}" if self.note else ""
        return f"{self.strategy} ({self.source}: {per_step}{where}{note})"

    def to_json(self) -> dict:
        """The choice as plain JSON-able data."""
        return {
            "strategy": self.strategy,
            "source": self.source,
            "timings": {k: dataclasses.asdict(t) for k, t in self.timings.items()},
            "estimates": dict(self.estimates),
            "cache_path": self.cache_path,
            "note": self.note,
        }


def probe_budget(
    step: Timing,
    names: Sequence[str],
    *,
    total_steps: int,
    probe_steps: int,
    long_steps: int | None,
    repeats: int = PROBE_REPEATS,
) -> tuple[list[str], float]:
    """The fused candidates worth probing after ``"step"``, and what they cost at least.

    A probe can save at most the whole run's time stepped (``total_steps`` × the step's
    seconds: no strategy takes less than nothing), and each fused candidate costs at
    least a compile of a loop whose body holds the step (the step's compile time) plus
    its ``1 + repeats`` calls at the step's speed (the rolled epoch's second, longer
    call too). Candidates are kept in order (cheapest first) while their summed
    lower bound stays within what the run could save; the rest are not probed.

    Returns:
      ``(kept names, the lower bound of all of ``names``' probe, kept or not)``.
    """
    budget = total_steps * step.step_seconds
    kept, spent, total_cost, full = [], 0.0, 0.0, False
    for name in names:
        called = probe_steps + ((long_steps or 0) if name == "epoch" else 0)
        cost = step.compile_seconds + (1 + repeats) * called * step.step_seconds
        total_cost += cost
        full = full or spent + cost > budget
        if not full:
            kept.append(name)
            spent += cost
    return kept, total_cost


def select(
    make_runners: Callable[[Sequence[str], int], Mapping[str, Callable[[], object]]],
    *,
    key_parts: Mapping,
    total_steps: int,
    call_lengths: Sequence[int],
    calls: int | None = None,
    cache: bool = True,
    path: str | None = None,
    clock: Callable[[], float] = time.perf_counter,
    probe_fn: Callable[..., Mapping[str, Timing]] | None = None,
) -> Choice:
    """Choose a strategy for a run: cached timings if any, else a probe (then cached).

    The probe is bounded by the run it serves: ``"step"`` is probed first (its compile
    is the run's own if it wins), then only the fused candidates whose least cost
    (``probe_budget``) the run could win back; a run shorter than the rest of the
    probe skips it (the ``Choice``'s ``note`` says which were left out and why) and
    caches nothing, so a longer run probes them later.

    Args:
      make_runners: ``(candidate names, probe steps) -> {name: runner}``; each runner
        runs that many steps of its strategy and blocks. Called only on a cache miss.
      key_parts: JSON-able description of everything the timings depend on (model,
        shapes, dtypes, ``environment()``); the candidates and probe length are added.
      total_steps: the run's steps, for the cost model.
      call_lengths: the distinct lengths the run's fused calls compile for.
      calls: how many fused calls the run makes (None: ``ceil(total_steps / longest)``).
      cache: read and write the cache at ``path``.
      path: the cache file (default ``cache_path()``).
      clock: the probe's clock; probe_fn: replaces ``probe`` (tests).

    Returns:
      A ``Choice`` with the timings and every candidate's estimate.
    """
    longest = max(call_lengths) if call_lengths else 1
    names = candidates(longest)
    steps = probe_steps(call_lengths or [1])
    if names == ["step"]:
        return Choice("step", "only")
    long_steps = overhead_steps(call_lengths, steps)
    path = path or cache_path()
    key = cache_key(
        {**key_parts, "candidates": names, "probe_steps": steps, "overhead_steps": long_steps}
    )
    timings = read_cache(path, key) if cache else None
    source, note = "cached", ""
    if timings is None or set(timings) != set(names):
        run_probe = probe_fn or probe
        runners = dict(make_runners(names, steps))
        stepped = run_probe({"step": runners["step"]}, steps={"step": steps}, clock=clock)["step"]
        fused, least = probe_budget(
            stepped, names[1:], total_steps=total_steps, probe_steps=steps, long_steps=long_steps
        )
        timings = {"step": stepped}
        if fused:  # the step again, round by round with them: a drifting machine
            runners = {name: runners[name] for name in ["step", *fused]}
            counts = {name: steps for name in runners}
            long_name = f"epoch, {long_steps} steps per call"
            if long_steps is not None:
                runners[long_name] = make_runners(["epoch"], long_steps)["epoch"]
                counts[long_name] = long_steps
            timings = dict(run_probe(runners, steps=counts, clock=clock))
            timings["step"] = Timing(
                stepped.compile_seconds,  # its first call was warm
                min(stepped.step_seconds, timings["step"].step_seconds),
            )
            if long_steps is not None:
                timings = split_call_overhead(
                    timings, probe_steps=steps, long_name=long_name, long_steps=long_steps
                )
        left_out = [name for name in names[1:] if name not in fused]
        if left_out:
            note = (
                f"{_listed(left_out)} not probed: the run's {total_steps} steps take "
                f"~{total_steps * stepped.step_seconds:.2g} s stepped, less than probing "
                f"{'them' if len(left_out) > 1 else 'it'} would cost "
                f"(at least {least:.2g} s for all {len(names) - 1})"
            )
        source = "probed"
        if cache:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # already reported by the first read
                meanwhile = read_cache(path, key)
            if meanwhile is not None and set(meanwhile) == set(names):
                # another process probed the same key meanwhile: the first writer wins,
                # so every run sharing the cache makes the same choice
                timings, source, note = meanwhile, "cached", ""
            elif left_out:
                path = None  # a partial probe is not cached: a longer run probes the rest
            elif not write_cache(path, key, timings, description=key_parts):
                path = None
    best, estimates = choose(
        timings, total_steps=total_steps, call_lengths=call_lengths, probe_steps=steps, calls=calls
    )
    return Choice(best, source, timings, estimates, path if cache else None, note)


def _listed(names: Sequence[str]) -> str:
    """``"a"``, ``"a and b"``, ``"a, b and c"``."""
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
