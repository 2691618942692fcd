"""Reports for `skyhub eval` run directories: markdown, self-contained HTML and PNG plots.

    paths = skyhub.report.write_report("runs/spider-dev")   # report.md, report.html, plots/

Every number is recomputed from `episodes.jsonl` (never copied from `summary.json`), so a
resumed or hand-edited run is reported as it stands, with the definitions of the run-directory
contract: accuracy is the success fraction among episodes *without* an infra error, mean reward
is over the same episodes, and infra errors are counted apart (never scored 0). The report is
one list of blocks rendered twice (markdown and HTML), so the two can never disagree.

Plots need matplotlib (the `eval` extra). It is imported lazily with the Agg backend; without
it the report is still written and says how to get the plots.
"""

from __future__ import annotations

import html
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from skyhub.evaluate import ci95, load_records, mean_ci95
from skyhub.suites import Suite

# meta keys worth a per-value table, in the order their tables appear
SLICE_KEYS = ("dataset", "split", "difficulty", "hardness", "level", "category", "type",
              "source", "db_id")  # db_id last: the longest table
# the slice plotted in plots/slices.png: the first of these that slices the run
PLOT_SLICE_KEYS = ("difficulty", "hardness", "level", "dataset", "db_id", "category", "type",
                   "split", "source")
MAX_SLICE_VALUES = 50
PLOT_SLICE_TOP = 20
# difficulty-like values sort in this order, before any other value
_DIFFICULTY_ORDER = ("easy", "medium", "hard", "extra", "extra hard", "extra_hard")
_NO_MATPLOTLIB = "Plots need matplotlib: `pip install 'skyhub[eval]'`."
_CSS = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; max-width: 1000px;
       margin: 2em auto; padding: 0 1em; color: #222; line-height: 1.45; }
h1 { border-bottom: 2px solid #ddd; padding-bottom: .3em; }
h2 { margin-top: 1.8em; border-bottom: 1px solid #eee; }
table { border-collapse: collapse; margin: .8em 0; font-size: 0.92em; }
th, td { border: 1px solid #ccc; padding: .3em .7em; text-align: left; }
th { background: #f4f4f4; }
tr:nth-child(even) td { background: #fafafa; }
pre { background: #f6f8fa; padding: .7em; overflow-x: auto; white-space: pre-wrap; }
.headline { font-size: 1.25em; }
img { max-width: 100%; border: 1px solid #eee; margin: .5em 0; }
code { background: #f3f3f3; padding: 0 .2em; }
"""


# -- statistics ---------------------------------------------------------------------------------

def is_infra(rec: dict[str, Any]) -> bool:
    return bool(rec.get("infra_error"))


def is_success(rec: dict[str, Any]) -> bool:
    return rec.get("outcome") == "success"


def _num(x: Any) -> float | None:
    """A finite float, or None for anything else (null, missing, NaN, strings)."""
    if isinstance(x, bool) or not isinstance(x, int | float):
        return None
    return float(x) if math.isfinite(x) else None


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else float("nan")


def headline(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The run's key numbers: accuracy (success among non-infra episodes) with its 95% interval
    over the 0/1 success values, mean reward over non-infra episodes, infra errors, mean turns
    (all episodes, as in `summary.json`), token totals (None when no episode knows them) and
    mean latency."""
    scored = [r for r in records if not is_infra(r)]
    wins = [1.0 if is_success(r) else 0.0 for r in scored]
    rewards = [x for x in (_num(r.get("reward")) for r in scored) if x is not None]
    turns = [x for x in (_num(r.get("turns")) for r in records) if x is not None]
    latency = [x for x in (_num(r.get("latency_s")) for r in records) if x is not None]
    agent_s = [x for x in (_num(r.get("agent_s")) for r in records) if x is not None]
    tokens: dict[str, int | None] = {}
    tokens_known = 0
    for kind in ("prompt", "completion"):
        known = [_num((r.get("tokens") or {}).get(kind)) for r in records]
        known = [x for x in known if x is not None]
        tokens[kind] = int(sum(known)) if known else None
        tokens_known = max(tokens_known, len(known))
    return {
        "episodes": len(records),
        "scored": len(scored),
        "successes": int(sum(wins)),
        "accuracy": _mean(wins),
        "ci95": ci95(wins),
        "mean_reward": _mean(rewards),
        "mean_reward_ci95": mean_ci95(rewards),
        "infra_errors": len(records) - len(scored),
        "mean_turns": _mean(turns),
        "tokens": tokens,
        "tokens_known": tokens_known,
        "mean_latency_s": _mean(latency),
        "mean_agent_s": _mean(agent_s),
    }


def _meta_value(rec: dict[str, Any], key: str) -> str | None:
    value = (rec.get("meta") or {}).get(key)
    return None if value is None else str(value)


def _sort_key(value: str, n: int, key: str) -> tuple[Any, ...]:
    """Difficulty words first in their natural order; `level` values by their number; else the
    largest slices first."""
    low = value.lower()
    if low in _DIFFICULTY_ORDER:
        return (0, _DIFFICULTY_ORDER.index(low), 0, ())
    if key == "level":
        digits = re.findall(r"\d+", value)
        if digits:
            return (1, int(digits[0]), 0, _natural(value))
    return (2, 0, -n, _natural(value))


def _natural(value: str) -> tuple[Any, ...]:
    """Natural order: db2 before db10."""
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", value.lower()))


def slice_table(records: Sequence[dict[str, Any]], key: str) -> list[dict[str, Any]]:
    """One row per value of `meta[key]`: {value, n, accuracy, ci95, mean_reward, infra_errors}.
    `n` counts every episode with that value (infra errors included; accuracy and mean reward
    leave them out). Episodes without the key form a "(missing)" row when others have it."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        value = _meta_value(r, key)
        groups["(missing)" if value is None else value].append(r)
    if set(groups) == {"(missing)"}:
        return []
    rows = []
    for value, recs in groups.items():
        h = headline(recs)
        rows.append({"value": value, "n": h["episodes"], "accuracy": h["accuracy"],
                     "ci95": h["ci95"], "mean_reward": h["mean_reward"],
                     "infra_errors": h["infra_errors"]})
    rows.sort(key=lambda row: (row["value"] == "(missing)",
                               _sort_key(row["value"], row["n"], key)))
    return rows


def slice_keys(records: Sequence[dict[str, Any]]) -> list[str]:
    """The meta keys of SLICE_KEYS that split the run into 2..50 values (one value says
    nothing; hundreds are a task id, not a slice)."""
    keys = []
    for key in SLICE_KEYS:
        values = {v for v in (_meta_value(r, key) for r in records) if v is not None}
        if 2 <= len(values) <= MAX_SLICE_VALUES:
            keys.append(key)
    return keys


def _normalise_error(error: Any) -> str:
    """The first line of an error, with addresses and long numbers (ids, ports, timestamps)
    blanked so that the same failure groups together; short codes like HTTP 503 stay."""
    text = str(error or "").strip().splitlines()[0] if str(error or "").strip() else ""
    text = re.sub(r"0x[0-9a-fA-F]+", "0x…", text)
    text = re.sub(r"[0-9a-fA-F]{8}-[0-9a-fA-F-]{27,}", "<id>", text)
    text = re.sub(r"\d{4,}", "N", text)
    text = re.sub(r"\s+", " ", text).strip()
    return text[:60].rstrip()


def error_category(rec: dict[str, Any]) -> str:
    """Why an episode ended the way it did, from the generic record fields and, where an env
    provides them, `final_info["format_violations"]` / `final_info["solution_error"]`."""
    info = rec.get("final_info") or {}
    if not isinstance(info, dict):
        info = {}
    if is_infra(rec):
        source = rec.get("error_source") or "env"
        detail = _normalise_error(rec.get("error"))
        return f"infra: {source}: {detail}" if detail else f"infra: {source}"
    if is_success(rec):
        return "correct"
    if info.get("format_violations"):
        return "format violation"
    if info.get("solution_error"):
        return "solution error"
    if rec.get("truncated"):
        return "out of turns"
    if rec.get("outcome") == "failure":
        return "wrong answer"
    return str(rec.get("outcome") or "unknown")


def error_taxonomy(records: Iterable[dict[str, Any]]) -> list[tuple[str, int]]:
    """(category, count) for every category of `error_category`, largest first."""
    counts = Counter(error_category(r) for r in records)
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def turns_histogram(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows {turns, episodes, infra_errors, successes, success_rate}; the rate is over the
    non-infra episodes that used that many turns."""
    groups: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[int(_num(r.get("turns")) or 0)].append(r)
    rows = []
    for turns in sorted(groups):
        recs = groups[turns]
        scored = [r for r in recs if not is_infra(r)]
        wins = sum(is_success(r) for r in scored)
        rows.append({"turns": turns, "episodes": len(recs), "infra_errors": len(recs) - len(scored),
                     "successes": wins, "success_rate": wins / len(scored) if scored else None})
    return rows


def last_assistant_message(rec: dict[str, Any]) -> str:
    for m in reversed(rec.get("messages") or []):
        if isinstance(m, dict) and m.get("role") == "assistant":
            return str(m.get("content") or "")
    return ""


def example_failures(records: Sequence[dict[str, Any]], k: int = 5,
                     width: int = 300) -> list[dict[str, Any]]:
    """Up to `k` scored failures (first by index): the agent's fault, not the infra's."""
    out = []
    for r in records:
        if is_infra(r) or is_success(r):
            continue
        text = last_assistant_message(r)
        if len(text) > width:
            text = text[:width] + "…"
        out.append({"index": r.get("index"), "task_id": r.get("task_id"),
                    "category": error_category(r), "message": text})
        if len(out) >= k:
            break
    return out


# -- formatting ---------------------------------------------------------------------------------

def _fmt(x: Any, digits: int = 3) -> str:
    v = _num(x)
    return "n/a" if v is None else f"{v:.{digits}f}"


def _fmt_ci(ci: Sequence[float], digits: int = 3) -> str:
    lo, hi = (_num(c) for c in ci)
    return "n/a" if lo is None or hi is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _fmt_int(x: Any) -> str:
    return "unknown" if x is None else str(int(x))


def accuracy_line(h: dict[str, Any]) -> str:
    """The one line to read: "accuracy 0.812 [0.776, 0.843], n=497 scored, infra errors 3"."""
    return (f"accuracy {_fmt(h['accuracy'])} {_fmt_ci(h['ci95'])}, n={h['scored']} scored, "
            f"infra errors {h['infra_errors']}")


# A report is a list of blocks, each rendered to markdown and to HTML:
#   ("h1"|"h2", text) ("p", text) ("strong", text) ("table", headers, rows)
#   ("img", relative path, alt) ("pre", caption, text)
Block = tuple[Any, ...]


def _md_cell(x: Any) -> str:
    return str(x).replace("|", "\\|").replace("\n", " ")


def _fence(text: str) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def render_markdown(blocks: Sequence[Block]) -> str:
    out: list[str] = []
    for b in blocks:
        kind = b[0]
        if kind == "h1":
            out.append(f"# {b[1]}")
        elif kind == "h2":
            out.append(f"## {b[1]}")
        elif kind == "p":
            out.append(b[1])
        elif kind == "strong":
            out.append(f"**{b[1]}**")
        elif kind == "table":
            headers, rows = b[1], b[2]
            lines = ["| " + " | ".join(_md_cell(h) for h in headers) + " |",
                     "|" + "|".join("---" for _ in headers) + "|"]
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in rows]
            out.append("\n".join(lines))
        elif kind == "img":
            out.append(f"![{b[2]}]({b[1]})")
        elif kind == "pre":
            fence = _fence(b[2])
            out.append(f"{b[1]}\n\n{fence}\n{b[2]}\n{fence}")
    return "\n\n".join(out) + "\n"


def _inline_html(text: str) -> str:
    """Escape, then turn markdown `code` spans into <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def render_html(blocks: Sequence[Block], title: str) -> str:
    out = ["<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
           f"<title>{html.escape(title)}</title>", f"<style>{_CSS}</style></head><body>"]
    for b in blocks:
        kind = b[0]
        if kind in ("h1", "h2"):
            out.append(f"<{kind}>{html.escape(b[1])}</{kind}>")
        elif kind == "p":
            out.append(f"<p>{_inline_html(b[1])}</p>")
        elif kind == "strong":
            out.append(f'<p class="headline"><strong>{_inline_html(b[1])}</strong></p>')
        elif kind == "table":
            head = "".join(f"<th>{html.escape(str(h))}</th>" for h in b[1])
            body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in row)
                           + "</tr>" for row in b[2])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
        elif kind == "img":
            out.append(f'<img src="{html.escape(b[1])}" alt="{html.escape(b[2])}">')
        elif kind == "pre":
            out.append(f"<p>{_inline_html(b[1])}</p><pre>{html.escape(b[2])}</pre>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def _write(out_dir: Path, blocks: list[Block], title: str,
           plots: list[Path]) -> dict[str, Any]:
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(render_markdown(blocks), encoding="utf-8")
    page.write_text(render_html(blocks, title), encoding="utf-8")
    return {"markdown": md, "html": page, "plots": plots}


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


# -- plots --------------------------------------------------------------------------------------

def _pyplot() -> Any:
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
        acc = _num(row["accuracy"])
        lo, hi = (_num(c) for c in row["ci95"])
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
    rewards = [x for x in (_num(r.get("reward")) for r in records if not is_infra(r))
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


def _plot_key(records: Sequence[dict[str, Any]]) -> str | None:
    keys = slice_keys(records)
    return next((k for k in PLOT_SLICE_KEYS if k in keys), None)


# -- the run report -----------------------------------------------------------------------------

def _config_line(run: dict[str, Any], records: Sequence[dict[str, Any]]) -> str:
    first = records[0] if records else {}
    parts = [f"env `{run.get('env_id') or first.get('env_id') or '?'}`",
             f"agent `{run.get('agent') or first.get('agent') or '?'}`"]
    for key in ("seed", "max_turns", "env_kwargs", "started", "skyhub_version"):
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
    run = _read_json(run_dir / "run.json")
    summary = _read_json(run_dir / "summary.json")
    first = records[0] if records else {}
    env_id = run.get("env_id") or first.get("env_id") or summary.get("env_id") or run_dir.name
    agent = run.get("agent") or first.get("agent") or summary.get("agent") or "?"
    title = title or f"{env_id} — {agent}"
    h = headline(records)

    blocks: list[Block] = [("h1", title), ("strong", accuracy_line(h)),
                           ("p", _config_line(run, records))]
    requested = _num(run.get("n")) or _num(summary.get("requested"))
    if requested is not None and len(records) < requested:
        blocks.append(("p", f"Incomplete run: {len(records)} of {int(requested)} requested "
                            "episodes recorded (resume it with the same command)."))
    if not records:
        blocks.append(("p", "No episodes recorded yet."))

    tokens = h["tokens"]
    token_note = "" if h["tokens_known"] in (0, h["episodes"]) else \
        f" (known for {h['tokens_known']} of {h['episodes']} episodes)"
    rows = [("episodes", h["episodes"]), ("scored (non-infra)", h["scored"]),
            ("accuracy", _fmt(h["accuracy"])), ("95% CI", _fmt_ci(h["ci95"])),
            ("mean reward", _fmt(h["mean_reward"])),
            ("mean reward 95% CI", _fmt_ci(h["mean_reward_ci95"])),
            ("infra errors", h["infra_errors"]),
            ("mean turns", _fmt(h["mean_turns"], 2)),
            ("tokens prompt", _fmt_int(tokens["prompt"]) + token_note),
            ("tokens completion", _fmt_int(tokens["completion"]) + token_note),
            ("mean latency s", _fmt(h["mean_latency_s"], 2)),
            ("mean agent wait s", _fmt(h["mean_agent_s"], 2))]
    if _num(summary.get("seconds")) is not None:
        rows.append(("wall time s (summary.json)", _fmt(summary["seconds"], 1)))
    blocks += [("h2", "Headline"), ("table", ["metric", "value"], rows),
               ("p", "Accuracy: success fraction among episodes without an infra error; its "
                     "95% CI is Wilson's interval over the successes. Mean reward is over the "
                     "same episodes, its 95% CI by the normal approximation; infra errors "
                     "are counted apart, never scored 0.")]

    for key in slice_keys(records):
        blocks += [("h2", f"By {key}"), ("table", ["value", "episodes", "accuracy", "95% CI",
                                                    "mean reward", "infra errors"],
                                         [[r["value"], r["n"], _fmt(r["accuracy"]),
                                           _fmt_ci(r["ci95"]), _fmt(r["mean_reward"]),
                                           r["infra_errors"]]
                                          for r in slice_table(records, key)])]

    if records:
        blocks += [("h2", "Turns used"),
                   ("table", ["turns", "episodes", "successes", "success rate", "infra errors"],
                    [[r["turns"], r["episodes"], r["successes"], _fmt(r["success_rate"]),
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
        plt = _pyplot()
        blocks.append(("h2", "Plots"))
        if plt is None:
            blocks.append(("p", _NO_MATPLOTLIB))
        else:
            plot_dir = run_dir / "plots"
            plot_dir.mkdir(exist_ok=True)
            key = _plot_key(records)
            if key is not None:
                plots.append(plot_slices(plt, records, key, plot_dir / "slices.png"))
            plots.append(plot_turns(plt, records, plot_dir / "turns.png"))
            plots.append(plot_rewards(plt, records, plot_dir / "reward.png"))
            blocks += [("img", f"plots/{p.name}", p.stem) for p in plots]
    return _write(run_dir, blocks, title, plots)


# -- the suite report ---------------------------------------------------------------------------

def _pct(x: Any) -> str:
    v = _num(x)
    return "—" if v is None else f"{v:.1f}"


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
        run = _read_json(Path(path) / "run.json")
        details.append([spec.name, str(path), run.get("env_id") or spec.env_id, h["episodes"],
                        h["scored"], _fmt(h["accuracy"]), _fmt_ci(h["ci95"]),
                        h["infra_errors"]])
        kwargs = run.get("env_kwargs")
        expected = dict(spec.kwargs)
        if spec.max_turns is not None:  # the suite passes its turn budget as an env kwarg
            expected["max_turns"] = spec.max_turns
        if isinstance(kwargs, dict) and kwargs != expected:
            notes.append(f"{spec.name}: ran with env_kwargs {json.dumps(kwargs, sort_keys=True)}"
                         f" (the suite's: {json.dumps(expected, sort_keys=True)})")
        requested = _num(run.get("n"))
        if requested is not None and h["episodes"] < requested:
            notes.append(f"{spec.name}: incomplete, {h['episodes']} of {int(requested)} "
                         "episodes recorded")

    def cell(name: str) -> str:
        h = ours.get(name)
        if h is None:
            return "no data"
        acc, lo, hi = _num(h["accuracy"]), *(_num(c) for c in h["ci95"])
        if acc is None:
            return f"n/a (n={h['scored']})"
        half = f" ± {100 * (hi - lo) / 2:.1f}" if lo is not None and hi is not None else ""
        return f"{100 * acc:.1f}{half} (n={h['scored']})"

    rows = [[model] + [_pct(cols.get(n)) for n in names] for model, cols in suite.reference.items()]
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
    plt = _pyplot()
    if plt is None:
        blocks.append(("p", _NO_MATPLOTLIB))
    else:
        plot_dir = out_dir / "plots"
        plot_dir.mkdir(exist_ok=True)
        plots.append(plot_suite(plt, suite, ours, label, plot_dir / "suite.png"))
        blocks += [("h2", "Plot"), ("img", "plots/suite.png", "suite")]
    return _write(out_dir, blocks, f"Suite {suite.name} — {label}", plots)


def plot_suite(plt: Any, suite: Suite, ours: dict[str, dict[str, Any]], label: str,
               png: Path) -> Path:
    """Grouped bars: one group per column, one bar per reference model and one for this run
    (with its CI); a missing number leaves a gap."""
    names = [r.name for r in suite.runs]
    series = [(model, [_num(cols.get(n)) for n in names], None)
              for model, cols in suite.reference.items()]
    vals, lows, highs = [], [], []
    for n in names:
        h = ours.get(n)
        acc = _num(h["accuracy"]) if h else None
        lo, hi = (_num(c) for c in h["ci95"]) if h else (None, None)
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


__all__ = ["error_taxonomy", "headline", "slice_table", "write_report", "write_suite_report"]
