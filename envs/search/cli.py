"""`skyhub search ...`: the search family's commands. `skyhub search index build CORPUS.jsonl
OUT_DIR` writes a BM25 index on disk for the search envs.

    skyhub search index build wiki-18.jsonl ~/indexes/wiki-bm25
    python -c "import skyhub; skyhub.make('search-qa', index='~/indexes/wiki-bm25', qa=...)"

The index is loaded memory-mapped, so many env processes share one copy in the page cache.

Core's CLI finds these commands through the entry point `search` of the group `skyhub.cli`
(pyproject.toml), so core imports no family; the family's commands sit under its name.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from skyhub.errors import SkyhubError

index_app = typer.Typer(help="Build retrieval indexes for the search envs (search-qa).",
                        no_args_is_help=True)


@index_app.command("build")
def index_build(
    corpus: Annotated[Path, typer.Argument(help="JSONL with {\"id\", \"contents\"} per line "
                                                "(pyserini/Search-R1 format).")],
    out_dir: Annotated[Path, typer.Argument(help="Directory to write the index (and a copy "
                                                 "of the corpus) into.")],
    backend: Annotated[str, typer.Option(help="Index backend: bm25s or tantivy.")] = "bm25s",
) -> None:
    """Index a corpus with BM25 (bm25s or tantivy) and save it; then pass index=OUT_DIR (and
    the same index_backend=) to skyhub.make."""
    console = Console(stderr=True, highlight=False)
    try:
        from skyhub.envs.search.index import index_class, iter_corpus

        cls = index_class(backend)  # UsageError (a SkyhubError) naming the choices
        t0 = time.perf_counter()
        docs = []
        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeElapsedColumn(), console=console, transient=True) as progress:
            size = corpus.stat().st_size if corpus.is_file() else None
            task = progress.add_task("reading corpus (bytes)", total=size)
            for doc in iter_corpus(corpus):
                docs.append(doc)
                progress.advance(task, len(doc["contents"]) + 30)
            progress.update(task, completed=size)
            step = progress.add_task(f"indexing {len(docs)} passages", total=2)
            # tantivy writes in place (save() then only marks the directory)
            index = cls.build(docs, path=out_dir) if backend == "tantivy" else cls.build(docs)
            progress.advance(step)
            progress.update(step, description=f"saving to {out_dir}")
            index.save(out_dir)
            progress.advance(step)
    except SkyhubError as e:
        console.print(Text(f"error: {e}", style="red"), soft_wrap=True)
        raise typer.Exit(2) from None
    Console().print(f"indexed {len(docs)} passages with {backend} in "
                    f"{time.perf_counter() - t0:.1f}s -> {out_dir}")


search_app = typer.Typer(help="The search family's commands: its indexes (skyhub search index "
                              "build).", no_args_is_help=True)
search_app.add_typer(index_app, name="index")


@search_app.callback()
def search_cmds() -> None:
    """The search family's commands: its indexes (skyhub search index build)."""
