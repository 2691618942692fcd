"""`skyhub eval ENV --harness NAME`: a harness as the run's agent, its model behind a
`skyhub gateway` (one session per episode) or any OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from scripted_gateway import lookup_then_answer, scripted_gateway

from skyhub.eval import harness as evaluate
from skyhub.eval.harness_agent import HarnessAgent


def _eval(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhub.cli.main", "eval", *args],
                          capture_output=True, text=True, timeout=300)


def test_cli_eval_with_a_harness_behind_the_gateway(tmp_path):
    with scripted_gateway(lookup_then_answer) as gw:
        out = _eval("toy-lookup", "--harness", "builtin", "--agent", "openai:scripted",
                    "--gateway", gw.url, "--n", "6", "--concurrency", "3", "--out",
                    str(tmp_path / "run"), "--no-report")
        assert out.returncode == 0, out.stderr[-3000:]
        summary = json.loads((tmp_path / "run" / "summary.json").read_text())
        assert summary["accuracy"] == 1.0 and summary["n"] == 6
        records = [json.loads(x) for x in
                   (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
        sessions = {r["meta"]["gateway_session"] for r in records}
        assert len(sessions) == 6  # one session per episode
        for sid in sessions:  # each session holds its episode's two requests, one segment
            session = gw.gateway.sessions.get(sid)
            assert len(session.records) == 2 and len(session.segments()) == 1
        # keyed: without the session's key (or the gateway's token) it is not readable
        assert httpx.get(f"{gw.url}/sessions/{sid}").status_code == 401
        assert sorted(r["index"] for r in records) == list(range(6))
        assert all(r["question"] for r in records)


def test_eval_with_a_harness_on_a_plain_openai_endpoint():
    with scripted_gateway(lookup_then_answer) as gw:
        agent = HarnessAgent("builtin", "scripted", base_url=f"{gw.url}/v1")
        summary, episodes = evaluate.run("toy-lookup", agent, n=4, concurrency=2)
    assert summary.accuracy == 1.0 and len(episodes) == 4
    assert not any("gateway_session" in e.meta for e in episodes)


def test_harness_flags_are_checked(tmp_path):
    out = _eval("toy-lookup", "--harness", "builtin", "--agent", "oracle", "--gateway",
                "http://127.0.0.1:9")
    assert out.returncode == 2 and "pass --agent openai:MODEL" in _flat(out.stderr)
    out = _eval("toy-lookup", "--agent", "oracle", "--gateway", "http://127.0.0.1:9")
    assert out.returncode == 2 and "add --harness" in _flat(out.stderr)


def _flat(text: str) -> str:
    """An error as one line (typer draws it in a box, wrapped)."""
    return " ".join(text.replace("│", " ").split())
