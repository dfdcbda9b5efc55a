from typing import Any, Literal, Optional, Sequence, Tuple, Union, overload

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin

_Metric = Literal["euclidean", "l2", "sqeuclidean", "cosine", "correlation", "pearson", "inner_product", "ip"]
_Size = Union[int, str]

class _KnngNeighbors(BaseEstimator):
    n_neighbors: int
    metric: str
    backend: str
    algorithm: str
    devices: Optional[Sequence[Union[int, str]]]
    adapter: Optional[Union[int, str]]
    gpu_memory: Optional[_Size]
    max_memory: Optional[_Size]
    n_features_in_: int
    n_samples_fit_: int
    effective_metric_: str
    def fit(self, X: npt.ArrayLike, y: Any = None) -> "_KnngNeighbors": ...
    @overload
    def kneighbors(
        self, X: Optional[npt.ArrayLike] = None, n_neighbors: Optional[int] = None, return_distance: Literal[True] = True
    ) -> Tuple[npt.NDArray[np.float32], npt.NDArray[np.int64]]: ...
    @overload
    def kneighbors(
        self, X: Optional[npt.ArrayLike], n_neighbors: Optional[int], return_distance: Literal[False]
    ) -> npt.NDArray[np.int64]: ...
    @overload
    def kneighbors(
        self, X: Optional[npt.ArrayLike] = None, n_neighbors: Optional[int] = None, *, return_distance: Literal[False]
    ) -> npt.NDArray[np.int64]: ...
    def kneighbors_graph(
        self,
        X: Optional[npt.ArrayLike] = None,
        n_neighbors: Optional[int] = None,
        mode: Literal["connectivity", "distance"] = "connectivity",
    ) -> sp.csr_matrix: ...

class NearestNeighbors(_KnngNeighbors):
    def __init__(
        self,
        n_neighbors: int = 5,
        *,
        metric: _Metric = "euclidean",
        backend: Literal["auto", "gpu", "cpu"] = "auto",
        algorithm: Literal["auto", "brute", "kdtree", "hybrid", "covertree"] = "auto",
        devices: Optional[Sequence[Union[int, str]]] = None,
        adapter: Optional[Union[int, str]] = None,
        gpu_memory: Optional[_Size] = None,
        max_memory: Optional[_Size] = None,
    ) -> None: ...
    def fit(self, X: npt.ArrayLike, y: Any = None) -> "NearestNeighbors": ...

class KNeighborsTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _KnngNeighbors):
    mode: str
    def __init__(
        self,
        *,
        mode: Literal["distance", "connectivity"] = "distance",
        n_neighbors: int = 5,
        metric: _Metric = "euclidean",
        backend: Literal["auto", "gpu", "cpu"] = "auto",
        algorithm: Literal["auto", "brute", "kdtree", "hybrid", "covertree"] = "auto",
        devices: Optional[Sequence[Union[int, str]]] = None,
        adapter: Optional[Union[int, str]] = None,
        gpu_memory: Optional[_Size] = None,
        max_memory: Optional[_Size] = None,
    ) -> None: ...
    def fit(self, X: npt.ArrayLike, y: Any = None) -> "KNeighborsTransformer": ...
    def transform(self, X: npt.ArrayLike) -> sp.csr_matrix: ...
    def fit_transform(self, X: npt.ArrayLike, y: Any = None) -> sp.csr_matrix: ...
