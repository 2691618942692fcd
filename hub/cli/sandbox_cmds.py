"""`skyhub sandbox ...` and `skyhub images ...`: inspect and clean up sandboxes, build images."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

sandbox_app = typer.Typer(help="Inspect sandboxes and remove orphans left by crashed processes.",
                          no_args_is_help=True)
images_app = typer.Typer(help="Build the Docker images skyhub's sandboxes use.",
                         no_args_is_help=True)


@sandbox_app.command("ls")
def sandbox_ls() -> None:
    """List sandboxes (Docker containers and local scratch dirs) with skyhub's labels."""
    import time

    from skyhub.sandbox import docker_client, local

    rows = [("local", s) for s in local.list_sandboxes()]
    if docker_client.docker_available():
        rows += [("docker", s) for s in docker_client.list_sandboxes()]
    table = Table(title="skyhub sandboxes", title_justify="left")
    for col in ("backend", "name", "owner pid", "owner alive", "pool", "age (s)"):
        table.add_column(col)
    from skyhub.sandbox.base import pid_alive

    for backend, s in rows:
        pid = int(s.get("owner_pid") or 0)
        age = time.time() - float(s.get("created") or time.time())
        table.add_row(backend, str(s.get("name")), str(pid), "yes" if pid and pid_alive(pid)
                      else "no", str(s.get("pool") or ""), f"{age:.0f}")
    Console().print(table if rows else "no sandboxes")


@sandbox_app.command("reap")
def sandbox_reap(
    older_than: Annotated[float, typer.Option(
        "--older-than", help="Only sandboxes created more than this many seconds ago.")] = 0.0,
    dry_run: Annotated[bool, typer.Option(help="Show what would be removed.")] = False,
) -> None:
    """Remove sandboxes whose owner process is dead (on this host). One that cannot be
    removed is reported (exit code 1) and the others are removed all the same."""
    from skyhub.sandbox.reap import reap

    errors: list[str] = []
    removed = reap(older_than_s=older_than, dry_run=dry_run, errors=errors)
    verb = "would remove" if dry_run else "removed"
    for name in removed:
        typer.echo(f"{verb} {name}")
    typer.echo(f"{verb} {len(removed)} orphaned sandbox{'es' if len(removed) != 1 else ''}")
    for why in errors:
        typer.echo(f"could not remove {why}", err=True)
    if errors:
        raise typer.Exit(1)


@images_app.command("build")
def images_build(
    names: Annotated[list[str] | None, typer.Argument(help="Images to build (default: all).")] =
    None,
    quiet: Annotated[bool, typer.Option(help="Only print the tags.")] = False,
) -> None:
    """Build skyhub's sandbox images (FROM debian:bookworm-slim) that are missing or stale."""
    from skyhub.sandbox import images

    for tag in images.build(names or None, quiet=quiet):
        typer.echo(tag)


@images_app.command("ls")
def images_ls() -> None:
    """The images skyhub knows, their tags, and whether they are built."""
    from skyhub.sandbox import images
    from skyhub.sandbox.docker_client import docker_available

    table = Table(title="skyhub images", title_justify="left")
    for col in ("name", "tag", "built"):
        table.add_column(col)
    up = docker_available()
    for name in images.IMAGES:
        tag = images.image_tag(name)
        table.add_row(name, tag, ("yes" if images.is_built(tag) else "no") if up else "?")
    Console().print(table)
