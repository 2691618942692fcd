"""Moved to skyhub.eval.suites; kept so old imports (`skyhub.suites`) work. No logic here."""

from __future__ import annotations

from skyhub.eval.suites import Suite, SuiteRun, get_suite, list_suites, register_suite

__all__ = ["Suite", "SuiteRun", "get_suite", "list_suites", "register_suite"]
