"""Moved to skyhub.eval.openai_agent; kept so old imports (`skyhub.openai_agent`) work. No logic
here.
"""

from __future__ import annotations

from skyhub.eval.openai_agent import DEFAULT_BASE_URL, OpenAIAgent

__all__ = ["DEFAULT_BASE_URL", "OpenAIAgent"]
