"""`skyhub replay` on eval runs of the Python envs (a real kernel in a bubblewrap sandbox, and
the code grader): every episode replays identically, a traceback included."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from skyhub.cli.main import app
from skyhub.eval import harness
from skyhub.eval.agents import Agent
from skyhub.eval.rundir import load_records

pytestmark = pytest.mark.slow


class KernelUser(Agent):
    """Runs cells before answering: state kept across cells, an exception's traceback, then
    (python-code) the reference program in the kernel; then the reference answer."""

    name = "kernel-user"

    def act(self, messages: list[dict[str, str]], reference: Any) -> str:
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return "<python>x = 6 * 7\nprint(x, sorted({'b': 1, 'a': 2}))</python>"
        if turn == 1:
            return "<python>print(x / 0)</python>"
        answer = reference()
        code = re.search(r"```python\n(.*)\n```", answer, re.S)
        if turn == 2 and code is not None:
            return f"<python>{code.group(1)}</python>"
        return answer


@pytest.mark.parametrize("env_id", ["python-math", "python-code"])
def test_python_eval_replays_identically(tmp_path: Path, env_id: str,
                                         local_backend: str) -> None:
    out = tmp_path / "run"
    harness.run(env_id, KernelUser(), n=2, concurrency=1, env_kwargs={"backend": local_backend},
                out=out)
    records = load_records(out)
    assert not any(r["infra_error"] for r in records)
    assert all(r["turns"] >= 3 and r["outcome"] == "success" for r in records)
    assert all("ZeroDivisionError" in r["messages"][5]["content"] for r in records)
    r = CliRunner().invoke(app, ["replay", str(out)])
    assert r.exit_code == 0, r.output
    assert "2 identical, 0 differ, 0 could not replay (of 2 episodes)" in r.output
