"""A t-SNE embedding of scikit-learn's handwritten digits from knng's exact kNN graph.

t-SNE needs each point's 3 x perplexity nearest neighbours. knng's KNeighborsTransformer
computes them exactly and hands TSNE(metric="precomputed") the sparse distance graph, in
place of the neighbour search TSNE would run itself. The script times both searches.

    python tsne_digits.py [--n 1797] [--perplexity 30] [--backend auto] [--out tsne_digits.png]
"""

import argparse
import time

import matplotlib

matplotlib.use("Agg")  # headless: draw to a file
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from sklearn.datasets import load_digits  # noqa: E402
from sklearn.manifold import TSNE  # noqa: E402
from sklearn.neighbors import KNeighborsTransformer as SkKNeighborsTransformer  # noqa: E402

import knng  # noqa: E402


def best_of(runs, f):
    """The shortest time of `runs` calls of f, and f's result."""
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        result = f()
        times.append(time.perf_counter() - started)
    return min(times), result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1797, help="digits to embed (at most 1797)")
    parser.add_argument("--perplexity", type=float, default=30.0)
    parser.add_argument("--max-iter", type=int, default=1000, help="t-SNE iterations (at least 250)")
    parser.add_argument("--backend", default="auto", help="auto, gpu or cpu")
    parser.add_argument("--out", default="tsne_digits.png", help="the PNG to write")
    args = parser.parse_args()

    digits = load_digits()
    X, labels = digits.data[: args.n], digits.target[: args.n]
    # What TSNE itself asks for: 3 x perplexity neighbours, plus the point itself.
    k = min(len(X) - 1, int(3 * args.perplexity + 1))

    ours = knng.KNeighborsTransformer(n_neighbors=k, mode="distance", backend=args.backend)
    theirs = SkKNeighborsTransformer(n_neighbors=k, mode="distance")
    knng_time, graph = best_of(3, lambda: ours.fit_transform(X))
    sklearn_time, reference = best_of(3, lambda: theirs.fit_transform(X))
    same = np.allclose(np.sort(graph.data), np.sort(reference.data), rtol=1e-5, atol=1e-4)
    print(f"{len(X)} digits, {k} neighbours each: knng {knng_time * 1e3:.1f} ms, "
          f"scikit-learn {sklearn_time * 1e3:.1f} ms (same distances: {same})")

    tsne = TSNE(metric="precomputed", init="random", perplexity=args.perplexity, max_iter=args.max_iter,
                random_state=0)
    started = time.perf_counter()
    embedding = tsne.fit_transform(graph)
    print(f"t-SNE on knng's graph: {time.perf_counter() - started:.1f} s")

    fig, ax = plt.subplots(figsize=(9, 8))
    colours = plt.get_cmap("tab10")
    for digit in range(10):
        mine = labels == digit
        ax.scatter(embedding[mine, 0], embedding[mine, 1], s=8, color=colours(digit), label=str(digit), alpha=0.8)
        if mine.any():
            x, y = np.median(embedding[mine], axis=0)
            ax.text(x, y, str(digit), fontsize=18, weight="bold", ha="center", va="center",
                    bbox={"boxstyle": "circle", "facecolor": "white", "edgecolor": colours(digit), "alpha": 0.85})
    ax.legend(title="digit", markerscale=2.5, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    ax.set_title(
        f"t-SNE of {len(X)} handwritten digits (8x8 pixels) from knng's exact {k}-NN graph\n"
        f"neighbour search: knng {knng_time * 1e3:.0f} ms vs scikit-learn {sklearn_time * 1e3:.0f} ms"
    )
    ax.set_xlabel("t-SNE 1")
    ax.set_ylabel("t-SNE 2")
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
