"""A diffusion map of a swiss roll from knng's exact kNN graph.

The roll is a rectangle rolled up in 3-D. A diffusion map (Coifman and Lafon; Dashti's thesis,
section 1.3) keeps the distances measured along the sheet: from the kNN graph it builds a
sparse Gaussian kernel, normalises away the density of the samples, and takes the leading
eigenvectors of the resulting Markov matrix as coordinates. The first follows the roll's
angle along the sheet, however far apart in 3-D its turns are: beside the height, it lays
the roll out flat.

    python diffusion_map.py [--n 5000] [--k 15] [--backend auto] [--out diffusion_map.png]
"""

import argparse
import time

import matplotlib

matplotlib.use("Agg")  # headless: draw to a file
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import scipy.sparse as sp  # noqa: E402
from scipy.sparse.linalg import eigsh  # noqa: E402
from sklearn.datasets import make_swiss_roll  # noqa: E402

import knng  # noqa: E402


def diffusion_map(indices, distances, n_coords=6, alpha=1.0, t=1):
    """Diffusion coordinates from each row's neighbours: (eigenvalues, coordinates)."""
    n, k = indices.shape
    d = distances.astype(np.float64)
    # Kernel width from the data: the median squared distance to the k-th neighbour.
    eps = np.median(d[:, -1]) ** 2
    W = sp.csr_matrix((np.exp(-(d.ravel() ** 2) / eps), indices.ravel(), np.arange(0, n * k + 1, k)), shape=(n, n))
    W = W.maximum(W.T)  # symmetric: an edge where either point lists the other
    W = W + sp.identity(n)  # each point's own kernel value, exp(0)
    # alpha = 1 divides out the sampling density, so that the geometry alone remains.
    q = np.asarray(W.sum(axis=1)).ravel() ** alpha
    W = sp.diags(1 / q) @ W @ sp.diags(1 / q)
    # The Markov matrix D^-1 W is similar to the symmetric D^-1/2 W D^-1/2: eigsh on that.
    s = 1 / np.sqrt(np.asarray(W.sum(axis=1)).ravel())
    values, vectors = eigsh(sp.diags(s) @ W @ sp.diags(s), k=n_coords + 1, which="LA")
    order = np.argsort(-values)
    values, vectors = values[order], vectors[:, order] * s[:, None]
    # The first eigenvector is constant (eigenvalue 1): it carries no coordinate.
    return values[1:], vectors[:, 1:] * values[1:] ** t


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=5000, help="points on the roll")
    parser.add_argument("--k", type=int, default=15, help="neighbours per point")
    parser.add_argument("--backend", default="auto", help="auto, gpu or cpu")
    parser.add_argument("--out", default="diffusion_map.png", help="the PNG to write")
    args = parser.parse_args()

    X, angle = make_swiss_roll(args.n, noise=0.05, random_state=0)
    height = X[:, 1]
    started = time.perf_counter()
    indices, distances = knng.graph(X, args.k, backend=args.backend)
    took = time.perf_counter() - started
    print(f"knng.graph: {args.n} points, k={args.k}: {took:.3f} s")

    values, coords = diffusion_map(indices, distances)
    print(f"leading eigenvalues of the diffusion operator: {np.round(values, 4)}")

    fig = plt.figure(figsize=(15, 5))
    ax = fig.add_subplot(1, 3, 1, projection="3d")
    ax.scatter(X[:, 0], X[:, 1], X[:, 2], c=angle, cmap="viridis", s=4)
    ax.set_title(f"Swiss roll: {args.n} points in 3-D")
    ax.set_xlabel("x")
    ax.set_ylabel("y (height)")
    ax.set_zlabel("z")
    ax.view_init(elev=12, azim=-70)

    # The roll is rolled up in x and z only: its height y is a coordinate of the flat sheet
    # already, and the first diffusion coordinate supplies the other one.
    ax = fig.add_subplot(1, 3, 2)
    points = ax.scatter(coords[:, 0], height, c=angle, cmap="viridis", s=4)
    ax.set_title("The sheet unrolled by the first diffusion coordinate")
    ax.set_xlabel("diffusion coordinate 1")
    ax.set_ylabel("height y")
    fig.colorbar(points, ax=ax, label="angle along the roll (radians)")

    ax = fig.add_subplot(1, 3, 3)
    ax.scatter(angle, coords[:, 0], c=angle, cmap="viridis", s=4)
    ax.set_title("Coordinate 1 against the roll's angle")
    ax.set_xlabel("angle along the roll (radians)")
    ax.set_ylabel("diffusion coordinate 1")

    fig.suptitle(f"Diffusion map from knng's exact {args.k}-NN graph ({took:.2f} s, backend={args.backend})")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
