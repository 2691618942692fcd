"""`resolved` as SWE-bench grades it, by the official `swebench` package (the `swe` extra).

SWE-bench's eval script applies the test patch, runs the instance's tests between two marker
lines, and records the test command's own exit status after them. Its grader then reads the
log with the instance's log parser, refuses a log that shows no run or whose exit status
contradicts the parsed results (a planted conftest that prints PASSED lines, say), and calls
an instance resolved when every FAIL_TO_PASS test now passes and every PASS_TO_PASS test
still does. Here the env runs the tests itself (hostile-agent rules: after the agent's
processes are gone, test files restored) and writes the log in the same shape (`eval_log`);
the verdict is the package's own `get_eval_report` on that log, nothing re-implemented.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import MissingDependency, UsageError

from .instances import Instance

#: the parser for plain `pytest -rA` output, and what an instance gets without its own
DEFAULT_LOG_PARSER = "parse_log_pytest"


@dataclass(frozen=True)
class Grade:
    """The verdict on one test log. `status` is SWE-bench's RESOLVED_FULL, RESOLVED_PARTIAL
    or RESOLVED_NO; `tests` its per-list report (FAIL_TO_PASS, PASS_TO_PASS, ...: success
    and failure lists); `valid` False when the log shows no usable run (then not resolved,
    and `infra_failure` says whether the package blames the environment)."""

    resolved: bool
    status: str
    valid: bool
    infra_failure: bool = False
    tests: dict[str, dict[str, list[str]]] = field(default_factory=dict)

    @property
    def fail_to_pass(self) -> float:
        """The fraction of FAIL_TO_PASS tests that pass (0 for an invalid log)."""
        r = self.tests.get("FAIL_TO_PASS", {})
        total = len(r.get("success", [])) + len(r.get("failure", []))
        return len(r.get("success", [])) / total if total else 0.0


def eval_log(output: str, exit_code: int) -> str:
    """A test run's output as SWE-bench's eval script logs it: between the start and end
    markers, the exit status after them."""
    from swebench.harness.constants import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE

    return (f"{START_TEST_OUTPUT}\n{output.rstrip()}\n{END_TEST_OUTPUT}\n"
            f"{TEST_EXIT_CODE}: {exit_code}\n")


def grade(instance: Instance, log: str) -> Grade:
    """The `swebench` package's verdict on `log` (see `eval_log`) for `instance`."""
    try:
        from swebench.harness.grading import get_eval_report, get_resolution_status
        from swebench.harness.log_parsers import PARSER_REGISTRY
        from swebench.types import TestSpec
    except ImportError:
        raise MissingDependency("grading SWE-bench instances needs the swebench package: "
                                "pip install 'skyhub[swe]'") from None
    parser = instance.log_parser or DEFAULT_LOG_PARSER
    if parser not in PARSER_REGISTRY:
        raise UsageError(f"{instance.instance_id}: log_parser {parser!r} is not one of the "
                         f"swebench package's ({', '.join(sorted(PARSER_REGISTRY)[:8])}, ...)")
    spec = TestSpec(instance_id=instance.instance_id, image=instance.image_name or "",
                    eval_script_list=[], repo=instance.repo, version=instance.version or "",
                    FAIL_TO_PASS=list(instance.fail_to_pass),
                    PASS_TO_PASS=list(instance.pass_to_pass), log_parser=parser,
                    eval_type=instance.eval_type or "pass_and_fail")
    with tempfile.TemporaryDirectory(prefix="skyhub-swe-grade-") as tmp:
        path = Path(tmp) / "test_output.txt"
        path.write_text(log, encoding="utf-8")
        report: dict[str, Any] = get_eval_report(
            spec, {"instance_id": instance.instance_id, "model_patch": ""}, str(path),
            include_tests_status=True)[instance.instance_id]
    tests = report.get("tests_status") or {}
    valid = bool(report["patch_successfully_applied"])
    return Grade(resolved=bool(report["resolved"]),
                 status=get_resolution_status(tests) if valid else "RESOLVED_NO",
                 valid=valid, infra_failure=bool(report.get("infra_failure")), tests=tests)


__all__ = ["DEFAULT_LOG_PARSER", "Grade", "eval_log", "grade"]
