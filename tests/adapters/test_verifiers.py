"""skyhub envs evaluated by verifiers (the real package, pinned): its loader, its client, its
`vf-eval` CLI, against a scripted OpenAI-compatible server (the model boundary)."""

from __future__ import annotations

import json
import os
import re
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.envs.toy.env import LookupEnv
from skyhub.errors import InfraError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
from openai_server import ScriptedOpenAIServer  # noqa: E402

SNIPPET = ROOT / "docs" / "snippets" / "adapter_verifiers.py"


def _key_number(messages: list[dict[str, Any]]) -> int:
    first_user = next(m["content"] for m in messages if m["role"] == "user")
    return int(re.search(r"key k(\d+)", first_user).group(1))


def lookup_policy(*, wrong_when_odd: bool = False):
    """Plays toy-lookup the way a server with stop strings answers: the reply stops right
    before the stop string (`<lookup>k123`, no `</lookup>`), as OpenAI-compatible servers
    return it. With `wrong_when_odd`, tasks whose key number is odd get a wrong answer."""

    def reply(messages: list[dict[str, Any]]) -> str:
        last = messages[-1]["content"]
        if (m := re.search(r"<result>(\w+)</result>", last)) is not None:
            wrong = wrong_when_odd and _key_number(messages) % 2 == 1
            return "<answer>not-" + m.group(1) if wrong else "<answer>" + m.group(1)
        return f"<lookup>k{_key_number(messages)}"

    return reply




try:  # CI installs it (scripts/setup.sh) and sets SKYHUB_REQUIRE_ADAPTERS=1: never a skip
    import openai
    import verifiers as vf
except ImportError as e:
    if os.environ.get("SKYHUB_REQUIRE_ADAPTERS") == "1":
        raise
    pytest.skip(f"{e}: pip install 'skyhub[verifiers]'", allow_module_level=True)


def _evaluate(env: Any, server: ScriptedOpenAIServer) -> list[dict[str, Any]]:
    client = vf.OpenAIChatCompletionsClient(
        openai.AsyncOpenAI(base_url=server.base_url, api_key="test"))
    return env.evaluate_sync(client, model="scripted")["outputs"]


def test_vf_load_environment_plays_toy_lookup_and_scores_with_the_env_reward():
    env = vf.load_environment("skyhub.adapters.verifiers", env="toy-lookup", num_examples=6)
    assert isinstance(env, vf.MultiTurnEnv)
    with ScriptedOpenAIServer(lookup_policy(wrong_when_odd=True)) as server:
        outputs = _evaluate(env, server)
        bodies = server.bodies
    assert len(outputs) == 6
    probe = skyhub.make("toy-lookup")
    for out in outputs:
        messages = out["prompt"] + out["completion"]
        odd = _key_number([m if isinstance(m, dict) else m.model_dump() for m in messages]) % 2
        assert out["error"] is None
        assert out["reward"] == (0.0 if odd else 1.0)  # the env's verdict, not verifiers'
        assert out["metrics"]["infra_error"] == 0.0
        assert out["metrics"]["num_turns"] == 2.0
        assert out["stop_condition"] == "has_final_env_response"
    # the env's system prompt and stop strings reached the model; the second turn carries the
    # env's observation as the user message
    assert all(b["messages"][0] == {"role": "system", "content": probe.system_prompt}
               for b in bodies)
    assert all(b["stop"] == list(LookupEnv.stop_strings) for b in bodies)
    assert sum("<result>" in b["messages"][-1]["content"] for b in bodies) == 6
    probe.close()


class FlakyLookupEnv(LookupEnv):
    """toy-lookup whose infrastructure fails on some tasks: key number divisible by 3 raises
    (a crashed backend), key number = 1 mod 3 reports `infra_error` in its info."""

    def step(self, action: str):
        k = int(self.task.meta["key"][1:])
        if k % 3 == 0:
            raise InfraError("the table server went away")
        if k % 3 == 1:
            self.next_turn()
            return "", 0.0, False, True, self.make_info("error", infra_error=True,
                                                        error="lost the table")
        return super().step(action)


def test_infra_errors_end_the_rollout_as_vf_infra_errors(tmp_env_id):
    skyhub.register(tmp_env_id, FlakyLookupEnv)
    env = vf.load_environment("skyhub.adapters.verifiers", env=tmp_env_id, num_examples=9)
    with ScriptedOpenAIServer(lookup_policy()) as server:
        outputs = _evaluate(env, server)
    kinds = set()
    for out in outputs:
        k = _key_number([m if isinstance(m, dict) else m.model_dump() for m in out["prompt"]])
        kinds.add(k % 3)
        if k % 3 == 2:
            assert out["error"] is None and out["reward"] == 1.0
            assert out["metrics"]["infra_error"] == 0.0
        else:  # marked for dropping, never a plain 0 reward
            assert out["error"]["error"] == "InfraError"
            assert ("went away" if k % 3 == 0 else "lost the table") in out["error"]["message"]
            assert out["stop_condition"] == "has_error"
            assert out["metrics"]["infra_error"] == 1.0
    assert kinds == {0, 1, 2}  # the 9 tasks covered every case


@pytest.mark.slow
def test_vf_eval_cli_evaluates_a_skyhub_env_id(tmp_path):
    vf_eval = Path(sys.executable).parent / "vf-eval"
    with ScriptedOpenAIServer(lookup_policy()) as server:
        proc = subprocess.run(
            [str(vf_eval), "skyhub.adapters.verifiers", "-a",
             json.dumps({"env": "toy-lookup", "num_examples": 3}), "-m", "scripted",
             "-b", server.base_url, "-k", "SCRIPTED_KEY", "-n", "3", "-r", "1",
             "--disable-tui", "--disable-env-server", "--save-results", "-o", str(tmp_path)],
            capture_output=True, text=True, timeout=240,
            env={**os.environ, "SCRIPTED_KEY": "test"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    (results,) = tmp_path.glob("evals/*/*/results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert [r["reward"] for r in rows] == [1.0, 1.0, 1.0]
    assert all(r["metrics"]["infra_error"] == 0.0 for r in rows)


def test_readme_snippet_runs(monkeypatch, capsys):
    with ScriptedOpenAIServer(lookup_policy()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "test")
        monkeypatch.setenv("MODEL", "scripted")
        runpy.run_path(str(SNIPPET), run_name="__main__")
    assert capsys.readouterr().out.splitlines()[-4:] == ["1.0 0.0 None"] * 4
