"""Moved to skyhub.eval.report (with skyhub.eval.metrics, .breakdown, .render and .plots); kept so
old imports (`skyhub.report`) work. No logic here.
"""

from __future__ import annotations

from skyhub.eval.breakdown import (
    MAX_SLICE_VALUES,
    SLICE_KEYS,
    error_category,
    error_taxonomy,
    example_failures,
    last_assistant_message,
    slice_keys,
    slice_table,
    turns_histogram,
)
from skyhub.eval.metrics import headline, is_infra, is_success
from skyhub.eval.plots import (
    PLOT_SLICE_KEYS,
    PLOT_SLICE_TOP,
    plot_rewards,
    plot_slices,
    plot_suite,
    plot_turns,
)
from skyhub.eval.render import Block, render_html, render_markdown
from skyhub.eval.report import accuracy_line, write_report, write_suite_report
from skyhub.eval.suites import Suite

__all__ = [
    "MAX_SLICE_VALUES",
    "PLOT_SLICE_KEYS",
    "PLOT_SLICE_TOP",
    "SLICE_KEYS",
    "Block",
    "Suite",
    "accuracy_line",
    "error_category",
    "error_taxonomy",
    "example_failures",
    "headline",
    "is_infra",
    "is_success",
    "last_assistant_message",
    "plot_rewards",
    "plot_slices",
    "plot_suite",
    "plot_turns",
    "render_html",
    "render_markdown",
    "slice_keys",
    "slice_table",
    "turns_histogram",
    "write_report",
    "write_suite_report",
]
