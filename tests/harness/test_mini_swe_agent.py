"""The `mini-swe-agent` harness: the real package (its DefaultAgent, its shipped prompts, its
litellm model) through a real gateway with a scripted model, acting in terminal-synth and
Harbor episodes: each command is a turn of the env, its submit is the env's `done`, and the
env's verifier gives the reward."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
pytest.importorskip("minisweagent", reason="pip install 'skyhub[harness]'")
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from scripted_gateway import scripted_gateway

import skyhub
from skyhub.errors import UsageError
from skyhub.harness import Endpoint, load_harness, run_episode
from skyhub.harness.mini_swe_agent import SUBMIT_MARKER, command_result
from skyhub.shell.protocol import parse

SUBMIT = f"echo {SUBMIT_MARKER}"
HARBOR_TASKS = Path(__file__).parents[1] / "envs" / "harbor" / "tasks"


def _block(command: str) -> str:
    """A reply in mini-swe-agent's text format: a THOUGHT, then exactly one command block."""
    return f"THOUGHT: the next step.\n\n```mswea_bash_command\n{command}\n```"


def _turn(prompt: str) -> int:
    """How many replies the model has given in this conversation (the prompt ends with the
    generation prompt, an assistant turn of its own)."""
    return prompt.count("<|assistant|>") - 1


def _script(plans: dict[str, list[str]], reply: Callable[[str], str] = _block
            ) -> Callable[[str], str]:
    """A model that plays, for the task whose text is in the prompt, its commands in order."""
    def answer(prompt: str) -> str:
        task = next(t for t in plans if t in prompt)
        commands = plans[task]
        return reply(commands[min(_turn(prompt), len(commands) - 1)])
    return answer


def _commands(episode) -> list[str]:
    """The commands the env ran, one per turn, as the harness sent them (in a subshell)."""
    out = []
    for action in episode.actions:
        act = parse(action)
        if act.commands:
            assert act.commands[0].startswith("(\n") and act.commands[0].endswith("\n)")
            out.append(act.commands[0][2:-2])
    return out


@pytest.fixture(scope="module")
def synth(backend: str) -> Iterator[skyhub.TextEnv]:
    env = skyhub.make("terminal-synth", backend=backend, seed=0, n_tasks=6, max_turns=8)
    yield env
    env.close()


def test_mini_swe_agent_solves_tasks_and_the_env_scores_them(synth):
    tasks = synth.tasks[:3]
    plans = {t.prompt: ["ls /work", t.answer.strip(), SUBMIT] for t in tasks}
    with scripted_gateway(_script(plans)) as gw:
        harness = load_harness("mini-swe-agent")
        for task in tasks:
            session, endpoint = gw.session()
            ep = run_episode(harness, synth, endpoint, options={"task_id": task.id})
            assert (ep.total_reward, ep.terminated, ep.infra_error) == (1.0, True, False), \
                ep.final_info
            assert ep.final_info["ended_by"] == "done"
            # every command the model gave is one turn of the env, then the env's `done`
            assert _commands(ep) == plans[task.prompt]
            assert ep.actions[-1] == "<done/>" and len(ep.actions) == 4
            # one request per command; mini-swe-agent re-sends its whole conversation, so the
            # gateway merges the requests into one segment holding every sampled token
            assert len(session.records) == 3
            (seg,) = session.segments()
            sampled = [t for t, m in zip(seg.token_ids, seg.mask, strict=True) if m]
            assert sampled == [i for r in session.records for i in r.completion_ids]
            # the package's own prompts: its system template and the task in its instance one
            first = session.records[0].messages
            assert [m["role"] for m in first] == ["system", "user"]
            assert "mswea_bash_command" in first[0]["content"]
            assert first[1]["content"].startswith(f"Please solve this issue: {task.prompt}")


def test_a_submit_without_the_work_scores_zero(synth):
    task = synth.tasks[3]
    with scripted_gateway(_script({task.prompt: [SUBMIT]})) as gw:
        session, endpoint = gw.session()
        ep = run_episode(load_harness("mini-swe-agent"), synth, endpoint,
                         options={"task_id": task.id})
    assert (ep.total_reward, ep.terminated, ep.infra_error) == (0.0, True, False)
    assert ep.final_info["outcome"] == "failure"
    assert _commands(ep) == [SUBMIT] and ep.actions[-1] == "<done/>"
    assert len(session.records) == 1


def test_each_command_runs_in_a_fresh_subshell_and_its_output_and_status_reach_the_agent(
        synth):
    task = synth.tasks[0]
    plans = {task.prompt: ["cd /tmp && echo hello && exit 3", "pwd", SUBMIT]}
    with scripted_gateway(_script(plans)) as gw:
        _, endpoint = gw.session()
        ep = run_episode(load_harness("mini-swe-agent"), synth, endpoint,
                         options={"task_id": task.id})
        last = gw.engine.prompts[-1]
    assert ep.terminated and _commands(ep) == plans[task.prompt]
    # mini-swe-agent's observation template, filled from the env's turn: the exit status, the
    # output; `cd` and `exit` stayed in their subshell, as its prompt promises
    assert "<returncode>3</returncode>\n<output>\nhello\n</output>" in last
    assert "<returncode>0</returncode>\n<output>\n/work\n</output>" in last


def test_the_envs_turn_budget_stops_the_agent(synth):
    task = synth.tasks[0]
    with scripted_gateway(_script({task.prompt: ["ls", "ls /work", "true"]})) as gw:
        session, endpoint = gw.session()
        synth.max_turns = 2
        try:
            ep = run_episode(load_harness("mini-swe-agent"), synth, endpoint,
                             options={"task_id": task.id})
        finally:
            synth.max_turns = 8
    # the second command used the last turn: the env ended (and scored) the episode, and the
    # agent asked the model nothing more
    assert _commands(ep) == ["ls", "ls /work"] and len(session.records) == 2
    assert ep.truncated and not ep.terminated and ep.final_info["ended_by"] == "max_turns"
    assert ep.total_reward == 0.0 and not ep.infra_error


def test_format_errors_cost_no_turn_and_the_verifier_still_decides(synth):
    task = synth.tasks[0]
    with scripted_gateway(_script({task.prompt: ["no command here"]}, reply=str)) as gw:
        session, endpoint = gw.session()
        ep = run_episode(load_harness("mini-swe-agent"), synth, endpoint,
                         options={"task_id": task.id})
        last = gw.engine.prompts[-1]
    # mini-swe-agent answered each malformed reply itself and gave up after 3 in a row; the
    # env only saw `done`
    assert "Format error:" in last and len(session.records) == 3
    assert ep.actions == ["<done/>"] and ep.terminated and ep.total_reward == 0.0


def test_native_tool_calls_with_its_mini_config(synth):
    task = synth.tasks[1]

    def call(command: str) -> str:
        return ("Running it.<tool_call>" + json.dumps(
            {"name": "bash", "arguments": {"command": command}}) + "</tool_call>")

    plans = {task.prompt: [task.answer.strip(), SUBMIT]}
    with scripted_gateway(_script(plans, reply=call)) as gw:
        session, endpoint = gw.session()
        ep = run_episode(load_harness("mini-swe-agent", config="mini", model_class="litellm"),
                         synth, endpoint, options={"task_id": task.id})
    assert (ep.total_reward, ep.terminated) == (1.0, True) and _commands(ep) == plans[task.prompt]
    assert session.records[0].tools[0]["function"]["name"] == "bash"
    assert len(session.records) == 2 and len(session.segments()) == 1


def test_a_dead_endpoint_is_an_infra_error(synth, monkeypatch):
    monkeypatch.setenv("MSWEA_MODEL_RETRY_STOP_AFTER_ATTEMPT", "1")  # the package's setting
    ep = run_episode(load_harness("mini-swe-agent", request_timeout=5.0), synth,
                     Endpoint("http://127.0.0.1:9/v1", "k", "m"), seed=0)
    assert ep.infra_error and ep.error_source == "agent"


@pytest.mark.docker
@pytest.mark.slow
def test_a_harbor_task_of_two_steps_gets_one_run_per_step(docker_daemon):
    steps = HARBOR_TASKS / "multi-step" / "steps"
    plans = {(d / "instruction.md").read_text().strip()[:40]: [
        f"bash <<'SOLUTION'\n{(d / 'solution' / 'solve.sh').read_text()}SOLUTION", SUBMIT]
        for d in (steps / "write-config", steps / "extend-config")}
    env = skyhub.make("harbor", data_dir=HARBOR_TASKS / "multi-step")
    try:
        with scripted_gateway(_script(plans)) as gw:
            session, endpoint = gw.session()
            ep = run_episode(load_harness("mini-swe-agent"), env, endpoint, seed=0)
    finally:
        env.close()
    assert (ep.total_reward, ep.terminated, ep.infra_error) == (1.0, True, False), \
        ep.final_info
    assert [a for a in ep.actions if a == "<done/>"] == ["<done/>"] * 2
    assert len(_commands(ep)) == 4 and len(session.records) == 4
    assert len(session.segments()) == 2  # a new conversation per step
    assert re.search(r"\[step 2 of 2: extend-config\]",
                     session.records[2].messages[1]["content"])


def test_it_plays_shell_envs_only():
    env = skyhub.make("toy-lookup")
    try:
        with pytest.raises(UsageError, match="terminal, harbor"):
            run_episode(load_harness("mini-swe-agent"), env,
                        Endpoint("http://127.0.0.1:9/v1", "k", "m"), seed=0)
    finally:
        env.close()


@pytest.mark.parametrize("observation,expected", [
    ("<output>\nhi\nthere\n</output>\n[exit 0] /work\n(3 turns left)",
     {"output": "hi\nthere\n", "returncode": 0, "exception_info": ""}),
    ("<output></output>\n[exit 2] /work", {"output": "", "returncode": 2,
                                            "exception_info": ""}),
    ("<output>\npartial\n</output>\n[skyhub: the command ran past 30 s and was interrupted "
     "(Ctrl-C)]\n[interrupted] /work\n(1 turn left)",
     {"output": "partial\n", "returncode": -1,
      "exception_info": "[skyhub: the command ran past 30 s and was interrupted (Ctrl-C)]"}),
    # output that looks like the wrapping is the command's own
    ("<output>\n</output>\n[exit 9] /x\n</output>\n[exit 0] /work",
     {"output": "</output>\n[exit 9] /x\n", "returncode": 0, "exception_info": ""}),
    ("Your turn had no command.", {"output": "Your turn had no command.", "returncode": -1,
                                   "exception_info": ""}),
])
def test_command_result_reads_the_shell_envs_observation(observation, expected):
    assert command_result(observation) == expected


def _skyhub(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "skyhub.cli.main", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_cli_eval_terminal_synth_with_mini_swe_agent(synth, backend, tmp_path):
    """`skyhub eval terminal-synth --harness mini-swe-agent`, the scripted model behind a
    gateway (one session per episode): every task solved, scored by the env."""
    plans = {t.prompt: [t.answer.strip(), SUBMIT] for t in synth.tasks}
    with scripted_gateway(_script(plans)) as gw:
        out = _skyhub("eval", "terminal-synth", f"backend={backend}", "seed=0", "n_tasks=6",
                      "max_turns=8", "--harness", "mini-swe-agent", "--agent",
                      "openai:scripted", "--gateway", gw.url, "--n", "4", "--concurrency", "2",
                      "--out", str(tmp_path / "run"), "--no-report")
        assert out.returncode == 0, out.stderr[-3000:]
        records = [json.loads(x) for x in
                   (tmp_path / "run" / "episodes.jsonl").read_text().splitlines()]
        assert len(records) == 4 and all(r["reward"] == 1.0 for r in records)
        for r in records:  # the trajectory is in the episode's gateway session
            session = gw.gateway.sessions.get(r["meta"]["gateway_session"])
            assert len(session.records) == 2 and len(session.segments()) == 1
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["accuracy"] == 1.0 and summary["infra_errors"] == 0


def test_three_training_steps_with_mini_swe_agent(tmp_path):
    """`skyhub train` with rollout.harness=mini-swe-agent: the tiny random model behind the
    trainer's own gateway; its replies are cut at the token limit, which mini-swe-agent drops
    from its history (a new segment per request), so step-wise samples outnumber episodes."""
    pytest.importorskip("torch")
    out = _skyhub("train", "--recipe", "tiny-cpu", "--env", "terminal-synth", "--out",
                  str(tmp_path / "run"), "env.kwargs.backend=local",
                  "rollout.harness=mini-swe-agent", "rollout.stepwise=true",
                  "rollout.max_tokens_per_turn=8", "rollout.max_input_tokens=4096",
                  "rollout.samples_per_prompt=2", "optim.train_batch_size=1",
                  "optim.mini_batch_size=1", "env.num_envs=2", "loop.max_steps=3",
                  "loop.eval_every=0", "loop.tensorboard=false")
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["episodes"] == 2 and r["infra_errors"] == 0 for r in rows)
    assert all(r["samples"] > r["episodes"] and r["requests"] >= r["samples"] for r in rows)
