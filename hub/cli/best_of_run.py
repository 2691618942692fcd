"""`skyhub eval run ENV --best-of N --branch-at T`: `skyhub.eval.best_of` under a progress
bar, then its table (the options are eval_cmds.py's `run` command's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console


def run_best_of(env_id: str, agent: Any, *, console: Console, n: int | None,
                 branch_at: int | None, tasks: int | None, seed: int,
                 env_kwargs: dict[str, Any], concurrency: int, out: Path,
                 other: dict[str, Any]) -> None:
    """`--best-of N --branch-at T`: skyhub.eval.best_of under a progress bar, then its table."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn
    from rich.table import Table

    from skyhub.eval import best_of as best

    if n is None or branch_at is None:
        raise typer.BadParameter("--best-of N and --branch-at T go together: pass both "
                                 "(e.g. --best-of 4 --branch-at 2)", param_hint="--best-of")
    used = [name for name, value in other.items() if value]
    if used:
        raise typer.BadParameter(f"--best-of runs text episodes of its own; it does not take "
                                 f"{', '.join('--' + u.replace('_', '-') for u in used)}",
                                 param_hint="--best-of")
    columns = ("{task.description}", BarColumn(), MofNCompleteColumn(),
               "best {task.fields[best]}", TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as progress:
        bars: list[Any] = []
        wins = {"best": 0, "done": 0}

        def plan(total: int) -> None:
            bars.append(progress.add_task(f"{env_id} / {agent.name} best-of-{n} at turn "
                                          f"{branch_at}", total=total, best="-"))

        def tick(result: best.TaskResult) -> None:
            wins["done"] += 1
            wins["best"] += result.success
            progress.update(bars[0], advance=1, best=f"{wins['best'] / wins['done']:.3f}")

        summary = best.run(env_id, agent, n=n, branch_at=branch_at, tasks=tasks, seed=seed,
                           env_kwargs=env_kwargs, concurrency=concurrency, out=out,
                           on_plan=plan, on_task=tick)
    table = Table(title=f"{env_id}: {agent.name}, best of {n} from turn {branch_at}",
                  title_justify="left")
    for col in ("tasks", f"best of {n}", "one episode", "mean best reward", "infra errors"):
        table.add_column(col, justify="right")
    d = summary.to_dict()
    table.add_row(str(d["tasks"]), f"{d['best_success']:.3f}", f"{d['single_success']:.3f}",
                  f"{d['mean_best_reward']:.3f}", str(d["infra_errors"]))
    console.print(table)
    console.print(f"branches: {out / 'episodes.jsonl'}  summary: {out / 'best_of.json'}",
                  soft_wrap=True)


__all__ = ["run_best_of"]
