"""Moved to skyhub.eval.agents; kept so old imports (`skyhub.agents`) work. No logic here."""

from __future__ import annotations

from skyhub.eval.agents import (
    AGENT_HELP,
    Agent,
    NopAgent,
    OracleAgent,
    RandomAgent,
    ReferenceFn,
    Reply,
    ScriptAgent,
    load_agent,
)

__all__ = ["AGENT_HELP", "Agent", "NopAgent", "OracleAgent", "RandomAgent", "ReferenceFn", "Reply",
           "ScriptAgent", "load_agent"]
