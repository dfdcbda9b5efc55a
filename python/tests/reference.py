"""A float64 brute force and a tie-aware comparison, independent of knng."""

import numpy as np


def keys(corpus, queries, metric):
    """The (m, n) float64 matrix of metric values between every query and corpus row."""
    c = np.asarray(corpus, dtype=np.float32).astype(np.float64)
    q = np.asarray(queries, dtype=np.float32).astype(np.float64)
    if metric in ("euclidean", "sqeuclidean"):
        d2 = ((q[:, None, :] - c[None, :, :]) ** 2).sum(-1)
        return np.sqrt(d2) if metric == "euclidean" else d2
    if metric == "inner_product":
        return q @ c.T
    if metric == "correlation":
        c = c - c.mean(1, keepdims=True)
        q = q - q.mean(1, keepdims=True)
    if metric in ("cosine", "correlation"):
        return 1.0 - (q @ c.T) / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(c, axis=1))
    raise ValueError(metric)


def check_answer(indices, distances, corpus, queries, k, metric, exclude_self=False):
    """Asserts that (indices, distances) are the k best of a float64 brute force: every
    distance matches the reference's sorted distances, every index's true distance is the
    one reported, and the index is the reference's wherever that distance is not tied."""
    full = keys(corpus, queries, metric)
    m, n = full.shape
    assert indices.shape == (m, k) and distances.shape == (m, k)
    assert indices.dtype == np.int64 and distances.dtype == np.float32
    largest = metric == "inner_product"
    if exclude_self:
        np.fill_diagonal(full, -np.inf if largest else np.inf)
    scale = max(1.0, float(np.abs(full[np.isfinite(full)]).max()))
    tol = 1e-5 * scale
    for i in range(m):
        row = full[i]
        order = np.lexsort((np.arange(n), -row if largest else row))
        best = row[order[:k]]
        got = indices[i]
        assert len(set(got.tolist())) == k, f"row {i}: repeated indices {got}"
        if exclude_self:
            assert i not in got, f"row {i} lists itself"
        np.testing.assert_allclose(distances[i], best, rtol=1e-5, atol=tol, err_msg=f"row {i} distances")
        np.testing.assert_allclose(row[got], distances[i], rtol=1e-5, atol=tol, err_msg=f"row {i}: index vs distance")
        for j in range(k):
            tied = np.abs(row - best[j]) <= tol
            if tied.sum() == 1:
                assert got[j] == order[j], f"row {i}, neighbour {j}: {got[j]} instead of {order[j]}"
