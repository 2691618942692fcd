"""What every benchmark shares: machine facts, the result file format, a rich table."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"


def machine() -> dict[str, Any]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "python": platform.python_version()}


_AUTO: Any = object()


def result(metric: str, ours: float, baseline: str, baseline_value: float | None,
           goal: str, *, ratio: float | None = _AUTO, met: bool | None = None,
           unit: str = "", note: str = "") -> dict[str, Any]:
    """One row: `ratio` defaults to ours / baseline_value (pass None where a ratio means
    nothing); `met` says whether `goal` holds."""
    if ratio is _AUTO:
        ratio = ours / baseline_value if baseline_value else None
    row = {"metric": metric, "ours": round(ours, 4), "unit": unit, "baseline": baseline,
           "baseline_value": None if baseline_value is None else round(baseline_value, 4),
           "ratio": None if ratio is None else round(ratio, 3), "goal": goal, "met": met}
    if note:
        row["note"] = note
    return row


def write(name: str, results: list[dict[str, Any]], **extra: Any) -> Path:
    """Write `benchmarks/results/NAME.json` in the house format and print a table."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    doc = {"benchmark": name,
           "when": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
           "machine": machine(), "results": results, **extra}
    path = RESULTS_DIR / f"{name}.json"
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print_table(doc)
    print(f"wrote {path}")
    return path


def print_table(doc: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"{doc['benchmark']} ({doc['machine']['cores']} cores, {doc['when']})")
    for col in ("metric", "ours", "baseline", "ratio", "goal", "met"):
        t.add_column(col)
    for r in doc["results"]:
        base = r["baseline"] + ("" if r["baseline_value"] is None else f" = {r['baseline_value']}")
        met = {True: "[green]yes[/]", False: "[red]no[/]", None: ""}[r.get("met")]
        t.add_row(r["metric"], f"{r['ours']} {r.get('unit', '')}".strip(), base,
                  "" if r["ratio"] is None else f"{r['ratio']}x", r["goal"], met)
    Console().print(t)
