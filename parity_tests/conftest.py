"""Test set-up shared by every parity test (the parity policy: README, "Tolerances").

- torch runs on one thread so a busy 2-core machine cannot slow it 10×;
- JAX matmuls run at ``highest`` precision (no bf16/TF32 passes on accelerators);
- ``x64`` enables float64 for one test only; tests still assert output dtypes;
- ``seed`` is derived from the test's id, so every test is reproducible alone;
- XLA's compilation cache lives in one fresh temporary folder per run, shared by
  xdist's workers (the first process creates it and the workers inherit its path), so
  a program compiled twice in one run (the same layer in a report row and a test, on
  either worker) is compiled once; a size limit makes jax lock the folder with
  ``filelock`` while it reads and writes; nothing outlives the run;
- XLA compiles cheaply (LLVM at -O0, no expensive LLVM passes, the classic elemental
  emitters instead of the fusion emitters): the suite compiles thousands of tiny
  programs and runs each once or twice, so compiling is nearly all of its time (these
  flags: the report's rows 1.7x faster, the suite 702.6 s -> 439.9 s). float64
  verdicts cannot notice (the tier is 1e-10, rounding is
  1e-16); float32 rows must pass under both codegens, and do: CI runs the parity report
  (the same rows) with XLA's defaults before the suite. ``JAXGRAD_TEST_XLA_DEFAULT=1``
  runs the suite with XLA's defaults too; flags already in ``XLA_FLAGS`` win.
- each test process lowers every program into one shared MLIR context: jax builds a
  fresh context for each program it lowers (``make_ir_context``: create it, load its
  dialects, ~5 ms, then tear it down), and the suite lowers thousands; sharing one cut
  the suite's CPU time by 16% (user 668 s -> 559 s) and its peak memory 4.3 -> 1.7 GB;
  the lowered text is the same (``_mlir_context.py``; ``test_suite_setup.py`` compares
  it); ``JAXGRAD_TEST_XLA_DEFAULT=1`` keeps jax's fresh contexts too.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import zlib

FAST_COMPILE_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_llvm_disable_expensive_passes=true",
    "--xla_cpu_use_fusion_emitters=false",
)
_flags = os.environ.get("XLA_FLAGS", "")
if os.environ.get("JAXGRAD_TEST_XLA_DEFAULT") != "1" and FAST_COMPILE_FLAGS[0] not in _flags:
    # before jax starts its backend (xdist's workers inherit it from the controller);
    # the user's own flags come last, so they win
    os.environ["XLA_FLAGS"] = " ".join([*FAST_COMPILE_FLAGS, _flags]).strip()

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# (the controller, or a lone process, owns the folder; xdist's workers inherit its path)
_XLA_CACHE = os.environ.get("JAXGRAD_TEST_XLA_CACHE")
if _XLA_CACHE is None or not os.path.isdir(_XLA_CACHE):
    _XLA_CACHE = tempfile.mkdtemp(prefix="jaxgrad-xla-cache-")
    os.environ["JAXGRAD_TEST_XLA_CACHE"] = _XLA_CACHE
    atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)

# the trainer's strategy cache (jaxgrad.train.strategy): a run's own, never the user's
# ~/.cache/jaxgrad, inherited by the workers and by the scripts tests run as subprocesses
os.environ["JAXGRAD_CACHE_DIR"] = os.path.join(_XLA_CACHE, "jaxgrad-cache")
# train.py's default strategy in the scripts the tests run: one jitted step per batch, as
# before the trainer chose (its probe costs ~15 s per model); test_train_strategy.py and
# the tests that pass --strategy exercise the choice itself
os.environ.setdefault("JAXGRAD_STRATEGY", "step")


def _set_up_jax_and_torch() -> None:
    """Every process that runs tests, before its first test (and its first compilation:
    jax initialises its cache once per process)."""
    import jax
    import torch

    torch.set_num_threads(1)
    jax.config.update("jax_default_matmul_precision", "highest")
    if os.environ.get("JAXGRAD_TEST_XLA_DEFAULT") != "1":
        from jax._src.interpreters import mlir

        from parity_tests._mlir_context import share_one_mlir_context

        share_one_mlir_context(mlir)
    jax.config.update("jax_compilation_cache_dir", _XLA_CACHE)
    # a limit (8 GiB, never reached) turns on jax's file lock: two workers write one folder
    jax.config.update("jax_compilation_cache_max_size", 8 << 30)
    # programs that take 0.1 s or more to compile; below, writing the entry costs more
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)


DEFAULT_WORKERS = {"numprocesses": "auto", "maxprocesses": 4, "dist": "worksteal"}
"""What a plain ``pytest`` runs on (``-n auto --maxprocesses=4 --dist worksteal``): two
workers on a 2-core machine, at most 4 on a large one (a dozen torch+jax processes would
not fit its memory)."""


def wants_default_workers(config) -> bool:
    """True when xdist is loaded, the user chose no workers (no ``-n``, no ``--tx``) and
    this process is not itself one of xdist's workers (whose ``-n`` xdist clears)."""
    return (
        config.pluginmanager.hasplugin("xdist")
        and not hasattr(config, "workerinput")
        and config.getoption("numprocesses", None) is None
        and not config.getoption("tx", None)
    )


@pytest.hookimpl(wrapper=True)
def pytest_cmdline_main(config):
    """The default workers, set before xdist's own ``pytest_cmdline_main`` turns ``-n``
    into worker processes. In ``addopts`` they would make ``-p no:xdist`` (and an
    environment without pytest-xdist) a usage error; here ``-n 0``, ``-n 3`` or
    ``-p no:xdist`` simply win."""
    if wants_default_workers(config):
        config.option.numprocesses = DEFAULT_WORKERS["numprocesses"]
        if config.option.maxprocesses is None:
            config.option.maxprocesses = DEFAULT_WORKERS["maxprocesses"]
        if config.option.dist == "no":
            config.option.dist = DEFAULT_WORKERS["dist"]
    return (yield)


def _runs_no_tests(config) -> bool:
    """xdist's controller hands the tests to its workers and runs none itself; it skips
    importing jax and torch (~2 s sooner to the first test)."""
    return (
        not hasattr(config, "workerinput")
        and config.getoption("dist", "no") != "no"
        and bool(config.getoption("tx", None))
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    if not _runs_no_tests(config):
        _set_up_jax_and_torch()


@pytest.fixture(autouse=True)
def _restore_jax_config():
    """Scripts' ``main`` (port.py, doctor.py) switch x64 on for their process, as a script
    should; a test calling one in-process must not leave it on for the tests after it."""
    import jax

    saved = jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_enable_x64", saved[0])
    jax.config.update("jax_default_matmul_precision", saved[1])


@pytest.fixture
def x64():
    """Enable ``jax_enable_x64`` for the duration of the test."""
    import jax

    with jax.enable_x64(True):
        yield


@pytest.fixture
def seed(request) -> int:
    """A seed derived from the test's node id; also seeds numpy's and torch's globals."""
    import torch

    value = zlib.crc32(request.node.nodeid.encode()) & 0x7FFFFFFF
    np.random.seed(value)
    torch.manual_seed(value)
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)


def pytest_collection_modifyitems(items):
    """Tests marked ``slow`` (or ``long``) run first, in their usual order, then the rest: with xdist's
    work stealing the run then ends on short tests that spread over both workers, not on
    one 20-s test that keeps one worker busy while the other waits (13 s of a run)."""
    items.sort(key=lambda item: not any(item.get_closest_marker(m) for m in ("slow", "long")))


@pytest.fixture(scope="module")
def browser():
    """A headless Chromium (``jaxgrad.html.browser``) for one test module; the test skips,
    saying why, where no Chromium is installed or it cannot start."""
    from jaxgrad.html.browser import Browser, BrowserError, find_chromium

    executable = find_chromium()
    if executable is None:
        pytest.skip("no Chromium on PATH (install Debian's `chromium`, as .ci/run does)")
    try:
        opened = Browser(executable, width=1280, height=900)
    except BrowserError as exc:
        pytest.skip(f"Chromium at {executable} could not be launched: {exc}")
    yield opened
    opened.close()
