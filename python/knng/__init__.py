"""Exact k-nearest neighbours and k-NN graphs on any GPU, with an exact CPU backend.

Functions take numpy arrays (one vector a row) and return numpy arrays or a scipy sparse
graph:

- :func:`graph` -- every row's k nearest other rows: ``(indices, distances)``;
- :func:`search` -- each query's k nearest corpus rows: ``(indices, distances)``;
- :func:`kneighbors_graph` -- the graph as a ``scipy.sparse.csr_matrix``;
- :func:`info` -- the GPU adapters knng sees and what ``backend="auto"`` uses.

Saved indexes: :class:`Index` -- ``Index.build(X)`` (the rows, and a cover tree over them
or not), ``index.save(path)``, ``Index.load(path)``, ``index.search(queries, k)``.

scikit-learn estimators: :class:`NearestNeighbors` and :class:`KNeighborsTransformer`,
drop-in replacements for scikit-learn's, for pipelines in front of Isomap, TSNE
(``metric="precomputed"``), SpectralEmbedding or DBSCAN.

Answers are exact: they equal a float64 brute force on the float32 values of the input
(of two candidates closer than float32 rounding, either may be returned).
"""

from ._api import METRICS, Index, graph, info, kneighbors_graph, search
from ._knng import __version__

__all__ = [
    "METRICS",
    "Index",
    "KNeighborsTransformer",
    "NearestNeighbors",
    "__version__",
    "graph",
    "info",
    "kneighbors_graph",
    "search",
]


def __getattr__(name):
    # The estimators import scikit-learn (a second or so): only when first asked for.
    if name in ("NearestNeighbors", "KNeighborsTransformer"):
        from . import neighbors

        return getattr(neighbors, name)
    raise AttributeError(f"module 'knng' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))
