from os import PathLike
from typing import Any, Literal, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp

from .neighbors import KNeighborsTransformer as KNeighborsTransformer
from .neighbors import NearestNeighbors as NearestNeighbors

__version__: str
METRICS: Tuple[str, ...]

Metric = Literal[
    "euclidean", "l2", "sqeuclidean", "cosine", "correlation", "pearson", "inner_product", "ip"
]
BackendName = Literal["auto", "gpu", "cpu"]
AlgorithmName = Literal["auto", "brute", "kdtree", "hybrid", "covertree"]
SelectName = Literal["auto", "quick", "sort"]
Size = Union[int, str]
Devices = Union[Sequence[Union[int, str]], int, str]
Answer = Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]
PathName = Union[str, PathLike[str]]

def graph(
    X: npt.ArrayLike,
    k: int,
    metric: Metric = "euclidean",
    backend: BackendName = "auto",
    include_self: bool = False,
    devices: Optional[Devices] = None,
    *,
    algorithm: AlgorithmName = "auto",
    adapter: Optional[Union[int, str]] = None,
    select: SelectName = "auto",
    no_subgroups: bool = False,
    gpu_memory: Optional[Size] = None,
    max_memory: Optional[Size] = None,
    block_rows: Optional[int] = None,
    checkpoint: Optional[PathName] = None,
    scratch: Optional[PathName] = None,
) -> Answer: ...
def search(
    corpus: npt.ArrayLike,
    queries: npt.ArrayLike,
    k: int,
    metric: Metric = "euclidean",
    backend: BackendName = "auto",
    devices: Optional[Devices] = None,
    *,
    algorithm: AlgorithmName = "auto",
    adapter: Optional[Union[int, str]] = None,
    select: SelectName = "auto",
    no_subgroups: bool = False,
    gpu_memory: Optional[Size] = None,
    max_memory: Optional[Size] = None,
) -> Answer: ...

class Index:
    @classmethod
    def build(
        cls,
        X: npt.ArrayLike,
        metric: Metric = "euclidean",
        *,
        algorithm: Literal["auto", "covertree", "brute"] = "auto",
        backend: BackendName = "auto",
        devices: Optional[Devices] = None,
        adapter: Optional[Union[int, str]] = None,
        select: SelectName = "auto",
        no_subgroups: bool = False,
        gpu_memory: Optional[Size] = None,
        max_memory: Optional[Size] = None,
    ) -> Index: ...
    @classmethod
    def load(cls, path: PathName) -> Index: ...
    def save(self, path: PathName) -> None: ...
    def search(
        self,
        queries: npt.ArrayLike,
        k: int,
        backend: BackendName = "auto",
        devices: Optional[Devices] = None,
        *,
        algorithm: AlgorithmName = "auto",
        adapter: Optional[Union[int, str]] = None,
        select: SelectName = "auto",
        no_subgroups: bool = False,
        gpu_memory: Optional[Size] = None,
        max_memory: Optional[Size] = None,
    ) -> Answer: ...
    @property
    def metric(self) -> str: ...
    @property
    def algorithm(self) -> Literal["covertree", "brute"]: ...
    @property
    def shape(self) -> Tuple[int, int]: ...
    @property
    def points(self) -> Optional[int]: ...
    def __len__(self) -> int: ...

def kneighbors_graph(
    X: npt.ArrayLike,
    k: int,
    mode: Literal["connectivity", "distance"] = "connectivity",
    metric: Metric = "euclidean",
    include_self: bool = False,
    **options: Any,
) -> sp.csr_matrix: ...
def info() -> dict[str, Any]: ...
