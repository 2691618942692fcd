"""Corpus reading and the BM25 index (bm25s): build in memory, save to disk, load memory-mapped.

A corpus is JSONL with `{"id", "contents"}` per line, as pyserini and Search-R1 write it; the
first line of `contents` is the title (quoted in Search-R1's wiki dump: `"Title"\\ntext`).
bm25s is imported only when an index is built or loaded, so registering the family is light.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, MissingDependency, UsageError

DATA_DIR = Path(__file__).parent / "data"
BUNDLED_CORPUS = DATA_DIR / "corpus.jsonl"
BACKENDS = ("bm25s", "tantivy")


def iter_corpus(path: str | Path) -> Iterator[dict[str, Any]]:
    """The rows of a corpus JSONL file, each with `id` and `contents` (`text`/`title` rows, as
    some dumps have, are turned into `contents`)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise DataNotFound(f"corpus not found: {path} (expected JSONL with {{\"id\", "
                           f"\"contents\"}} per line). Pass corpus=PATH.jsonl, or omit it for "
                           f"the bundled corpus")
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise DataNotFound(f"{path}:{n}: not JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise DataNotFound(f"{path}:{n}: a row must be a JSON object with \"id\" and "
                                   f"\"contents\", got {type(row).__name__}")
            if "contents" not in row and "text" not in row:
                raise DataNotFound(
                    f"{path}:{n}: no \"contents\" (nor \"text\") in this row; its keys are "
                    f"{sorted(row)}. Each line needs {{\"id\", \"contents\"}} (pyserini/Search-R1"
                    f" format; {{\"title\", \"text\"}} rows are accepted too)")
            if "contents" not in row:
                title, text = row.get("title"), row.get("text", "")
                row["contents"] = f'"{title}"\n{text}' if title else str(text)
            row.setdefault("id", str(n - 1))
            yield {"id": str(row["id"]), "contents": str(row["contents"])}


def _tokenize(texts: list[str], show_progress: bool = False) -> Any:
    import bm25s

    return bm25s.tokenize(texts, stopwords="en", return_ids=False, show_progress=show_progress)


class BM25Index:
    """Top-k passages for a query. `search` returns `{"id", "contents", "score"}` dicts."""

    def __init__(self, model: Any, docs: Any) -> None:
        self.model, self.docs = model, docs
        self._lock = threading.Lock()  # bm25s' retrieve is not documented as thread-safe

    @classmethod
    def build(cls, docs: list[dict[str, Any]], *, show_progress: bool = False) -> BM25Index:
        try:
            import bm25s
        except ImportError as e:
            raise MissingDependency("the search envs need bm25s: pip install "
                                    "'skyhub[search]'") from e
        if not docs:
            raise DataNotFound("the corpus is empty: nothing to index")
        model = bm25s.BM25()
        tokens = _tokenize([d["contents"] for d in docs], show_progress)
        model.index(tokens, show_progress=show_progress)
        return cls(model, docs)

    def save(self, out_dir: str | Path, *, show_progress: bool = False) -> Path:
        """Write the index and its corpus (`corpus.jsonl`) to `out_dir`."""
        out = Path(out_dir).expanduser()
        out.mkdir(parents=True, exist_ok=True)
        self.model.save(str(out), corpus=list(self.docs), show_progress=show_progress)
        return out

    @classmethod
    def load(cls, index_dir: str | Path, *, mmap: bool = True,
             corpus: str | Path | None = None) -> BM25Index:
        """An index written by `save` (or `skyhub search index build`), memory-mapped by default so
        many processes share one copy. `corpus` overrides the saved one (same order)."""
        import bm25s

        d = Path(index_dir).expanduser()
        if not (d / "params.index.json").is_file():
            raise DataNotFound(f"no bm25s index in {d} (looked for params.index.json). Build one "
                               f"with 'skyhub search index build CORPUS.jsonl {d}'")
        model = bm25s.BM25.load(str(d), mmap=mmap, load_corpus=False, show_progress=False)
        if corpus is not None:
            docs: Any = list(iter_corpus(corpus))
        elif (d / "corpus.jsonl").is_file():
            docs = list(iter_corpus(d / "corpus.jsonl"))
        else:
            raise DataNotFound(f"{d} has no corpus.jsonl: pass corpus=PATH.jsonl")
        return cls(model, docs)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        tokens = _tokenize([query])
        if not tokens or not tokens[0]:
            return []
        k = min(k, len(self.docs))
        with self._lock:
            try:
                ids, scores = self.model.retrieve(tokens, k=k, show_progress=False, n_threads=0)
            except (ValueError, KeyError):  # no query token is in the vocabulary
                return []
        out = []
        for i, s in zip(ids[0], scores[0], strict=True):
            if float(s) <= 0:
                continue
            doc = self.docs[int(i)]
            out.append({"id": doc["id"], "contents": doc["contents"], "score": float(s)})
        return out


def index_class(backend: str) -> Any:
    """The index class of a backend name (`BM25Index` or `TantivyIndex`); ValueError
    (`UsageError`) naming the choices for an unknown one."""
    if backend == "bm25s":
        return BM25Index
    if backend == "tantivy":
        from .index_tantivy import TantivyIndex

        return TantivyIndex
    raise UsageError(f"unknown search backend {backend!r}; choose one of {', '.join(BACKENDS)}")


_CACHE: dict[tuple[Any, ...], Any] = {}
_CACHE_LOCK = threading.Lock()


def get_index(*, corpus: str | Path | None = None, index: str | Path | None = None,
              backend: str = "bm25s") -> Any:
    """The index for an env, cached per process (keyed by path and modification time), so
    a `VectorEnv` of 64 envs builds it once."""
    cls = index_class(backend)
    if index is not None:
        p = Path(index).expanduser().resolve()
        key: tuple[Any, ...] = (backend, "index", str(p), str(corpus))
        make: Callable[[], Any] = lambda: cls.load(p, corpus=corpus)  # noqa: E731
    else:
        c = Path(corpus or BUNDLED_CORPUS).expanduser().resolve()
        mtime = c.stat().st_mtime_ns if c.exists() else 0
        key = (backend, "corpus", str(c), mtime)
        make = lambda: cls.build(list(iter_corpus(c)))  # noqa: E731
    with _CACHE_LOCK:
        if key not in _CACHE:
            _CACHE[key] = make()
        return _CACHE[key]
