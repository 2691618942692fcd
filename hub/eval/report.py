"""Reports for `skyhub eval` run directories: markdown, self-contained HTML and PNG plots.

    from skyhub.eval.report import write_report
    paths = write_report("runs/spider-dev")   # report.md, report.html, plots/

Every number is recomputed from `episodes.jsonl` (never copied from `summary.json`), so a
resumed or hand-edited run is reported as it stands, with the figures of `skyhub.eval.metrics`
(accuracy is the success fraction among episodes *without* an infra error, mean reward is over
the same episodes, and infra errors are counted apart, never scored 0). The report is one list
of blocks (`skyhub.eval.render`) rendered to markdown and HTML; its tables come from
`skyhub.eval.breakdown`, its plots from `skyhub.eval.plots` (without matplotlib the report is
still written and says how to get them).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyhub.eval.breakdown import (
    error_taxonomy,
    example_failures,
    slice_keys,
    slice_table,
    turns_histogram,
)
from skyhub.eval.metrics import headline, number
from skyhub.eval.named_rewards import named_means
from skyhub.eval.plots import (
    NO_MATPLOTLIB,
    plot_key,
    plot_rewards,
    plot_slices,
    plot_suite,
    plot_turns,
    pyplot,
)
from skyhub.eval.render import Block, fmt, fmt_ci, fmt_int, fmt_pct, write_pages
from skyhub.eval.rundir import load_records, read_json
from skyhub.eval.suites import Suite


def accuracy_line(h: dict[str, Any]) -> str:
    """The one line to read: "accuracy 0.812 [0.776, 0.843], n=497 scored, infra errors 3"."""
    return (f"accuracy {fmt(h['accuracy'])} {fmt_ci(h['ci95'])}, n={h['scored']} scored, "
            f"infra errors {h['infra_errors']}")


def _config_line(run: dict[str, Any], records: Sequence[dict[str, Any]]) -> str:
    first = records[0] if records else {}
    parts = [f"env `{run.get('env_id') or first.get('env_id') or '?'}`",
             f"agent `{run.get('agent') or first.get('agent') or '?'}`"]
    for key in ("protocol", "seed", "max_turns", "env_kwargs", "started", "skyhub_version"):
        if run.get(key) not in (None, {}, ""):
            value = run[key]
            value = json.dumps(value, sort_keys=True) if isinstance(value, dict) else value
            parts.append(f"{key.replace('_', ' ')} `{value}`")
    return " · ".join(parts)


def write_report(run_dir: str | Path, *, title: str | None = None) -> dict[str, Any]:
    """Write report.md, report.html and plots/*.png into `run_dir`; return their paths as
    {"markdown": Path, "html": Path, "plots": [Path, ...]}."""
    run_dir = Path(run_dir)
    records = load_records(run_dir)
    run = read_json(run_dir / "run.json")
    summary = read_json(run_dir / "summary.json")
    first = records[0] if records else {}
    env_id = run.get("env_id") or first.get("env_id") or summary.get("env_id") or run_dir.name
    agent = run.get("agent") or first.get("agent") or summary.get("agent") or "?"
    title = title or f"{env_id} — {agent}"
    h = headline(records)

    blocks: list[Block] = [("h1", title), ("strong", accuracy_line(h)),
                           ("p", _config_line(run, records))]
    requested = number(run.get("n")) or number(summary.get("requested"))
    if requested is not None and len(records) < requested:
        blocks.append(("p", f"Incomplete run: {len(records)} of {int(requested)} requested "
                            "episodes recorded (resume it with the same command)."))
    if not records:
        blocks.append(("p", "No episodes recorded yet."))

    tokens = h["tokens"]
    token_note = "" if h["tokens_known"] in (0, h["episodes"]) else \
        f" (known for {h['tokens_known']} of {h['episodes']} episodes)"
    rows = [("episodes", h["episodes"]), ("scored (non-infra)", h["scored"]),
            ("accuracy", fmt(h["accuracy"])), ("95% CI", fmt_ci(h["ci95"])),
            ("mean reward", fmt(h["mean_reward"])),
            ("mean reward 95% CI", fmt_ci(h["mean_reward_ci95"])),
            ("infra errors", h["infra_errors"]),
            ("mean turns", fmt(h["mean_turns"], 2)),
            ("tokens prompt", fmt_int(tokens["prompt"]) + token_note),
            ("tokens completion", fmt_int(tokens["completion"]) + token_note),
            ("mean latency s", fmt(h["mean_latency_s"], 2)),
            ("mean agent wait s", fmt(h["mean_agent_s"], 2))]
    rows += [(f"{name} (mean, n={m['n']})", fmt(m["mean"]))  # named rewards
             for name, m in named_means(records).items()]
    if number(summary.get("seconds")) is not None:
        rows.append(("wall time s (summary.json)", fmt(summary["seconds"], 1)))
    clustered = h["ci95_method"] != "wilson"
    by_task = (f" Tasks have several attempts, which are not independent: both intervals are "
               f"{h['ci95_method']} (Wilson's over the effective sample size from the "
               "cluster-robust variance; the cluster-robust standard error)."
               if clustered else "")
    blocks += [("h2", "Headline"), ("table", ["metric", "value"], rows),
               ("p", "Accuracy: success fraction among episodes without an infra error; its "
                     "95% CI is Wilson's interval over the successes. Mean reward is over the "
                     "same episodes, its 95% CI by the normal approximation; infra errors "
                     "are counted apart, never scored 0." + by_task)]

    for key in slice_keys(records):
        blocks += [("h2", f"By {key}"), ("table", ["value", "episodes", "accuracy", "95% CI",
                                                    "mean reward", "infra errors"],
                                         [[r["value"], r["n"], fmt(r["accuracy"]),
                                           fmt_ci(r["ci95"]), fmt(r["mean_reward"]),
                                           r["infra_errors"]]
                                          for r in slice_table(records, key)])]

    if records:
        blocks += [("h2", "Turns used"),
                   ("table", ["turns", "episodes", "successes", "success rate", "infra errors"],
                    [[r["turns"], r["episodes"], r["successes"], fmt(r["success_rate"]),
                      r["infra_errors"]] for r in turns_histogram(records)])]
        blocks += [("h2", "Error taxonomy"),
                   ("table", ["category", "episodes", "share"],
                    [[cat, n, f"{100 * n / len(records):.1f}%"]
                     for cat, n in error_taxonomy(records)])]
        failures = example_failures(records)
        if failures:
            blocks.append(("h2", "Example failures"))
            for f in failures:
                blocks.append(("pre", f"`{f['task_id']}` (episode {f['index']}, {f['category']})"
                                      ": last assistant message", f["message"] or "(none)"))

    plots: list[Path] = []
    if records:
        plt = pyplot()
        blocks.append(("h2", "Plots"))
        if plt is None:
            blocks.append(("p", NO_MATPLOTLIB))
        else:
            plot_dir = run_dir / "plots"
            plot_dir.mkdir(exist_ok=True)
            key = plot_key(records)
            if key is not None:
                plots.append(plot_slices(plt, records, key, plot_dir / "slices.png"))
            plots.append(plot_turns(plt, records, plot_dir / "turns.png"))
            plots.append(plot_rewards(plt, records, plot_dir / "reward.png"))
            blocks += [("img", f"plots/{p.name}", p.stem) for p in plots]
    return write_pages(run_dir, blocks, title, plots)


# -- the suite report ---------------------------------------------------------------------------


def write_suite_report(out_dir: str | Path, suite: Suite, run_dirs: dict[str, Path | None], *,
                       label: str) -> dict[str, Any]:
    """The suite's results table: its reference rows (percent), then a row `label` with this
    run's accuracy per column as "percent ± CI half-width (n=scored episodes)", "no data" where
    a column was not run. Writes report.md, report.html and plots/suite.png into `out_dir`."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    names = [r.name for r in suite.runs]
    ours: dict[str, dict[str, Any]] = {}
    notes: list[str] = []
    details = []
    for spec in suite.runs:
        path = run_dirs.get(spec.name)
        if path is None:
            hint = f": {spec.data_hint}" if spec.data_hint else ""
            notes.append(f"{spec.name}: no data{hint}")
            continue
        records = load_records(path)
        h = ours[spec.name] = headline(records)
        run = read_json(Path(path) / "run.json")
        details.append([spec.name, str(path), run.get("env_id") or spec.env_id, h["episodes"],
                        h["scored"], fmt(h["accuracy"]), fmt_ci(h["ci95"]),
                        h["infra_errors"]])
        kwargs = run.get("env_kwargs")
        expected = dict(spec.kwargs)
        if spec.max_turns is not None:  # the suite passes its turn budget as an env kwarg
            expected["max_turns"] = spec.max_turns
        if isinstance(kwargs, dict) and kwargs != expected:
            notes.append(f"{spec.name}: ran with env_kwargs {json.dumps(kwargs, sort_keys=True)}"
                         f" (the suite's: {json.dumps(expected, sort_keys=True)})")
        requested = number(run.get("n"))
        if requested is not None and h["episodes"] < requested:
            notes.append(f"{spec.name}: incomplete, {h['episodes']} of {int(requested)} "
                         "episodes recorded")

    def cell(name: str) -> str:
        h = ours.get(name)
        if h is None:
            return "no data"
        acc, lo, hi = number(h["accuracy"]), *(number(c) for c in h["ci95"])
        if acc is None:
            return f"n/a (n={h['scored']})"
        half = f" ± {100 * (hi - lo) / 2:.1f}" if lo is not None and hi is not None else ""
        return f"{100 * acc:.1f}{half} (n={h['scored']})"

    rows = [[model] + [fmt_pct(cols.get(n)) for n in names]
            for model, cols in suite.reference.items()]
    rows.append([label] + [cell(n) for n in names])
    blocks: list[Block] = [("h1", f"Suite {suite.name} — {label}"), ("p", suite.description),
                           ("h2", "Results (accuracy %)"), ("table", ["model", *names], rows),
                           ("p", "This run's cells: accuracy in percent ± half the width of its "
                                 "95% CI, and n, the episodes scored (infra errors excluded). "
                                 "Reference rows are published numbers over the full datasets: "
                                 "a cell with a smaller n ran on a subset and is not directly "
                                 "comparable.")]
    if suite.source:
        blocks.append(("p", f"Reference numbers: {suite.source}"))
    if notes:
        blocks += [("h2", "Notes"), ("table", ["note"], [[n] for n in notes])]
    if details:
        blocks += [("h2", "Runs"), ("table", ["column", "run directory", "env", "episodes",
                                              "scored", "accuracy", "95% CI", "infra errors"],
                                    details)]
    plots: list[Path] = []
    plt = pyplot()
    if plt is None:
        blocks.append(("p", NO_MATPLOTLIB))
    else:
        plot_dir = out_dir / "plots"
        plot_dir.mkdir(exist_ok=True)
        plots.append(plot_suite(plt, suite, ours, label, plot_dir / "suite.png"))
        blocks += [("h2", "Plot"), ("img", "plots/suite.png", "suite")]
    return write_pages(out_dir, blocks, f"Suite {suite.name} — {label}", plots)


__all__ = ["accuracy_line", "error_taxonomy", "headline", "slice_table", "write_report",
           "write_suite_report"]
