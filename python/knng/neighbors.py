"""scikit-learn estimators backed by knng: exact neighbours on the GPU or the CPU's threads."""

from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
from sklearn.utils.validation import check_is_fitted

from . import _api

try:
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # scikit-learn before 1.6 validates through a method

    def _validate_data(estimator, X, reset=True, **check_params):
        return estimator._validate_data(X, reset=reset, **check_params)


_METRIC_NAMES = {
    "euclidean": "euclidean", "l2": "euclidean", "sqeuclidean": "sqeuclidean", "cosine": "cosine",
    "correlation": "correlation", "pearson": "correlation", "inner_product": "inner_product",
    "ip": "inner_product",
}

_ENGINE_DOC = """
    backend : {"auto", "gpu", "cpu"}, default="auto"
        ``"auto"``: a hardware GPU when there is one, else the CPU's threads; ``"gpu"``
        forces a GPU adapter (software ones included); ``"cpu"`` the exact CPU backend.
    algorithm : {"auto", "brute", "kdtree", "hybrid", "covertree"}, default="auto"
        As in :func:`knng.graph`; the answer is the same whichever runs.
    devices : list of (int or str), default=None
        GPU adapters that share a graph's blocks (see :func:`knng.graph`).
    adapter : int or str, default=None
        The GPU adapter to use: its index in ``knng.info()["adapters"]`` or part of its name.
    gpu_memory : int or str, default=None
        GPU memory knng may allocate, in bytes or as a size such as ``"16GiB"``.
    max_memory : int or str, default=None
        Host memory a run may allocate beyond its inputs."""


class _KnngNeighbors(BaseEstimator):
    """What both estimators share: parameters, fit, kneighbors and kneighbors_graph."""

    def _options(self):
        return {
            "backend": self.backend, "algorithm": self.algorithm, "devices": self.devices,
            "adapter": self.adapter, "gpu_memory": self.gpu_memory, "max_memory": self.max_memory,
        }

    def _check_params(self):
        k = self.n_neighbors
        if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"n_neighbors must be an integer, not {type(k).__name__}")
        if k < 1:
            raise ValueError(f"Expected n_neighbors > 0. Got {k}")
        if not isinstance(self.metric, str) or self.metric.lower() not in _METRIC_NAMES:
            raise ValueError(f"metric {self.metric!r} is not supported; expected one of {', '.join(_METRIC_NAMES)}")

    def fit(self, X, y=None):
        """Keep the training data for later searches.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data. Kept as a C-contiguous float32 array (float32 input is not
            copied).
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self
            The fitted estimator.
        """
        self._check_params()
        X = _validate_data(self, X, dtype=[np.float32, np.float64], order="C")
        self._fit_X = _api._matrix(X, "X")
        self.n_samples_fit_ = X.shape[0]
        self.effective_metric_ = _METRIC_NAMES[self.metric.lower()]
        return self

    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The exact nearest training samples of each query.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), default=None
            The queries. None: each training sample's neighbours among the other training
            samples (the sample itself excluded), as in scikit-learn.
        n_neighbors : int, default=None
            Neighbours per query (default: the estimator's `n_neighbors`).
        return_distance : bool, default=True
            Whether to return the distances too.

        Returns
        -------
        neigh_dist : ndarray of float32, shape (n_queries, n_neighbors)
            Distances to the neighbours, nearest first (products, largest first, under
            ``"inner_product"``). Only with `return_distance`.
        neigh_ind : ndarray of int64, shape (n_queries, n_neighbors)
            Indices of the neighbours in the training data.
        """
        check_is_fitted(self)
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        if X is None:
            indices, distances = _api.graph(self._fit_X, k, self.effective_metric_, **self._options())
        else:
            X = _validate_data(self, X, dtype=[np.float32, np.float64], order="C", reset=False)
            indices, distances = _api.search(self._fit_X, X, k, self.effective_metric_, **self._options())
        return (distances, indices) if return_distance else indices

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """The k-neighbours graph of the queries as a sparse matrix.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features), default=None
            The queries. None: the training samples, each without itself.
        n_neighbors : int, default=None
            Neighbours per query (default: the estimator's `n_neighbors`).
        mode : {"connectivity", "distance"}, default="connectivity"
            Entries of 1.0, or the distances.

        Returns
        -------
        A : scipy.sparse.csr_matrix of shape (n_queries, n_samples_fit), float64
            ``A[i, j]`` is the weight of the edge from query i to training sample j.
        """
        if mode not in ("connectivity", "distance"):
            raise ValueError(f'Unsupported mode, must be one of "connectivity", or "distance" but got "{mode}" instead')
        distances, indices = self.kneighbors(X, n_neighbors, return_distance=True)
        return _api._csr(indices, distances, self.n_samples_fit_, mode)


class NearestNeighbors(_KnngNeighbors):
    """Exact nearest neighbours with scikit-learn's interface, computed by knng.

    A replacement for :class:`sklearn.neighbors.NearestNeighbors` whose searches run on a
    GPU (or the CPU's threads) and whose answers equal a float64 brute force.

    Parameters
    ----------
    n_neighbors : int, default=5
        Neighbours per query for :meth:`kneighbors` and :meth:`kneighbors_graph`.
    metric : str, default="euclidean"
        ``"euclidean"``, ``"sqeuclidean"``, ``"cosine"``, ``"correlation"`` or
        ``"inner_product"`` (largest product first).
    {engine}

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen during fit.
    n_samples_fit_ : int
        Number of training samples.
    effective_metric_ : str
        The metric's canonical name.

    Examples
    --------
    >>> import numpy as np
    >>> from knng import NearestNeighbors
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]])
    >>> nn = NearestNeighbors(n_neighbors=1, backend="cpu").fit(X)
    >>> distances, indices = nn.kneighbors()
    >>> indices.ravel().tolist()
    [1, 0, 1]
    """

    def __init__(self, n_neighbors=5, *, metric="euclidean", backend="auto", algorithm="auto",
                 devices=None, adapter=None, gpu_memory=None, max_memory=None):
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.backend = backend
        self.algorithm = algorithm
        self.devices = devices
        self.adapter = adapter
        self.gpu_memory = gpu_memory
        self.max_memory = max_memory


class KNeighborsTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _KnngNeighbors):
    """Transforms data into its sparse k-neighbours graph, computed exactly by knng.

    A replacement for :class:`sklearn.neighbors.KNeighborsTransformer`, for pipelines in
    front of estimators that take a precomputed sparse graph: ``Isomap(metric="precomputed")``,
    ``TSNE(metric="precomputed")``, ``SpectralEmbedding(affinity="precomputed_nearest_neighbors")``,
    ``DBSCAN(metric="precomputed")``.

    As in scikit-learn, with ``mode="distance"`` each row holds ``n_neighbors + 1`` entries:
    each sample of the data it was fitted on counts as its own neighbour, at distance 0.

    Parameters
    ----------
    mode : {"distance", "connectivity"}, default="distance"
        Entries of the distances, or of 1.0 (then ``n_neighbors`` entries a row).
    n_neighbors : int, default=5
        Neighbours per sample.
    metric : str, default="euclidean"
        ``"euclidean"``, ``"sqeuclidean"``, ``"cosine"``, ``"correlation"`` or
        ``"inner_product"``.
    {engine}

    Attributes
    ----------
    n_features_in_ : int
        Number of features seen during fit.
    n_samples_fit_ : int
        Number of training samples (the transformed data's number of columns).
    effective_metric_ : str
        The metric's canonical name.

    Examples
    --------
    >>> import numpy as np
    >>> from knng import KNeighborsTransformer
    >>> X = np.array([[0.0], [1.0], [3.0]])
    >>> KNeighborsTransformer(n_neighbors=1, backend="cpu").fit_transform(X).toarray().tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 2.0, 0.0]]
    """

    def __init__(self, *, mode="distance", n_neighbors=5, metric="euclidean", backend="auto",
                 algorithm="auto", devices=None, adapter=None, gpu_memory=None, max_memory=None):
        self.mode = mode
        self.n_neighbors = n_neighbors
        self.metric = metric
        self.backend = backend
        self.algorithm = algorithm
        self.devices = devices
        self.adapter = adapter
        self.gpu_memory = gpu_memory
        self.max_memory = max_memory

    def fit(self, X, y=None):
        """Keep the training data for later transforms.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        self
            The fitted transformer.
        """
        super().fit(X)
        self._n_features_out = self.n_samples_fit_
        return self

    def transform(self, X):
        """The k-neighbours graph of `X` among the training samples.

        Parameters
        ----------
        X : array-like of shape (n_queries, n_features)
            The samples to transform.

        Returns
        -------
        Xt : scipy.sparse.csr_matrix of shape (n_queries, n_samples_fit), float64
            Row i: the neighbours of sample i among the training samples (with
            ``mode="distance"``, ``n_neighbors + 1`` of them, a sample of the training data
            finding itself at distance 0).
        """
        check_is_fitted(self)
        add_one = self.mode == "distance"
        return self.kneighbors_graph(X, mode=self.mode, n_neighbors=self.n_neighbors + add_one)

    def fit_transform(self, X, y=None):
        """Fit to `X`, then transform `X`: its own k-neighbours graph.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Training data.
        y : Ignored
            Not used, present for API consistency by convention.

        Returns
        -------
        Xt : scipy.sparse.csr_matrix of shape (n_samples, n_samples), float64
            As :meth:`transform` of `X`.
        """
        return self.fit(X, y).transform(X)


for _cls in (NearestNeighbors, KNeighborsTransformer):
    _cls.__doc__ = _cls.__doc__.replace("    {engine}", _ENGINE_DOC.strip("\n"))
del _cls
