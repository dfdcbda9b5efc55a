"""Shared fixtures: every result test runs on the CPU backend and on a GPU adapter.

The GPU runs are real: in CI that adapter is Mesa's lavapipe. Without any adapter they fail
(``backend="gpu"`` raises), they are never skipped.
"""

import os
import zlib

import numpy as np
import pytest

os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp/knng-xdg")
os.makedirs(os.environ["XDG_RUNTIME_DIR"], mode=0o700, exist_ok=True)

BACKENDS = ["cpu", "gpu"]


@pytest.fixture(params=BACKENDS)
def backend(request):
    return request.param


@pytest.fixture
def rng(request):
    # A fixed seed a test (from its id), so that a failure reruns alike.
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))
