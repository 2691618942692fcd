"""`skyhub swe ...`: the swe family's commands. `skyhub swe data get swe-synth` downloads
swe-synth's projects and makes its tasks; `skyhub swe data ls` shows what is there.

Core's CLI finds these commands through the entry point `swe` of the group `skyhub.cli`
(pyproject.toml), so core imports no family.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

swe_app = typer.Typer(help="The swe family's commands: swe-synth's data (skyhub swe data "
                           "get|ls).", no_args_is_help=True)
data_app = typer.Typer(help="Download swe-synth's projects and make its tasks, or list what "
                            "is present under $SKYHUB_DATA.", no_args_is_help=True)
swe_app.add_typer(data_app, name="data")

RootOption = Annotated[Path | None, typer.Option(
    "--root", help="The data root (default: $SKYHUB_DATA); swe-synth goes in its swe-synth/.",
    show_default=False)]


@data_app.command("get")
def data_get(
    name: Annotated[str, typer.Argument(help="The dataset: swe-synth.")],
    root: RootOption = None,
    n: Annotated[int, typer.Option("--n", help="Tasks to make per project.")] = 40,
    seed: Annotated[int, typer.Option(help="Which mutations are tried, in which order.")] = 0,
    project: Annotated[list[str] | None, typer.Option(
        "--project", help="Only these projects (repeat the option); default all three.")]
    = None,
    backend: Annotated[str, typer.Option(
        help="Where the projects' tests run: docker (the swe image), local, or auto.")]
    = "auto",
) -> None:
    """Download swe-synth's projects from PyPI (pinned sdists, SHA-256 checked), plant bugs
    in their source files and keep those their tests catch: N tasks per project, written to
    <root>/swe-synth/instances.jsonl (replacing it). Seeded: the same options make the same
    tasks."""
    from skyhub.errors import UsageError

    from .synth_data import PROJECTS, get

    if name != "swe-synth":
        raise UsageError(f"unknown dataset {name!r}; the swe family downloads swe-synth")
    for p in project or list(PROJECTS):
        if p in PROJECTS:
            info = PROJECTS[p]
            typer.echo(f"{p} {info.version}: {info.url} ({info.license})")
    out = get(root, n=n, seed=seed, projects=project, backend=backend)
    count = sum(1 for line in (out / "instances.jsonl").open() if line.strip())
    typer.echo(f"swe-synth: {count} tasks in {out / 'instances.jsonl'}")


@data_app.command("ls")
def data_ls(root: RootOption = None) -> None:
    """swe-synth's projects, whether each is downloaded, and how many tasks it has."""
    from rich.console import Console
    from rich.table import Table

    from .synth_data import PROJECTS, dataset_dir

    out = dataset_dir(root)
    counts: dict[str, int] = {}
    tasks = out / "instances.jsonl"
    if tasks.is_file():
        for line in tasks.open(encoding="utf-8"):
            if line.strip():
                repo = json.loads(line)["repo"].rsplit("/", 1)[-1]
                counts[repo] = counts.get(repo, 0) + 1
    table = Table(title=f"swe-synth under {out}", title_justify="left")
    for col in ("project", "version", "license", "downloaded", "tasks"):
        table.add_column(col)
    for p in PROJECTS.values():
        table.add_row(p.name, p.version, p.license,
                      "yes" if (out / "repos" / p.name).is_dir() else "no",
                      str(counts.get(p.name, 0)))
    Console(highlight=False).print(table)


__all__ = ["swe_app"]
