"""The scikit-learn estimators: check_estimator, agreement with scikit-learn's own, pipelines."""

import numpy as np
import pytest
from sklearn.utils.estimator_checks import check_estimator

import knng
from reference import check_answer


@pytest.mark.parametrize(
    "estimator",
    [knng.NearestNeighbors(backend="cpu"), knng.KNeighborsTransformer(backend="cpu"),
     knng.KNeighborsTransformer(mode="connectivity", backend="cpu")],
    ids=["NearestNeighbors", "KNeighborsTransformer-distance", "KNeighborsTransformer-connectivity"],
)
def test_check_estimator(estimator):
    check_estimator(estimator)


def test_check_estimator_on_the_gpu():
    check_estimator(knng.KNeighborsTransformer(backend="gpu"))


def test_nearest_neighbors_matches_scikit_learn(backend, rng):
    from sklearn.neighbors import NearestNeighbors as SkNN

    X, Q = rng.standard_normal((200, 12)), rng.standard_normal((40, 12))
    ours = knng.NearestNeighbors(n_neighbors=6, backend=backend).fit(X)
    theirs = SkNN(n_neighbors=6).fit(X)
    for query in (None, Q):
        d_ours, i_ours = ours.kneighbors(query)
        d_theirs, i_theirs = theirs.kneighbors(query)
        assert (i_ours == i_theirs).all()
        np.testing.assert_allclose(d_ours, d_theirs, rtol=1e-5, atol=1e-5)
    # X=None: each sample's neighbours without itself, as scikit-learn means it.
    check_answer(*ours.kneighbors(return_distance=True)[::-1], X, X, 6, "euclidean", exclude_self=True)
    assert ours.kneighbors(Q, 2, return_distance=False).shape == (40, 2)
    G = ours.kneighbors_graph(mode="distance")
    assert abs(G - theirs.kneighbors_graph(mode="distance")).max() < 1e-5


@pytest.mark.parametrize("mode", ["distance", "connectivity"])
def test_transformer_matches_scikit_learn(backend, rng, mode):
    from sklearn.neighbors import KNeighborsTransformer as SkT

    X, Q = rng.standard_normal((150, 8)), rng.standard_normal((30, 8))
    ours = knng.KNeighborsTransformer(n_neighbors=4, mode=mode, backend=backend)
    theirs = SkT(n_neighbors=4, mode=mode)
    a, b = ours.fit_transform(X), theirs.fit_transform(X)
    assert a.shape == b.shape and a.nnz == b.nnz == 150 * (5 if mode == "distance" else 4)
    assert abs(a - b).max() < 1e-5
    assert abs(ours.transform(Q) - theirs.transform(Q)).max() < 1e-5
    assert list(ours.get_feature_names_out())[:2] == ["kneighborstransformer0", "kneighborstransformer1"]


def blobs(n=240, seed=0):
    from sklearn.datasets import make_blobs

    X, labels = make_blobs(n, n_features=5, centers=3, cluster_std=0.6, random_state=seed)
    return X, labels


def test_pipelines_before_isomap_tsne_spectral_dbscan(backend):
    from sklearn.cluster import DBSCAN
    from sklearn.manifold import TSNE, Isomap, SpectralEmbedding
    from sklearn.neighbors import KNeighborsTransformer as SkT
    from sklearn.pipeline import make_pipeline

    X, labels = blobs()
    ours = lambda: knng.KNeighborsTransformer(n_neighbors=10, backend=backend)  # noqa: E731
    theirs = lambda: SkT(n_neighbors=10)  # noqa: E731

    # Isomap needs a connected graph: a swiss roll, not separate blobs.
    from sklearn.datasets import make_swiss_roll

    roll, _ = make_swiss_roll(300, noise=0.05, random_state=0)
    iso = make_pipeline(ours(), Isomap(n_neighbors=10, metric="precomputed")).fit(roll)
    iso_ref = make_pipeline(theirs(), Isomap(n_neighbors=10, metric="precomputed")).fit(roll)
    np.testing.assert_allclose(iso[-1].dist_matrix_, iso_ref[-1].dist_matrix_, rtol=1e-5, atol=1e-4)

    db = make_pipeline(ours(), DBSCAN(eps=1.0, metric="precomputed")).fit(X)
    db_ref = make_pipeline(theirs(), DBSCAN(eps=1.0, metric="precomputed")).fit(X)
    assert (db[-1].labels_ == db_ref[-1].labels_).all()

    emb = make_pipeline(ours(), TSNE(metric="precomputed", init="random", perplexity=3, max_iter=250, random_state=0)).fit_transform(X)
    assert emb.shape == (240, 2) and np.isfinite(emb).all()

    spec = make_pipeline(
        knng.KNeighborsTransformer(n_neighbors=10, mode="connectivity", backend=backend),
        SpectralEmbedding(affinity="precomputed_nearest_neighbors", n_neighbors=10, random_state=0),
    ).fit_transform(X)
    assert spec.shape == (240, 2) and np.isfinite(spec).all()
    # Three well separated blobs: each spreads along its own part of the embedding.
    centres = np.array([spec[labels == c].mean(0) for c in range(3)])
    assert np.linalg.norm(centres[:, None] - centres[None], axis=-1)[np.triu_indices(3, 1)].min() > 1e-3


def test_estimators_pickle(rng):
    import pickle

    X = rng.standard_normal((50, 3))
    nn = knng.NearestNeighbors(n_neighbors=3, backend="cpu").fit(X)
    again = pickle.loads(pickle.dumps(nn))
    assert (again.kneighbors(X[:5])[1] == nn.kneighbors(X[:5])[1]).all()
