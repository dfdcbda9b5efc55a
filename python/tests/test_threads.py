"""The GIL is released while knng computes, and Ctrl-C (SIGINT) stops a long run."""

import _thread
import signal
import threading
import time

import numpy as np
import pytest

import knng


def long_input(seconds, seed, n=6000):
    """Data whose brute-force graph takes at least `seconds` on this machine (the rows
    doubled until it does), so that the tests below see a call in progress whatever the
    machine's speed."""
    rng = np.random.default_rng(seed)
    while True:
        X = rng.standard_normal((n, 64)).astype(np.float32)
        started = time.perf_counter()
        knng.graph(X, 10, backend="cpu", algorithm="brute")
        took = time.perf_counter() - started
        if took >= seconds or n >= 400_000:
            return X, took
        n *= 2


def timed_graph(X, barrier, spans, slot):
    barrier.wait()
    start = time.perf_counter()
    knng.graph(X, 10, backend="cpu", algorithm="brute")
    spans[slot] = (start, time.perf_counter())


def test_two_threads_compute_at_once():
    X, _ = long_input(0.3, seed=0)
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
    X, _ = long_input(0.3, seed=1)
    worker = threading.Thread(target=knng.graph, args=(X, 10), kwargs={"backend": "cpu", "algorithm": "brute"})
    worker.start()
    time.sleep(0.05)
    spins = 0
    while worker.is_alive():
        spins += 1
    worker.join()
    assert spins > 10_000, f"the main thread ran only {spins} loops while knng computed"


def test_keyboard_interrupt_stops_a_long_run():
    # Ctrl-C 0.3 s into a run of seconds must end it well before its time, not only raise
    # once it is over.
    # A process started in the background by a shell without job control ignores SIGINT, and
    # `interrupt_main` then does nothing: Ctrl-C's handler, as in an interactive session.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    X, full = long_input(2.0, seed=2, n=32000)
    fired = []

    def interrupt():
        fired.append(time.perf_counter() - started)
        _thread.interrupt_main()

    timer = threading.Timer(0.3, interrupt)
    started = time.perf_counter()
    timer.start()
    try:
        knng.graph(X, 10, backend="cpu", algorithm="brute")
    except KeyboardInterrupt:
        pass
    else:
        # Says which went wrong: the signal came during the call and was lost, or the call
        # ended before it came.
        returned = time.perf_counter() - started
        timer.cancel()
        sent = f"sent at {fired[0]:.2f} s" if fired else "not sent yet"
        pytest.fail(f"not interrupted: the call returned after {returned:.2f} s of a {full:.2f} s run, the interrupt {sent}")
    finally:
        timer.cancel()
        signal.signal(signal.SIGINT, previous)
    elapsed = time.perf_counter() - started
    assert elapsed < 0.3 + 0.5 * (full - 0.3), f"interrupted after {elapsed:.2f} s of a {full:.2f} s run"
    # The engine runs again normally.
    indices, _ = knng.graph(X[:300], 3, backend="cpu", algorithm="brute")
    assert indices.shape == (300, 3)
