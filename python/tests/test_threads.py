"""The GIL is released while knng computes, and Ctrl-C (SIGINT) stops a long run."""

import _thread
import threading
import time

import numpy as np
import pytest

import knng


def timed_graph(X, barrier, spans, slot):
    barrier.wait()
    start = time.perf_counter()
    knng.graph(X, 10, backend="cpu", algorithm="brute")
    spans[slot] = (start, time.perf_counter())


def test_two_threads_compute_at_once():
    X = np.random.default_rng(0).standard_normal((24000, 64)).astype(np.float32)
    knng.graph(X[:100], 3, backend="cpu")  # opens the engine before the clock starts
    spans = [None, None]
    barrier = threading.Barrier(2)
    threads = [threading.Thread(target=timed_graph, args=(X, barrier, spans, i)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    (s0, e0), (s1, e1) = spans
    overlap = min(e0, e1) - max(s0, s1)
    shorter = min(e0 - s0, e1 - s1)
    # With the GIL held through a call, one call would start only after the other ended.
    assert overlap > 0.5 * shorter, f"calls overlapped {overlap:.3f} s of {shorter:.3f} s"


def test_python_runs_while_knng_computes():
    X = np.random.default_rng(1).standard_normal((24000, 64)).astype(np.float32)
    worker = threading.Thread(target=knng.graph, args=(X, 10), kwargs={"backend": "cpu", "algorithm": "brute"})
    worker.start()
    time.sleep(0.05)
    spins = 0
    while worker.is_alive():
        spins += 1
    worker.join()
    assert spins > 10_000, f"the main thread ran only {spins} loops while knng computed"


def test_keyboard_interrupt_stops_a_long_run():
    # Brute force over 60000 x 256 takes seconds (3.8 s on 2 cores): Ctrl-C, 0.3 s in, must
    # end it well before, not only raise once it is over.
    X = np.random.default_rng(2).standard_normal((60000, 256)).astype(np.float32)
    timer = threading.Timer(0.3, _thread.interrupt_main)
    started = time.perf_counter()
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        knng.graph(X, 10, backend="cpu", algorithm="brute")
    elapsed = time.perf_counter() - started
    timer.cancel()
    full = time.perf_counter()
    knng.graph(X, 10, backend="cpu", algorithm="brute")
    full = time.perf_counter() - full
    assert elapsed < 0.3 + 0.5 * (full - 0.3), f"interrupted after {elapsed:.2f} s of a {full:.2f} s run"
