"""Saved indexes: built, written, read back and searched, against a float64 brute force
and knng.search; damaged files refused."""

import re
import threading

import numpy as np
import pytest

import knng
from reference import check_answer

TREE_METRICS = ["euclidean", "sqeuclidean", "cosine", "correlation"]


def manifold(rng, n=300, d=16):
    """A 2-D sheet curved through `d` columns: what a cover tree is for."""
    t = rng.uniform(-1, 1, size=(n, 2))
    a, b = rng.standard_normal((2, d)), rng.standard_normal((2, d))
    return (np.sin(t @ a) + 0.5 * np.cos(t @ b) + 2.0).astype(np.float32)


def saved_and_loaded(index, tmp_path):
    path = tmp_path / "data.knng"
    index.save(path)
    return knng.Index.load(path)


@pytest.mark.parametrize("metric", TREE_METRICS)
def test_cover_tree_index_answers_exactly(rng, tmp_path, metric):
    X = manifold(rng)
    queries = manifold(rng, 40)
    index = saved_and_loaded(knng.Index.build(X, metric, algorithm="covertree", backend="cpu"), tmp_path)
    assert index.algorithm == "covertree" and index.metric == metric
    indices, distances = index.search(queries, 8, backend="cpu")
    check_answer(indices, distances, X, queries, 8, metric)
    expected = knng.search(X, queries, 8, metric, backend="cpu", algorithm="brute")
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_allclose(distances, expected[1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("metric", knng.METRICS)
def test_brute_index_answers_as_search_does(backend, rng, tmp_path, metric):
    X = manifold(rng)
    queries = manifold(rng, 40)
    index = saved_and_loaded(knng.Index.build(X, metric, algorithm="brute", backend=backend), tmp_path)
    assert index.algorithm == "brute" and index.points is None
    indices, distances = index.search(queries, 8, backend=backend)
    check_answer(indices, distances, X, queries, 8, metric)
    expected = knng.search(X, queries, 8, metric, backend=backend)
    np.testing.assert_array_equal(indices, expected[0])
    np.testing.assert_array_equal(distances, expected[1])


def test_built_index_searches_before_it_is_saved(rng):
    X = manifold(rng)
    for algorithm in ("covertree", "brute", "auto"):
        index = knng.Index.build(X, "cosine", algorithm=algorithm, backend="cpu")
        assert index.algorithm in ("covertree", "brute")
        indices, distances = index.search(X[:30], 5, backend="cpu")
        check_answer(indices, distances, X, X[:30], 5, "cosine")


def test_cover_tree_index_searched_by_another_algorithm(rng, tmp_path):
    X = manifold(rng)
    index = saved_and_loaded(knng.Index.build(X, algorithm="covertree", backend="cpu"), tmp_path)
    by_tree = index.search(X[:50], 6, backend="cpu")
    by_rows = index.search(X[:50], 6, backend="cpu", algorithm="brute")
    check_answer(*by_rows, X, X[:50], 6, "euclidean")
    np.testing.assert_array_equal(by_tree[0], by_rows[0])
    np.testing.assert_allclose(by_tree[1], by_rows[1], rtol=1e-5, atol=1e-6)


def test_properties(rng, tmp_path):
    X = manifold(rng, 120, 7)
    X[100:110] = X[:10]  # equal rows are one point of the tree
    index = knng.Index.build(X.astype(np.float64), "correlation", algorithm="covertree", backend="cpu")
    loaded = saved_and_loaded(index, tmp_path)
    for i in (index, loaded):
        assert (i.metric, i.algorithm, i.shape, i.points, len(i)) == ("correlation", "covertree", (120, 7), 110, 120)
        assert repr(i) == "knng.Index(algorithm='covertree', metric='correlation', shape=(120, 7), points=110)"
    brute = knng.Index.build(X, "l2", algorithm="brute", backend="cpu")
    assert (brute.metric, brute.algorithm, brute.points) == ("euclidean", "brute", None)


def test_paths_may_be_strings(rng, tmp_path):
    X = manifold(rng, 50, 4)
    path = str(tmp_path / "data.knng")
    knng.Index.build(X, backend="cpu").save(path)
    assert knng.Index.load(path).shape == (50, 4)


def test_saving_over_a_loaded_file_leaves_the_loaded_index_whole(rng, tmp_path):
    # The file is replaced by a rename, never rewritten in place under its map.
    X, Y = manifold(rng, 200), manifold(rng, 100)
    path = tmp_path / "data.knng"
    knng.Index.build(X, algorithm="covertree", backend="cpu").save(path)
    loaded = knng.Index.load(path)
    knng.Index.build(Y, algorithm="brute", backend="cpu").save(path)
    indices, distances = loaded.search(X[:20], 4, backend="cpu")
    check_answer(indices, distances, X, X[:20], 4, "euclidean")
    assert knng.Index.load(path).shape == (100, 16)


def test_threads_search_one_index_at_once(rng):
    X = manifold(rng)
    index = knng.Index.build(X, algorithm="covertree", backend="cpu")
    expected = index.search(X, 5, backend="cpu")
    answers = [None] * 4

    def work(i):
        answers[i] = index.search(X, 5, backend="cpu")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got in answers:
        np.testing.assert_array_equal(got[0], expected[0])


@pytest.mark.parametrize("algorithm", ["covertree", "brute"])
def test_truncated_file_is_refused_by_name(rng, tmp_path, algorithm):
    path = tmp_path / "data.knng"
    knng.Index.build(manifold(rng, 100), algorithm=algorithm, backend="cpu").save(path)
    whole = path.read_bytes()
    for length in (len(whole) - 1, len(whole) // 2, 100, 4):
        path.write_bytes(whole[:length])
        with pytest.raises(OSError, match=f"^{re.escape(str(path))}: (truncated|not a knng index)"):
            knng.Index.load(path)


@pytest.mark.parametrize("algorithm", ["covertree", "brute"])
def test_flipped_byte_is_refused_by_name(rng, tmp_path, algorithm):
    path = tmp_path / "data.knng"
    knng.Index.build(manifold(rng, 100), algorithm=algorithm, backend="cpu").save(path)
    whole = path.read_bytes()
    for at, why in [
        (0, "not a knng index"),
        (60, "the header fails its checksum"),
        (len(whole) // 3, "its corpus array fails its checksum"),
        (len(whole) - 1, "array fails its checksum"),  # the tree's last, or the corpus
    ]:
        damaged = bytearray(whole)
        damaged[at] ^= 0x10
        path.write_bytes(bytes(damaged))
        with pytest.raises(OSError, match=f"^{re.escape(str(path))}: .*{why}"):
            knng.Index.load(path)


def test_files_that_are_no_index_are_refused(tmp_path):
    with pytest.raises(OSError, match="not found"):
        knng.Index.load(tmp_path / "missing.knng")
    other = tmp_path / "other.npy"
    np.save(other, np.ones((10, 3), dtype=np.float32))
    with pytest.raises(OSError, match=r"other\.npy: not a knng index"):
        knng.Index.load(other)


def test_index_algorithms_and_arguments_are_checked(rng):
    X = manifold(rng, 60, 5)
    with pytest.raises(ValueError, match="cover tree does not take inner_product"):
        knng.Index.build(X, "inner_product", algorithm="covertree", backend="cpu")
    for algorithm in ("kdtree", "hybrid"):
        with pytest.raises(ValueError, match="built by each search"):
            knng.Index.build(X, algorithm=algorithm, backend="cpu")
    with pytest.raises(ValueError, match="unknown metric"):
        knng.Index.build(X, "manhattan", backend="cpu")
    with pytest.raises(TypeError, match="Index.build"):
        knng.Index()
    index = knng.Index.build(X, algorithm="covertree", backend="cpu")
    with pytest.raises(ValueError, match="invalid argument k"):
        index.search(X, 61, backend="cpu")
    with pytest.raises(ValueError, match="invalid argument k"):
        index.search(X, 0, backend="cpu")
    with pytest.raises(TypeError, match="integer"):
        index.search(X, 2.0, backend="cpu")
    with pytest.raises(ValueError, match="dimension mismatch"):
        index.search(np.ones((2, 4)), 1, backend="cpu")
    with pytest.raises(ValueError, match=r"queries has a non-finite value NaN at row 1, column 2"):
        index.search(np.where(np.arange(10).reshape(2, 5) == 7, np.nan, 1.0), 1, backend="cpu")
