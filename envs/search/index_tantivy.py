"""The tantivy backend of the search index: same interface as `BM25Index` (build, save, load,
`search(query, k)` -> `{"id", "contents", "score"}` dicts).

Schema: `id` (stored, raw), `title` and `contents` (English stemming tokenizer; `contents` is
stored verbatim so results show the passage as the corpus has it). Agents' queries are free
text, so they are never handed to tantivy's query language as they are: only their words are
kept (lower-cased, so `AND`/`OR`/`NOT` are plain words) and any parse error gives [].
tantivy is imported only when an index is built or loaded.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any

from skyhub.errors import DataNotFound, MissingDependency

from .passage import split_title

MARKER = "skyhub-tantivy.json"
TOKENIZER = "en_stem"
MAX_QUERY_TERMS = 64
_WORD = re.compile(r"\w+", re.UNICODE)


def _tantivy() -> Any:
    try:
        import tantivy
    except ImportError as e:
        raise MissingDependency("the tantivy backend needs tantivy: pip install "
                                "'skyhub[search]'") from e
    return tantivy


def _schema(tantivy: Any) -> Any:
    sb = tantivy.SchemaBuilder()
    sb.add_text_field("id", stored=True, tokenizer_name="raw", index_option="basic")
    sb.add_text_field("title", stored=False, tokenizer_name=TOKENIZER, index_option="freq")
    sb.add_text_field("contents", stored=True, tokenizer_name=TOKENIZER, index_option="freq")
    return sb.build()


def sanitize_query(query: str) -> str:
    """The words of a free-text query, lower-cased and space-joined: nothing the tantivy query
    parser treats as syntax (quotes, parentheses, `field:`, `+`/`-`, `AND`/`OR`/`NOT`) is left."""
    words = _WORD.findall(str(query)[:20_000].lower())
    return " ".join(words[:MAX_QUERY_TERMS])


class TantivyIndex:
    """Top-k passages for a query with tantivy's BM25 (title + contents)."""

    def __init__(self, index: Any, path: Path | None, tmp: bool = False) -> None:
        self.index, self.path, self._tmp = index, path, tmp
        self.index.reload()
        self.searcher = index.searcher()
        self.num_docs = self.searcher.num_docs
        self._docs: list[dict[str, Any]] | None = None
        self._lock = threading.Lock()
        if tmp and path is not None:  # a temporary build dir goes with the index
            weakref.finalize(self, shutil.rmtree, str(path), True)

    @staticmethod
    def _write(tantivy: Any, index: Any, docs: list[dict[str, Any]]) -> None:
        writer = index.writer(heap_size=512_000_000, num_threads=0)
        for d in docs:
            title, _ = split_title(d["contents"])
            writer.add_document(tantivy.Document(id=str(d["id"]), title=title,
                                                 contents=str(d["contents"])))
        writer.commit()
        writer.wait_merging_threads()

    @classmethod
    def build(cls, docs: list[dict[str, Any]], *, path: str | Path | None = None,
              show_progress: bool = False) -> TantivyIndex:
        """Index `docs`; into `path` (then `save(path)` only marks it) or a temporary dir."""
        tantivy = _tantivy()
        if not docs:
            raise DataNotFound("the corpus is empty: nothing to index")
        tmp = path is None
        p = Path(tempfile.mkdtemp(prefix="skyhub-tantivy-")) if tmp else Path(path).expanduser()
        p.mkdir(parents=True, exist_ok=True)
        index = tantivy.Index(_schema(tantivy), path=str(p), reuse=False)
        cls._write(tantivy, index, docs)
        out = cls(index, p, tmp=tmp)
        out._docs = docs
        return out

    def save(self, out_dir: str | Path, *, show_progress: bool = False) -> Path:
        """Write the index to `out_dir` (re-indexing unless it was built there)."""
        out = Path(out_dir).expanduser()
        if self.path is None or out.resolve() != self.path.resolve():
            if self._docs is None:
                raise DataNotFound("a loaded tantivy index cannot be saved elsewhere: copy "
                                   "its directory instead")
            TantivyIndex.build(self._docs, path=out)
        (out / MARKER).write_text(json.dumps({"backend": "tantivy", "docs": self.num_docs}))
        return out

    @classmethod
    def load(cls, index_dir: str | Path, *, corpus: str | Path | None = None,
             **_: Any) -> TantivyIndex:
        """An index written by `save` (or `skyhub search index build --backend tantivy`).
        Passages are stored in the index, so `corpus` is not needed (accepted for symmetry)."""
        tantivy = _tantivy()
        d = Path(index_dir).expanduser()
        if not (d / "meta.json").is_file():
            raise DataNotFound(f"no tantivy index in {d} (looked for meta.json). Build one with "
                               f"'skyhub search index build CORPUS.jsonl {d} --backend tantivy'")
        return cls(tantivy.Index.open(str(d)), d)

    def search(self, query: str, k: int = 3) -> list[dict[str, Any]]:
        """Never raises on a query string: a query with no words, or one tantivy rejects,
        gives []."""
        text = sanitize_query(query)
        if not text or k < 1:
            return []
        try:
            q = self.index.parse_query(text, ["title", "contents"])
            with self._lock:
                hits = self.searcher.search(q, min(k, max(self.num_docs, 1))).hits
                docs = [(float(s), self.searcher.doc(addr)) for s, addr in hits]
        except ValueError:
            return []
        out = []
        for score, doc in docs:
            if score <= 0:
                continue
            out.append({"id": doc.get_first("id"), "contents": doc.get_first("contents"),
                        "score": score})
        return out
