"""Test set-up shared by every parity test (the parity policy: README, "Tolerances").

- torch runs on one thread so a busy 2-core machine cannot slow it 10×;
- JAX matmuls run at ``highest`` precision (no bf16/TF32 passes on accelerators);
- ``x64`` enables float64 for one test only; tests still assert output dtypes;
- ``seed`` is derived from the test's id, so every test is reproducible alone;
- XLA's compilation cache lives in a fresh temporary folder per test process, so a
  program compiled twice in one run (the same layer in a report row and a test, a
  sample in train and eval mode) is compiled once; nothing outlives the run.
"""

from __future__ import annotations

import atexit
import shutil
import tempfile
import zlib

import jax
import numpy as np
import pytest
import torch

torch.set_num_threads(1)
jax.config.update("jax_default_matmul_precision", "highest")

# set before the first compilation (the cache is initialised once per process)
_XLA_CACHE = tempfile.mkdtemp(prefix="jaxgrad-xla-cache-")
atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)
jax.config.update("jax_compilation_cache_dir", _XLA_CACHE)
# programs that take 0.1 s or more to compile; below, writing the entry costs more
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.1)


@pytest.fixture(autouse=True)
def _restore_jax_config():
    """Scripts' ``main`` (port.py, doctor.py) switch x64 on for their process, as a script
    should; a test calling one in-process must not leave it on for the tests after it."""
    saved = jax.config.jax_enable_x64, jax.config.jax_default_matmul_precision
    yield
    jax.config.update("jax_enable_x64", saved[0])
    jax.config.update("jax_default_matmul_precision", saved[1])


@pytest.fixture
def x64():
    """Enable ``jax_enable_x64`` for the duration of the test."""
    with jax.enable_x64(True):
        yield


@pytest.fixture
def seed(request) -> int:
    """A seed derived from the test's node id; also seeds numpy's and torch's globals."""
    value = zlib.crc32(request.node.nodeid.encode()) & 0x7FFFFFFF
    np.random.seed(value)
    torch.manual_seed(value)
    return value


@pytest.fixture
def rng(seed) -> np.random.Generator:
    return np.random.default_rng(seed)
