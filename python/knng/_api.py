"""The functions of the package: numpy arrays in, numpy arrays or a scipy sparse graph out."""

from __future__ import annotations

import os
import re

import numpy as np
import scipy.sparse as sp

from . import _knng

METRICS = ("euclidean", "sqeuclidean", "cosine", "correlation", "inner_product")

_UNITS = {"": 1 << 20, "b": 1, "kb": 10**3, "kib": 1 << 10, "mb": 10**6, "mib": 1 << 20,
          "gb": 10**9, "gib": 1 << 30, "tb": 10**12, "tib": 1 << 40}


def _size(value, name):
    """Bytes from an int (bytes) or a string such as "512MiB", "16GiB" or "2048" (MiB)."""
    if value is None:
        return None
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a number of bytes or a size such as '4GiB', not {value!r}")
    if isinstance(value, (int, np.integer)):
        if value <= 0:
            raise ValueError(f"{name} must be positive, got {value}")
        return int(value)
    if isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", value)
        if m and m.group(2).lower() in _UNITS:
            size = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
            if size > 0:
                return size
        raise ValueError(f"{name}: cannot read {value!r} as a size; write e.g. '512MiB' or '16GiB'")
    raise TypeError(f"{name} must be a number of bytes or a size such as '4GiB', not {type(value).__name__}")


def _settings(backend, algorithm, adapter, devices, select, no_subgroups, gpu_memory,
              max_memory, block_rows=None, checkpoint=None, scratch=None, include_self=False):
    """The settings dict the extension reads, checked for types."""
    for name, value in (("backend", backend), ("algorithm", algorithm), ("select", select)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, not {type(value).__name__}")
    if adapter is not None:
        adapter = str(adapter)
    if devices is None:
        devices = []
    elif isinstance(devices, (str, int, np.integer)):
        devices = [str(d) for d in str(devices).split(",") if d.strip()]
    else:
        devices = [str(d) for d in devices]
    if block_rows is not None:
        if isinstance(block_rows, bool) or not isinstance(block_rows, (int, np.integer)) or block_rows < 1:
            raise ValueError(f"block_rows must be a positive integer, got {block_rows!r}")
        block_rows = int(block_rows)
    return {
        "backend": backend,
        "algorithm": algorithm,
        "adapter": adapter,
        "devices": devices,
        "select": select,
        "no_subgroups": bool(no_subgroups),
        "gpu_memory": _size(gpu_memory, "gpu_memory"),
        "max_memory": _size(max_memory, "max_memory"),
        "block_rows": block_rows,
        "checkpoint": None if checkpoint is None else os.fspath(checkpoint),
        "scratch": None if scratch is None else os.fspath(scratch),
        "include_self": bool(include_self),
    }


def _matrix(x, name):
    """`x` as a C-contiguous float32 matrix: the array itself where it already is one (no
    copy), else one converted copy."""
    if sp.issparse(x):
        raise TypeError(f"{name} is a sparse matrix; knng needs a dense array (call .toarray())")
    array = np.asarray(x)
    if array.dtype == object or not (np.issubdtype(array.dtype, np.number) or array.dtype == np.bool_):
        raise TypeError(f"{name} must be an array of numbers, not of dtype {array.dtype}")
    if np.issubdtype(array.dtype, np.complexfloating):
        raise TypeError(f"{name} has complex values; knng needs real numbers")
    if array.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array (rows x columns), got {array.ndim}-D of shape {array.shape}"
            + ("; reshape a single vector with x.reshape(1, -1)" if array.ndim == 1 else "")
        )
    if array.dtype != np.float32 and np.issubdtype(array.dtype, np.floating):
        # Values beyond float32's range would become infinities: name the first one.
        with np.errstate(over="ignore", invalid="ignore"):
            converted = array.astype(np.float32, order="C")
        bad = ~np.isfinite(converted) & np.isfinite(array)
        if bad.any():
            row, col = np.argwhere(bad)[0]
            raise ValueError(
                f"{name} has a value {float(array[row, col])!r} at row {row}, column {col} beyond float32's range"
            )
        return converted
    return np.ascontiguousarray(array, dtype=np.float32)


def _k(k, name="k"):
    if isinstance(k, (bool, np.bool_)) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, not {type(k).__name__}")
    if k < 1:
        raise ValueError(f"invalid argument {name}: must be at least 1, got {k}")
    return int(k)


def _metric(metric):
    if not isinstance(metric, str):
        raise TypeError(f"metric must be a string, not {type(metric).__name__}")
    return metric


def graph(X, k, metric="euclidean", backend="auto", include_self=False, devices=None, *,
          algorithm="auto", adapter=None, select="auto", no_subgroups=False, gpu_memory=None,
          max_memory=None, block_rows=None, checkpoint=None, scratch=None):
    """The exact k-nearest-neighbour graph of the rows of `X`.

    For every row, the `k` nearest other rows (the row itself excluded unless
    `include_self`), sorted by (distance, index) ascending; under ``inner_product`` by
    product, largest first. The answer equals a float64 brute force on the float32 values
    of `X`, except that of two candidates closer than float32 rounding either may be
    returned.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The data, one vector a row. C-contiguous float32 is read in place; any other real
        dtype or layout is converted to it once.
    k : int
        Neighbours per row: 1 to n - 1 (1 to n with `include_self`).
    metric : str, default "euclidean"
        ``"euclidean"`` (``"l2"``), ``"sqeuclidean"``, ``"cosine"`` (1 - cosine
        similarity), ``"correlation"`` (``"pearson"``: 1 - Pearson r) or
        ``"inner_product"`` (``"ip"``: the product x.y, largest first).
    backend : {"auto", "gpu", "cpu"}, default "auto"
        ``"auto"``: a hardware GPU when there is one, else the CPU's threads. ``"gpu"``
        forces a GPU adapter (software ones such as Mesa's lavapipe included), an error when
        there is none; ``"cpu"`` the exact CPU backend.
    include_self : bool, default False
        Count each row as its own nearest neighbour (first in its list, at distance 0).
    devices : list of (int or str), optional
        GPU adapters (indices or parts of names, as in :func:`info`) that share the graph's
        blocks; repeats open an adapter more than once. Default: every GPU identical to the
        one ``"auto"`` chooses.
    algorithm : {"auto", "brute", "kdtree", "hybrid", "covertree"}, default "auto"
        ``"brute"`` computes every distance (any metric, any dimension); ``"kdtree"`` uses a
        kd-tree on the CPU (euclidean and sqeuclidean, 1 to 8 dimensions); ``"hybrid"`` a GPU
        grid beside the kd-tree (1 to 6 dimensions); ``"covertree"`` a cover tree (built on the
        GPU where the backend is one, queried on the CPU or, for graphs, the GPU; any dimension, every metric but the inner product; fast on data of low intrinsic
        dimension); ``"auto"`` the kd-tree for few dimensions, brute force otherwise. The
        answer is the same.
    adapter : int or str, optional
        The GPU adapter to use: its index in ``info()["adapters"]`` or part of its name.
    select : {"auto", "quick", "sort"}, default "auto"
        How each row's candidates are picked from a tile of distances (the answer is the
        same).
    no_subgroups : bool, default False
        Select without subgroup operations even where the adapter has them.
    gpu_memory : int or str, optional
        GPU memory knng may allocate, in bytes or as a size such as ``"16GiB"`` (default:
        7/8 of the memory budget a discrete GPU's Vulkan driver reports, else 4 GiB on
        discrete GPUs and 1 GiB on others).
    max_memory : int or str, optional
        Host memory the run may allocate beyond its inputs (default: what is available); a
        run estimated to need more raises MemoryError before it allocates anything.
    block_rows : int, optional
        Rows per block of a partitioned graph; setting it partitions the graph.
    checkpoint : path, optional
        A directory where a partitioned graph records finished blocks, so that the same call
        after a kill resumes where it stopped.
    scratch : path, optional
        Where candidate lists that do not fit `max_memory` are spilled (default: the
        system's temporary directory).

    Returns
    -------
    indices : ndarray of int64, shape (n, k)
        Row numbers of each row's neighbours, nearest first.
    distances : ndarray of float32, shape (n, k)
        Their distances (products for ``inner_product``).

    Raises
    ------
    ValueError
        Bad input: k out of range, an empty matrix, a NaN or infinite value (the message
        names its row and column), a zero row under cosine or a constant row under
        correlation, an unknown metric or backend.
    TypeError
        `X` is not a 2-D array of real numbers (sparse, complex, object).
    RuntimeError
        ``backend="gpu"`` without a usable adapter, or a GPU failure.
    MemoryError
        The run needs more memory than `max_memory` (or the machine) allows.
    KeyboardInterrupt
        Ctrl-C stopped the run.

    Examples
    --------
    >>> import numpy as np, knng
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [3.0, 0.0]], dtype=np.float32)
    >>> indices, distances = knng.graph(X, k=1, backend="cpu")
    >>> indices.ravel().tolist(), distances.ravel().tolist()
    ([1, 0, 1], [1.0, 1.0, 2.0])
    """
    X = _matrix(X, "X")
    settings = _settings(backend, algorithm, adapter, devices, select, no_subgroups, gpu_memory,
                         max_memory, block_rows, checkpoint, scratch, include_self)
    return _knng.graph(X, _k(k), _metric(metric), settings)


def search(corpus, queries, k, metric="euclidean", backend="auto", devices=None, *,
           algorithm="auto", adapter=None, select="auto", no_subgroups=False, gpu_memory=None,
           max_memory=None):
    """The exact `k` nearest rows of `corpus` for every row of `queries`.

    Each query's neighbours come sorted by (distance, index) ascending; under
    ``inner_product`` by product, largest first. A query equal to a corpus row finds that
    row at distance 0.

    Parameters
    ----------
    corpus : array_like of shape (n, d)
        The vectors searched. C-contiguous float32 is read in place; other dtypes and
        layouts are converted once.
    queries : array_like of shape (m, d)
        The query vectors, of the corpus's dimension.
    k : int
        Neighbours per query: 1 to n.
    metric, backend, devices, algorithm, adapter, select, no_subgroups, gpu_memory, max_memory
        As in :func:`graph`. A search runs on the first of `devices`.

    Returns
    -------
    indices : ndarray of int64, shape (m, k)
        Rows of `corpus`, nearest first.
    distances : ndarray of float32, shape (m, k)
        Their distances (products for ``inner_product``).

    Raises
    ------
    ValueError
        As in :func:`graph`, and when `corpus` and `queries` differ in dimension.
    TypeError, RuntimeError, MemoryError, KeyboardInterrupt
        As in :func:`graph`.

    Examples
    --------
    >>> import numpy as np, knng
    >>> corpus = np.array([[0.0], [1.0], [5.0]])
    >>> indices, distances = knng.search(corpus, [[4.0]], k=2, backend="cpu")
    >>> indices.tolist(), distances.tolist()
    ([[2, 1]], [[1.0, 3.0]])
    """
    corpus = _matrix(corpus, "corpus")
    queries = _matrix(queries, "queries")
    settings = _settings(backend, algorithm, adapter, devices, select, no_subgroups, gpu_memory, max_memory)
    return _knng.search(corpus, queries, _k(k), _metric(metric), settings)



class Index:
    """A corpus made ready to be searched again and again, and saved to a file.

    An index holds the corpus rows and, where it was built with one, a cover tree over
    them; its searches answer as :func:`search` of the same rows does, under the metric it
    was built for. Make one with :meth:`Index.build` or :meth:`Index.load`;
    :meth:`save` writes it to a file, which :meth:`load` maps rather than copies, after
    checking it: its format version, its size and a checksum of every array.

    Attributes
    ----------
    metric : str
        The metric the index was built for, e.g. ``"euclidean"``.
    algorithm : {"covertree", "brute"}
        What the index holds: a cover tree over the rows, or the rows alone.
    shape : tuple of int
        The corpus's (rows, columns).
    points : int or None
        Distinct rows of a cover-tree index (equal rows count once); None for the rows
        alone.

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np, knng
    >>> X = np.array([[0.0, 0.0], [1.0, 0.0], [2.0, 0.0], [4.0, 0.0], [8.0, 0.0]])
    >>> index = knng.Index.build(X, algorithm="covertree", backend="cpu")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     index.save(os.path.join(d, "points.knng"))
    ...     index = knng.Index.load(os.path.join(d, "points.knng"))
    >>> index
    knng.Index(algorithm='covertree', metric='euclidean', shape=(5, 2), points=5)
    >>> indices, distances = index.search([[3.5, 0.0]], k=2, backend="cpu")
    >>> indices.tolist(), distances.tolist()
    ([[3, 2]], [[0.5, 1.5]])
    """

    __slots__ = ("_index",)

    def __init__(self, *args, **kwargs):
        raise TypeError("build an index with knng.Index.build(X, ...) or read one with knng.Index.load(path)")

    @classmethod
    def _of(cls, native):
        index = object.__new__(cls)
        index._index = native
        return index

    @classmethod
    def build(cls, X, metric="euclidean", *, algorithm="auto", backend="auto", devices=None, adapter=None,
              select="auto", no_subgroups=False, gpu_memory=None, max_memory=None):
        """An index of the rows of `X` under `metric`.

        Parameters
        ----------
        X : array_like of shape (n, d)
            The corpus, as in :func:`graph`. The index keeps a copy of it.
        metric : str, default "euclidean"
            As in :func:`graph`; the index's searches use it.
        algorithm : {"auto", "covertree", "brute"}, default "auto"
            ``"covertree"``: a cover tree over the rows (every metric but
            ``inner_product``; fast on data of low intrinsic dimension); ``"brute"``: the
            rows alone, searched as :func:`search` searches them (any algorithm of
            :func:`graph` then, the kd-tree and the hybrid included, which each search
            builds afresh); ``"auto"``: a cover tree where the estimate of the data's
            intrinsic dimension says it beats brute force on the engine that `backend`
            and the other options open, else the rows alone.
        backend, devices, adapter, select, no_subgroups, gpu_memory, max_memory
            As in :func:`search`; they open the engine that builds the index, and that
            ``algorithm="auto"`` weighs a cover tree against brute force on.

        Returns
        -------
        Index

        Raises
        ------
        ValueError
            As in :func:`graph`; and for ``algorithm="covertree"`` under
            ``inner_product``, or ``"kdtree"`` or ``"hybrid"`` (an index does not hold
            them).
        TypeError, RuntimeError, MemoryError, KeyboardInterrupt
            As in :func:`graph`.
        """
        X = _matrix(X, "X")
        settings = _settings(backend, algorithm, adapter, devices, select, no_subgroups, gpu_memory, max_memory)
        return cls._of(_knng.build_index(X, _metric(metric), settings))

    @classmethod
    def load(cls, path):
        """The index saved at `path` (a str or path-like) by :meth:`save`.

        Raises
        ------
        OSError
            The file cannot be read, or is not an index file of this format version, is
            truncated or fails a checksum: the message names the file and says which.
        """
        return cls._of(_knng.Index.load(os.fspath(path)))

    def save(self, path):
        """Writes the index to `path` (a str or path-like), whole or not at all: a file
        that is replaced is either the old one or the new one, never part of it.

        Raises
        ------
        OSError
            The file cannot be written.
        """
        self._index.save(os.fspath(path))

    def search(self, queries, k, backend="auto", devices=None, *, algorithm="auto", adapter=None,
               select="auto", no_subgroups=False, gpu_memory=None, max_memory=None):
        """The exact `k` nearest corpus rows of every row of `queries`, under the index's
        metric: the answer :func:`search` gives for the index's rows.

        Parameters
        ----------
        queries : array_like of shape (m, d)
            The query vectors, of the corpus's dimension.
        k : int
            Neighbours per query: 1 to the number of corpus rows.
        backend, devices, adapter, select, no_subgroups, gpu_memory, max_memory
            As in :func:`search`.
        algorithm : {"auto", "covertree", "brute", "kdtree", "hybrid"}, default "auto"
            ``"auto"`` and ``"covertree"`` search a cover-tree index by its tree; any other
            algorithm, and an index of the rows alone, search the rows as
            :func:`search` does with that algorithm.

        Returns
        -------
        indices : ndarray of int64, shape (m, k)
        distances : ndarray of float32, shape (m, k)
            As in :func:`search`.

        Raises
        ------
        ValueError, TypeError, RuntimeError, MemoryError, KeyboardInterrupt
            As in :func:`search`.
        """
        queries = _matrix(queries, "queries")
        settings = _settings(backend, algorithm, adapter, devices, select, no_subgroups, gpu_memory, max_memory)
        return self._index.search(queries, _k(k), settings)

    @property
    def metric(self):
        return self._index.metric

    @property
    def algorithm(self):
        return self._index.algorithm

    @property
    def shape(self):
        return self._index.shape

    @property
    def points(self):
        return self._index.points

    def __len__(self):
        return self._index.shape[0]

    def __repr__(self):
        return (f"knng.Index(algorithm={self.algorithm!r}, metric={self.metric!r}, shape={self.shape!r}, "
                f"points={self.points!r})")


def kneighbors_graph(X, k, mode="connectivity", metric="euclidean", include_self=False, **options):
    """The k-nearest-neighbour graph of `X` as a scipy sparse matrix.

    Row i holds the `k` nearest other rows of row i (the row itself excluded), as
    :func:`sklearn.neighbors.kneighbors_graph` gives.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The data, as in :func:`graph`.
    k : int
        Neighbours per row: 1 to n - 1.
    mode : {"connectivity", "distance"}, default "connectivity"
        ``"connectivity"``: entries 1.0; ``"distance"``: the distances (products under
        ``inner_product``).
    metric : str, default "euclidean"
        As in :func:`graph`.
    include_self : bool, default False
        As in scikit-learn: each row counts as the first of its own `k` neighbours (an
        explicit 0 under ``mode="distance"``).
    **options
        Any other keyword argument of :func:`graph` (backend, devices, ...).

    Returns
    -------
    scipy.sparse.csr_matrix of shape (n, n), float64
        `k` stored entries a row, in the order of the neighbours (nearest first).

    Examples
    --------
    >>> import numpy as np, knng
    >>> G = knng.kneighbors_graph(np.array([[0.0], [1.0], [3.0]]), 1, backend="cpu")
    >>> G.toarray().tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]
    """
    if mode not in ("connectivity", "distance"):
        raise ValueError(f'mode must be "connectivity" or "distance", got {mode!r}')
    indices, distances = graph(X, k, metric, include_self=include_self, **options)
    return _csr(indices, distances, indices.shape[0], mode)


def _csr(indices, distances, n_columns, mode):
    """A CSR matrix with row i's entries at columns `indices[i]`, kept in that order."""
    rows, k = indices.shape
    values = np.ones(rows * k) if mode == "connectivity" else distances.astype(np.float64).ravel()
    indptr = np.arange(0, rows * k + 1, k, dtype=np.int64)
    return sp.csr_matrix((values, indices.ravel(), indptr), shape=(rows, n_columns))


def info():
    """What knng sees on this machine.

    Returns
    -------
    dict
        ``version``; ``adapters``: one dict per GPU adapter wgpu finds (``index``,
        ``name``, ``backend``, ``device_type``, ``driver``, ``subgroups``, ``features``,
        ``auto``: whether ``backend="auto"`` would use it, ``description``); ``auto``:
        what ``backend="auto"`` runs on (e.g. ``"cpu: 8 threads"``); ``hint``: why no
        hardware GPU was found, where the machine shows a reason, else None.

    Examples
    --------
    >>> import knng
    >>> sorted(knng.info())
    ['adapters', 'auto', 'hint', 'version']
    """
    settings = _settings("auto", "auto", None, None, "auto", False, None, None)
    adapters = _knng.adapters()
    auto = _knng.engine_description(settings)
    hint = None if any(a["auto"] for a in adapters) else _knng.missing_gpu_hint()
    return {"version": _knng.__version__, "adapters": adapters, "auto": auto, "hint": hint}

