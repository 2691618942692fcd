"""A report as a list of blocks, rendered twice: to markdown and to self-contained HTML, so the
two can never disagree; and the number formats reports use ("n/a" for a missing number).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from skyhub.eval.metrics import number

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


def fmt(x: Any, digits: int = 3) -> str:
    """A number with `digits` decimals; "n/a" where there is none (NaN, null)."""
    v = number(x)
    return "n/a" if v is None else f"{v:.{digits}f}"


def fmt_ci(ci: Sequence[float], digits: int = 3) -> str:
    """An interval as "[lo, hi]"; "n/a" where an end is missing."""
    lo, hi = (number(c) for c in ci)
    return "n/a" if lo is None or hi is None else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def fmt_int(x: Any) -> str:
    """A count that may be unknown (None)."""
    return "unknown" if x is None else str(int(x))


def fmt_pct(x: Any) -> str:
    """A percentage cell of a suite table; "—" where there is no number."""
    v = number(x)
    return "—" if v is None else f"{v:.1f}"


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



def write_pages(out_dir: Path, blocks: list[Block], title: str,
                plots: list[Path]) -> dict[str, Any]:
    """Write report.md and report.html into `out_dir`; return their paths with `plots`."""
    md, page = out_dir / "report.md", out_dir / "report.html"
    md.write_text(render_markdown(blocks), encoding="utf-8")
    page.write_text(render_html(blocks, title), encoding="utf-8")
    return {"markdown": md, "html": page, "plots": plots}


__all__ = ["Block", "fmt", "fmt_ci", "fmt_int", "fmt_pct", "render_html", "render_markdown",
           "write_pages"]
