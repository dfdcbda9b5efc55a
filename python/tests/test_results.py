"""knng's answers against a float64 numpy brute force, on every metric, dtype and layout."""

import numpy as np
import pytest
import scipy.sparse as sp

import knng
from reference import check_answer

METRICS = ["euclidean", "sqeuclidean", "cosine", "correlation", "inner_product"]


def data(rng, n, d):
    return rng.standard_normal((n, d)).astype(np.float32)


@pytest.mark.parametrize("metric", METRICS)
def test_graph_every_metric(backend, rng, metric):
    X = data(rng, 300, 24)
    indices, distances = knng.graph(X, 7, metric, backend=backend)
    check_answer(indices, distances, X, X, 7, metric, exclude_self=True)


@pytest.mark.parametrize("metric", METRICS)
def test_search_every_metric(backend, rng, metric):
    corpus, queries = data(rng, 250, 16), data(rng, 60, 16)
    indices, distances = knng.search(corpus, queries, 9, metric, backend=backend)
    check_answer(indices, distances, corpus, queries, 9, metric)


def test_low_dimensions_take_the_kd_tree_and_agree(rng):
    # Three dimensions under euclidean distances: the planner's kd-tree on the CPU.
    X = data(rng, 2000, 3)
    indices, distances = knng.graph(X, 10, backend="cpu")
    check_answer(indices, distances, X, X, 10, "euclidean", exclude_self=True)


def test_include_self_puts_each_row_first(backend, rng):
    X = data(rng, 120, 8)
    indices, distances = knng.graph(X, 4, include_self=True, backend=backend, algorithm="brute")
    assert (indices[:, 0] == np.arange(120)).all()
    assert (distances[:, 0] == 0).all()
    check_answer(indices[:, 1:], distances[:, 1:], X, X, 3, "euclidean", exclude_self=True)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, np.int32, np.int64, np.uint8, np.bool_])
def test_dtypes_are_converted(backend, rng, dtype):
    raw = rng.standard_normal((150, 12)) * (40 if np.issubdtype(dtype, np.integer) else 1)
    if dtype == np.uint8:
        raw = np.abs(raw)
    X = raw.astype(dtype)
    indices, distances = knng.graph(X, 5, backend=backend, algorithm="brute")
    check_answer(indices, distances, X.astype(np.float32), X.astype(np.float32), 5, "euclidean", exclude_self=True)


@pytest.mark.parametrize("layout", ["C", "F", "rows", "columns", "transposed", "list"])
def test_layouts_are_converted(backend, rng, layout):
    base = data(rng, 400, 30)
    X = {
        "C": base[:200, :15].copy(),
        "F": np.asfortranarray(base[:200, :15]),
        "rows": base[::2, :15],
        "columns": base[:200, ::2],
        "transposed": base[:15, :200].T,
        "list": base[:200, :15].tolist(),
    }[layout]
    dense = np.array(X, dtype=np.float32)
    indices, distances = knng.graph(X, 6, "cosine", backend=backend)
    check_answer(indices, distances, dense, dense, 6, "cosine", exclude_self=True)
    q_idx, q_dist = knng.search(X, X[:20], 6, "cosine", backend=backend)
    check_answer(q_idx, q_dist, dense, dense[:20], 6, "cosine")


def test_c_contiguous_float32_is_read_in_place(rng):
    X = data(rng, 50, 4)
    assert knng._api._matrix(X, "X") is X
    X.setflags(write=False)
    indices, _ = knng.graph(X, 3, backend="cpu")
    assert indices.shape == (50, 3)


def test_large_k_and_whole_corpus(backend, rng):
    X = data(rng, 90, 10)
    indices, distances = knng.graph(X, 89, backend=backend, algorithm="brute")
    check_answer(indices, distances, X, X, 89, "euclidean", exclude_self=True)
    q_idx, q_dist = knng.search(X, X[:5], 90, backend=backend, algorithm="brute")
    check_answer(q_idx, q_dist, X, X[:5], 90, "euclidean")


def test_data_with_a_large_offset_stays_exact(backend, rng):
    # Raw counts around 1000: the plain expanded form in float32 loses neighbours here.
    X = (1000 + rng.integers(0, 16, size=(400, 16))).astype(np.float32)
    X += rng.standard_normal(X.shape).astype(np.float32) * 0.01
    indices, distances = knng.graph(X, 5, backend=backend)
    check_answer(indices, distances, X, X, 5, "euclidean", exclude_self=True)


@pytest.mark.parametrize("mode", ["connectivity", "distance"])
def test_csr_graph_equals_scikit_learn(backend, rng, mode):
    from sklearn.neighbors import kneighbors_graph as sk_graph

    X = rng.standard_normal((220, 10))  # continuous values: no ties
    ours = knng.kneighbors_graph(X, 6, mode=mode, backend=backend)
    theirs = sk_graph(X, 6, mode=mode, include_self=False)
    assert isinstance(ours, sp.csr_matrix) and ours.shape == (220, 220)
    assert ours.nnz == 220 * 6 and ours.dtype == np.float64
    assert (ours.indices.reshape(220, 6) != np.arange(220)[:, None]).all()
    diff = ours - theirs
    assert (ours != 0).toarray().tolist() == (theirs != 0).toarray().tolist()
    assert abs(diff).max() < 1e-5


def test_csr_graph_with_self_equals_scikit_learn(backend, rng):
    from sklearn.neighbors import kneighbors_graph as sk_graph

    X = rng.standard_normal((150, 6))
    ours = knng.kneighbors_graph(X, 5, mode="distance", include_self=True, backend=backend)
    theirs = sk_graph(X, 5, mode="distance", include_self=True)
    assert ours.nnz == 150 * 5 and (ours.indices.reshape(150, 5)[:, 0] == np.arange(150)).all()
    assert (ours.toarray() != 0).tolist() == (theirs.toarray() != 0).tolist()
    assert abs(ours - theirs).max() < 1e-5


def test_gpu_backend_runs_on_a_gpu():
    # Fails, rather than skips, where no adapter exists: CI has lavapipe.
    description = knng._knng.engine_description(knng._api._settings("gpu", "auto", None, None, "auto", False, None, None))
    assert description.startswith("gpu:"), description
    assert knng.info()["adapters"], "no GPU adapter"


def test_info_lists_the_adapters():
    info = knng.info()
    assert info["version"] == knng.__version__
    assert info["auto"].startswith(("cpu:", "gpu:"))
    for a in info["adapters"]:
        assert {"index", "name", "backend", "device_type", "subgroups", "auto"} <= set(a)
