"""Moved to skyhub.eval.harness, skyhub.eval.metrics and skyhub.eval.rundir; kept so old imports
(`skyhub.evaluate`) work. No logic here.
"""

from __future__ import annotations

from skyhub.eval.agents import Agent, Reply
from skyhub.eval.harness import EvalEpisode, run
from skyhub.eval.metrics import Summary, ci95, mean_ci95, no_score_message, summarise, wilson
from skyhub.eval.rundir import RunDir, dumps, finite, load_records

__all__ = ["Agent", "EvalEpisode", "Reply", "RunDir", "Summary", "ci95", "dumps", "finite",
           "load_records", "mean_ci95", "no_score_message", "run", "summarise", "wilson"]
