"""The Rust extension module; the package's functions wrap it."""

from typing import Any, Optional, Tuple

import numpy as np
import numpy.typing as npt

__version__: str

def graph(
    data: npt.NDArray[np.float32], k: int, metric_name: str, settings: dict[str, Any]
) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]: ...
def search(
    corpus: npt.NDArray[np.float32],
    queries: npt.NDArray[np.float32],
    k: int,
    metric_name: str,
    settings: dict[str, Any],
) -> Tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]: ...
def engine_description(settings: dict[str, Any]) -> str: ...
def adapters() -> list[dict[str, Any]]: ...
def missing_gpu_hint() -> Optional[str]: ...
