"""Bad input raises ValueError or TypeError with a message that says what and where."""

import numpy as np
import pytest
import scipy.sparse as sp

import knng


def test_nan_names_row_and_column(backend):
    X = np.ones((20, 5), dtype=np.float32)
    X[:, 0] = np.arange(20)
    X[7, 3] = np.nan
    with pytest.raises(ValueError, match=r"non-finite value NaN at row 7, column 3"):
        knng.graph(X, 3, backend=backend)


def test_infinity_in_queries_names_row_and_column():
    corpus = np.random.default_rng(1).standard_normal((30, 4))
    queries = np.zeros((3, 4))
    queries[2, 1] = -np.inf
    with pytest.raises(ValueError, match=r"queries has a non-finite value -inf at row 2, column 1"):
        knng.search(corpus, queries, 2, backend="cpu")


def test_float64_beyond_float32_names_the_value():
    X = np.zeros((10, 3))
    X[4, 2] = 1e300
    with pytest.raises(ValueError, match=r"1e\+300 at row 4, column 2 beyond float32"):
        knng.graph(X, 2, backend="cpu")


@pytest.mark.parametrize("shape", [(10,), (2, 3, 4), ()])
def test_wrong_ndim(shape):
    with pytest.raises(ValueError, match="2-D array"):
        knng.graph(np.zeros(shape), 1, backend="cpu")


def test_k_zero_and_k_too_large(backend):
    X = np.random.default_rng(2).standard_normal((10, 3))
    with pytest.raises(ValueError, match="k"):
        knng.graph(X, 0, backend=backend)
    with pytest.raises(ValueError, match=r"invalid argument k"):
        knng.graph(X, 10, backend=backend)
    with pytest.raises(ValueError, match=r"invalid argument k"):
        knng.search(X, X, 11, backend=backend)
    with pytest.raises(TypeError, match="integer"):
        knng.graph(X, 2.5, backend=backend)


def test_dimension_mismatch(backend):
    with pytest.raises(ValueError, match="dimension mismatch: corpus has 4 columns but queries have 3"):
        knng.search(np.ones((10, 4)), np.ones((2, 3)), 1, backend=backend)


def test_empty_inputs():
    with pytest.raises(ValueError, match="empty"):
        knng.graph(np.zeros((0, 3)), 1, backend="cpu")
    with pytest.raises(ValueError, match="empty"):
        knng.graph(np.zeros((5, 0)), 1, backend="cpu")


def test_degenerate_rows_are_named():
    X = np.random.default_rng(3).standard_normal((10, 4))
    X[6] = 0
    with pytest.raises(ValueError, match=r"row 6 is a zero vector: the cosine distance is undefined"):
        knng.graph(X, 2, "cosine", backend="cpu")
    X[6] = 5
    with pytest.raises(ValueError, match=r"row 6 is constant"):
        knng.graph(X, 2, "correlation", backend="cpu")


def test_unknown_names():
    X = np.ones((5, 2))
    with pytest.raises(ValueError, match="unknown metric"):
        knng.graph(X, 1, "manhattan", backend="cpu")
    with pytest.raises(ValueError, match="unknown backend"):
        knng.graph(X, 1, backend="tpu")
    with pytest.raises(ValueError, match="unknown algorithm"):
        knng.graph(X, 1, backend="cpu", algorithm="annoy")
    with pytest.raises(ValueError, match="mode"):
        knng.kneighbors_graph(X, 1, mode="weights")


def test_wrong_types():
    with pytest.raises(TypeError, match="sparse"):
        knng.graph(sp.random(10, 4, density=0.5, format="csr"), 2)
    with pytest.raises(TypeError, match="complex"):
        knng.graph(np.ones((5, 2), dtype=complex), 1)
    with pytest.raises(TypeError, match="numbers"):
        knng.graph(np.array([["a", "b"], ["c", "d"]]), 1)
    with pytest.raises(TypeError, match="metric"):
        knng.graph(np.ones((5, 2)), 1, metric=3)


def test_sizes_are_read_or_refused():
    assert knng._api._size("512MiB", "gpu_memory") == 512 << 20
    assert knng._api._size("2GB", "gpu_memory") == 2 * 10**9
    assert knng._api._size(4096, "gpu_memory") == 4096
    with pytest.raises(ValueError, match="as a size"):
        knng._api._size("lots", "gpu_memory")
    with pytest.raises(MemoryError, match="host memory"):
        knng.graph(np.random.default_rng(4).standard_normal((2000, 8)), 50, backend="cpu", max_memory=1000)


def test_estimators_refuse_bad_parameters():
    X = np.random.default_rng(5).standard_normal((10, 3))
    with pytest.raises(ValueError, match="n_neighbors > 0"):
        knng.NearestNeighbors(n_neighbors=0).fit(X)
    with pytest.raises(ValueError, match="not supported"):
        knng.NearestNeighbors(metric="minkowski").fit(X)
    nn = knng.NearestNeighbors(n_neighbors=3, backend="cpu").fit(X)
    with pytest.raises(ValueError, match="invalid argument k"):
        nn.kneighbors(n_neighbors=10)
    with pytest.raises(ValueError, match="features"):
        nn.kneighbors(np.ones((2, 4)))

