"""`skyhub sql ...`: the SQL family's commands. `skyhub sql data get|ls` downloads the public
datasets the envs read, and shows which are present.

The datasets live under one data root, `$SKYHUB_DATA` (or `--root`), one folder each; the
loaders look there, so `skyhub sql data get spider` followed by `skyhub.make("sql-spider",
split="train")` works without any path. Checksum policy: see
`skyhub.envs.sql.datasets.download`.

Core's CLI finds these commands through the entry point `sql` of the group `skyhub.cli`
(pyproject.toml), so core imports no family; the family's commands sit under its name.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from skyhub.errors import SkyhubError

data_app = typer.Typer(help="Download the public datasets (Spider, BIRD, SynSQL, ...) and list "
                            "which are present under $SKYHUB_DATA.", no_args_is_help=True)

F = TypeVar("F", bound=Callable[..., Any])
RootOption = Annotated[Path | None, typer.Option(
    "--root", help="The data root (default: $SKYHUB_DATA); each dataset gets a folder in it.",
    show_default=False)]


def _errors_in_red(fn: F) -> F:
    """A `SkyhubError` (no root, bad checksum, failed download) is printed in red without a
    traceback and exits with code 2, as in the rest of the CLI."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except SkyhubError as e:
            Console(stderr=True, highlight=False).print(Text(f"error: {e}", style="red"),
                                                        soft_wrap=True)
            raise typer.Exit(2) from None
    return wrapper  # type: ignore[return-value]


@data_app.command("get")
@_errors_in_red
def data_get(
    name: Annotated[str, typer.Argument(help="The dataset, e.g. spider, bird, synsql "
                                             "('skyhub sql data ls' lists them).")],
    root: RootOption = None,
    url: Annotated[str | None, typer.Option(
        help="Download from here instead (a mirror, or a file you downloaded by hand).")] = None,
    sha256: Annotated[str | None, typer.Option(
        "--sha256", help="The SHA-256 the download must have (for releases without a pinned "
                         "one).")] = None,
    no_verify: Annotated[bool, typer.Option(
        "--no-verify", help="Unpack even without a matching checksum (prints the computed "
                            "one).")] = False,
    force: Annotated[bool, typer.Option(help="Replace files the dataset folder already has.")]
    = False,
    keep_archive: Annotated[bool, typer.Option(
        help="Keep the downloaded archive in <root>/.downloads.")] = False,
) -> None:
    """Download a dataset from its official source, verify its checksum, and unpack it."""
    from skyhub.envs.sql.datasets import download

    src = download.source(name)
    root_dir = download.data_root(root)
    console = Console(highlight=False)
    console.print(f"{name}: {src.note or src.homepage} (license: {src.license})")
    dest = download.get(name, root_dir, url=url, sha256=sha256, verify=not no_verify,
                        force=force, keep_archive=keep_archive)
    console.print(f"[green]{name} is ready in {dest}[/]")


@data_app.command("ls")
@_errors_in_red
def data_ls(root: RootOption = None) -> None:
    """The downloadable datasets, where each goes, and whether it is present."""
    from skyhub.envs.sql.datasets import download

    console = Console(highlight=False)
    try:
        root_dir: Path | None = download.data_root(root)
    except SkyhubError:
        root_dir = None
    table = Table(title=f"datasets under {root_dir or '$SKYHUB_DATA (not set)'}",
                  title_justify="left")
    for col in ("name", "folder", "status", "expected layout", "source"):
        table.add_column(col, no_wrap=col in ("name", "folder"), overflow="fold")
    for src in download.SOURCES.values():
        if root_dir is None:
            status = Text("-")
        else:
            lacking = download.missing(src, root_dir)
            if not lacking:
                status = Text("present", style="green")
            elif len(lacking) < len(src.layout):
                status = Text(f"partial (no {', '.join(lacking)})", style="yellow")
            else:
                status = Text("missing", style="dim")
        table.add_row(src.name, f"{src.dest}/", status, ", ".join(src.layout),
                      Text(f"{src.homepage} ({src.license})"))
    console.print(table)
    if root_dir is None:
        console.print(Text("Set SKYHUB_DATA (or pass --root) to see what is present.",
                           style="yellow"))
    else:
        console.print(f"Get one with: skyhub sql data get NAME   (into {root_dir})")


sql_app = typer.Typer(help="The SQL family's commands: its datasets (skyhub sql data get|ls).",
                      no_args_is_help=True)
sql_app.add_typer(data_app, name="data")


@sql_app.callback()
def sql_cmds() -> None:
    """The SQL family's commands: its datasets (skyhub sql data get|ls)."""
