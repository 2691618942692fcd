"""The PNG plots of reports: accuracy by slice, turns used, the reward distribution, and a
suite's grouped bars. matplotlib (the `eval` extra) is imported lazily with the file-only Agg
backend; `pyplot()` is None without it, and the report says how to get the plots
(`NO_MATPLOTLIB`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyhub.eval.breakdown import slice_keys, slice_table, turns_histogram
from skyhub.eval.metrics import is_infra, number
from skyhub.eval.suites import Suite

# the slice plotted in plots/slices.png: the first of these that slices the run
PLOT_SLICE_KEYS = ("difficulty", "hardness", "level", "dataset", "db_id", "category", "type",
                   "split", "source")
PLOT_SLICE_TOP = 20
NO_MATPLOTLIB = "Plots need matplotlib: `pip install 'skyhub[eval]'`."


def pyplot() -> Any:
    """matplotlib.pyplot with the file-only Agg backend, or None when it is not installed."""
    try:
        import matplotlib
    except ImportError:
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _err_bars(rows: Sequence[dict[str, Any]]) -> tuple[list[float], list[list[float]]]:
    heights, below, above = [], [], []
    for row in rows:
        acc = number(row["accuracy"])
        lo, hi = (number(c) for c in row["ci95"])
        heights.append(acc or 0.0)
        below.append(max(0.0, acc - lo) if acc is not None and lo is not None else 0.0)
        above.append(max(0.0, hi - acc) if acc is not None and hi is not None else 0.0)
    return heights, [below, above]


def plot_slices(plt: Any, records: Sequence[dict[str, Any]], key: str, png: Path) -> Path:
    rows = slice_table(records, key)
    if len(rows) > PLOT_SLICE_TOP:  # the largest slices, kept in table order
        keep = {id(r) for r in sorted(rows, key=lambda r: -r["n"])[:PLOT_SLICE_TOP]}
        rows = [r for r in rows if id(r) in keep]
    heights, err = _err_bars(rows)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(rows) + 2.5), 3.8))
    xs = range(len(rows))
    ax.bar(xs, heights, yerr=err, capsize=3, color="#4c78a8")
    ax.set_xticks(list(xs), [f"{r['value']}\n(n={r['n']})" for r in rows],
                  rotation=45 if len(rows) > 6 else 0, ha="right" if len(rows) > 6 else "center",
                  fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (95% CI)")
    ax.set_title(f"accuracy by {key}")
    return _save(plt, fig, ax, png)


def _save(plt: Any, fig: Any, ax: Any, png: Path) -> Path:
    """What every plot ends with: a light grid, a tight layout, the PNG written."""
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def plot_turns(plt: Any, records: Sequence[dict[str, Any]], png: Path) -> Path:
    rows = turns_histogram(records)
    xs = [r["turns"] for r in rows]
    wins = [r["successes"] for r in rows]
    fails = [r["episodes"] - r["successes"] - r["infra_errors"] for r in rows]
    infra = [r["infra_errors"] for r in rows]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    ax.bar(xs, wins, color="#54a24b", label="success")
    ax.bar(xs, fails, bottom=wins, color="#e45756", label="failure")
    if any(infra):
        ax.bar(xs, infra, bottom=[w + f for w, f in zip(wins, fails, strict=True)],
               color="#bab0ac", label="infra error")
    ax.set_xlabel("turns used")
    ax.set_ylabel("episodes")
    ax.set_xticks(xs)
    ax.set_title("turns used")
    ax.legend(fontsize=8)
    return _save(plt, fig, ax, png)


def plot_rewards(plt: Any, records: Sequence[dict[str, Any]], png: Path) -> Path:
    rewards = [x for x in (number(r.get("reward")) for r in records if not is_infra(r))
               if x is not None]
    fig, ax = plt.subplots(figsize=(6, 3.6))
    if rewards:
        ax.hist(rewards, bins=min(30, max(5, len(set(rewards)))), color="#4c78a8")
    else:
        ax.text(0.5, 0.5, "no scored episodes", ha="center", va="center",
                transform=ax.transAxes)
    ax.set_xlabel("episode reward (non-infra episodes)")
    ax.set_ylabel("episodes")
    ax.set_title("reward distribution")
    return _save(plt, fig, ax, png)


def plot_key(records: Sequence[dict[str, Any]]) -> str | None:
    keys = slice_keys(records)
    return next((k for k in PLOT_SLICE_KEYS if k in keys), None)


def plot_suite(plt: Any, suite: Suite, ours: dict[str, dict[str, Any]], label: str,
               png: Path) -> Path:
    """Grouped bars: one group per column, one bar per reference model and one for this run
    (with its CI); a missing number leaves a gap."""
    names = [r.name for r in suite.runs]
    series = [(model, [number(cols.get(n)) for n in names], None)
              for model, cols in suite.reference.items()]
    vals, lows, highs = [], [], []
    for n in names:
        h = ours.get(n)
        acc = number(h["accuracy"]) if h else None
        lo, hi = (number(c) for c in h["ci95"]) if h else (None, None)
        vals.append(None if acc is None else 100 * acc)
        lows.append(0.0 if acc is None or lo is None else 100 * max(0.0, acc - lo))
        highs.append(0.0 if acc is None or hi is None else 100 * max(0.0, hi - acc))
    series.append((label, vals, [lows, highs]))
    width = 0.8 / max(1, len(series))
    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(names) + 5), 4.0))
    for i, (name, heights, err) in enumerate(series):
        xs = [j + (i - (len(series) - 1) / 2) * width for j in range(len(names))]
        keep = [j for j, v in enumerate(heights) if v is not None]
        if err:  # this run: say where it has no number rather than leave a silent gap
            for j in set(range(len(names))) - set(keep):
                ax.text(xs[j], 1, "no data", rotation=90, ha="center", va="bottom", fontsize=8)
        if not keep:
            ax.bar([], [], width, label=name)  # keep the legend entry
            continue
        yerr = [[err[0][j] for j in keep], [err[1][j] for j in keep]] if err else None
        ax.bar([xs[j] for j in keep], [heights[j] for j in keep], width, yerr=yerr, capsize=3,
               label=name, hatch="//" if err else None)
    ax.set_xticks(range(len(names)), names, rotation=20 if len(names) > 4 else 0)
    ax.set_xlim(-0.5, len(names) - 0.5)
    ax.set_ylabel("accuracy %")
    ax.set_title(f"{suite.name}")
    # beside the axes, never over the bars (they reach the top when a run scores ~100%)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    return _save(plt, fig, ax, png)


__all__ = ["NO_MATPLOTLIB", "plot_key", "plot_rewards", "plot_slices", "plot_suite",
           "plot_turns", "pyplot"]
