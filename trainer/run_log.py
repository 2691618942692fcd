"""What a training run shows and leaves behind: a live table on the terminal, one JSON line per
step in `metrics.jsonl`, TensorBoard scalars (when tensorboard is installed), optionally W&B,
and PNG curves.

`metrics.jsonl` is the record the rest is drawn from: every line has at least `step` and
`reward_mean`, so `plot_metrics(path)` can redraw the curves of any run, even a finished one.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

#: Columns of the live table: (metric key, header, format).
COLUMNS = (("step", "step", "{:.0f}"), ("reward_mean", "reward", "{:.3f}"),
           ("eval_reward_mean", "eval", "{:.3f}"), ("loss", "loss", "{:+.4f}"),
           ("response_tokens_mean", "resp tok", "{:.1f}"), ("staleness_mean", "stale", "{:.2f}"),
           ("infra_errors", "infra", "{:.0f}"), ("step_s", "step s", "{:.2f}"))


class RunLog:
    def __init__(self, out: Path, total_steps: int, *, live: bool | None = None,
                 tensorboard: bool = True, wandb_project: str | None = None,
                 config: dict[str, Any] | None = None, first_step: int = 0) -> None:
        self.out, self.total = out, total_steps
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "metrics.jsonl"
        if first_step == 0:
            self.path.write_text("")
        else:  # a resumed run keeps the lines of the steps it does not redo
            lines = [ln for ln in self.path.read_text().splitlines() if ln.strip()] \
                if self.path.exists() else []
            keep = [ln for ln in lines if json.loads(ln).get("step", 0) <= first_step]
            self.path.write_text("".join(ln + "\n" for ln in keep))
        self.rows: list[dict[str, Any]] = []
        self.live = sys.stdout.isatty() if live is None else live
        self._tb = _tensorboard(out) if tensorboard else None
        self._wandb = None
        if wandb_project:
            import wandb

            self._wandb = wandb.init(project=wandb_project, dir=str(out), config=config)
        self._console: Any = None
        self._live: Any = None
        self._progress: Any = None
        self._task: Any = None
        self.t0 = time.perf_counter()
        self.first_step = first_step

    def __enter__(self) -> RunLog:
        if self.live:
            from rich.console import Group
            from rich.live import Live
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )

            self._progress = Progress(TextColumn("training"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TimeRemainingColumn())
            self._task = self._progress.add_task("train", total=self.total,
                                                 completed=self.first_step)
            self._live = Live(Group(self._table(), self._progress), refresh_per_second=4)
            self._live.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.__exit__(None, None, None)
        if self._tb is not None:
            self._tb.close()
        if self._wandb is not None:
            self._wandb.finish()

    def log(self, metrics: dict[str, Any]) -> None:
        row = {k: (round(v, 6) if isinstance(v, float) else v) for k, v in metrics.items()}
        self.rows.append(row)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        step = int(row["step"])
        if self._tb is not None:
            for k, v in row.items():
                if isinstance(v, int | float) and k != "step":
                    self._tb.add_scalar(k, v, step)
        if self._wandb is not None:
            self._wandb.log(row, step=step)
        if self._live is not None:
            from rich.console import Group

            self._progress.update(self._task, completed=step)
            self._live.update(Group(self._table(), self._progress))
        else:
            cells = [f"{h}={fmt.format(row[k])}" for k, h, fmt in COLUMNS
                     if isinstance(row.get(k), int | float)]
            print(f"[{step}/{self.total}] " + "  ".join(cells[1:]), flush=True)

    def _table(self) -> Any:
        from rich.table import Table

        table = Table(title="skyhub train", expand=False)
        shown = [c for c in COLUMNS if any(c[0] in r for r in self.rows)] or list(COLUMNS[:2])
        for _, header, _ in shown:
            table.add_column(header, justify="right")
        for row in self.rows[-12:]:
            table.add_row(*[fmt.format(row[k]) if isinstance(row.get(k), int | float) else ""
                            for k, _, fmt in shown])
        return table

    def plot(self) -> Path | None:
        return plot_metrics(self.path, self.out / "curves.png")


def _tensorboard(out: Path) -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:  # the tensorboard package is optional
        return None
    return SummaryWriter(log_dir=str(out / "tensorboard"))


def plot_metrics(metrics_path: Path, png: Path) -> Path | None:
    """Reward (train and eval), gradient norm, response length and step time against step,
    as one PNG (a GRPO policy loss is ~0 by construction: not worth a panel)."""
    rows = [json.loads(ln) for ln in metrics_path.read_text().splitlines() if ln.strip()]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [("reward", ("reward_mean", "eval_reward_mean")), ("gradient norm", ("grad_norm",)),
              ("response tokens", ("response_tokens_mean",)), ("step seconds", ("step_s",))]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.4))
    for ax, (title, keys) in zip(axes, panels, strict=True):
        for key in keys:
            pts = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), int | float)]
            if pts:
                ax.plot(*zip(*pts, strict=True), marker="o" if len(pts) < 30 else None,
                        markersize=3, label=key)
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png
