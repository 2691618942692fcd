"""BM25 retrieval for search-qa: index build time and queries/s on a 100k-passage corpus,
for both backends (bm25s and tantivy) in the same run, with the tantivy/bm25s ratios.

    python -m benchmarks.search_env [--passages 100000] [--queries 2000]

The corpus is generated deterministically here (random words from a fixed vocabulary), so
the numbers compare across machines. The baseline is a plain-Python term-overlap scan over
the same passages (what an env without an index would do), timed on a few queries.
"""

from __future__ import annotations

import argparse
import random
import time

from benchmarks._common import result, write


def make_corpus(n: int, seed: int = 0) -> tuple[list[dict], list[str]]:
    rng = random.Random(seed)
    vocab = [f"w{i}" for i in range(30_000)]
    weights = [1 / (i + 1) for i in range(len(vocab))]  # Zipf-like
    docs = []
    for i in range(n):
        words = rng.choices(vocab, weights, k=40)
        docs.append({"id": str(i), "contents": f'"Title {i}"\n' + " ".join(words)})
    queries = [" ".join(rng.choices(vocab, weights, k=5)) for _ in range(2000)]
    return docs, queries


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--passages", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=2000)
    args = ap.parse_args()
    from skyhub.envs.search.index import BM25Index
    from skyhub.envs.search.index_tantivy import TantivyIndex

    docs, queries = make_corpus(args.passages)
    queries = queries[: args.queries]

    def measure(cls: type) -> tuple[float, float]:
        t0 = time.perf_counter()
        index = cls.build(docs)
        build_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        for q in queries:
            index.search(q, 3)
        return build_s, len(queries) / (time.perf_counter() - t0)

    build_s, qps = measure(BM25Index)
    t_build_s, t_qps = measure(TantivyIndex)

    sets = [set(d["contents"].split()) for d in docs]
    few = queries[:10]
    t0 = time.perf_counter()
    for q in few:
        qs = set(q.split())
        sorted(range(len(sets)), key=lambda i: len(qs & sets[i]), reverse=True)[:3]
    scan_qps = len(few) / (time.perf_counter() - t0)
    write("search_env", [
        result("bm25s index build, s", build_s, "none", None, "(informative)", ratio=None,
               unit="s", note=f"{args.passages} passages"),
        result("tantivy index build, s", t_build_s, "bm25s index build", build_s,
               "(informative)", unit="s",
               note=f"{args.passages} passages; ratio tantivy/bm25s (lower is faster)"),
        result("bm25s queries/s", qps, "python term-overlap scan", scan_qps, "(informative)",
               unit="q/s", note="one query at a time, top-3"),
        result("tantivy queries/s", t_qps, "bm25s queries/s", qps, "(informative)",
               unit="q/s",
               note="one query at a time, top-3; ratio tantivy/bm25s (higher is faster)"),
    ])

if __name__ == "__main__":
    main()
