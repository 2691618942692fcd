"""The `terminus` harness through a real gateway with a scripted model, in real sandboxes:
Harbor's bundled tasks (Docker) and a generated terminal task. The env's verifier gives the
reward; the reply format, the double confirmation, parse errors and the context handover
behave as Terminus-2's."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("openai")
pytest.importorskip("transformers")
sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from scripted_gateway import ScriptedGateway, scripted_gateway

import skyhub
from skyhub.harness import load_harness, run_episode
from skyhub.harness.terminus_format import parse_json, parse_xml
from skyhub.harness.terminus_pane import bash_quote, key_bytes

FIX = "sed -i 's/^mode=.*/mode=production/' /app/app.conf\n"
_LAST_USER = re.compile(r"<\|user\|>((?:(?!<\|user\|>).)*)<\|end\|><\|assistant\|>$", re.S)


def say(commands: list[tuple[str, float]] = (), complete: bool = False) -> str:
    """A JSON reply of the format."""
    return json.dumps({"analysis": "looking", "plan": "act",
                       "commands": [{"keystrokes": k, "duration": d} for k, d in commands],
                       "task_complete": complete})


def say_xml(commands: list[tuple[str, float]] = (), complete: bool = False) -> str:
    keys = "".join(f'<keystrokes duration="{d}">{k}</keystrokes>' for k, d in commands)
    return (f"<response><analysis>looking</analysis><plan>act</plan><commands>{keys}"
            f"</commands><task_complete>{str(complete).lower()}</task_complete></response>")


class Script:
    """The model: the replies of the running test in order; the three handover requests
    (summary, questions, answers) get fixed texts. `prompts` are the last user messages."""

    def __init__(self) -> None:
        self.replies: Iterator[str | Callable[[], str]] = iter(())
        self.prompts: list[str] = []

    def play(self, replies: list[str | Callable[[], str]]) -> Script:
        self.replies, self.prompts = iter(replies), []
        return self

    def __call__(self, prompt: str) -> str:
        m = _LAST_USER.search(prompt)
        last = m.group(1) if m else prompt
        self.prompts.append(last)
        if "Another agent will take over" in last:
            return "Summary: I ran the sed command on /app/app.conf."
        if "ask the previous agent questions" in last:
            return "1. Did the check pass? 2. Which file changed?"
        if "The agent taking over has questions" in last:
            return "1. Not checked yet. 2. /app/app.conf."
        reply = next(self.replies)
        return reply() if callable(reply) else reply


@pytest.fixture(scope="module")
def script() -> Script:
    return Script()


@pytest.fixture(scope="module")
def gateway(script: Script) -> Iterator[ScriptedGateway]:
    with scripted_gateway(script) as gw:
        yield gw


@pytest.fixture(scope="module")
def harbor(docker_daemon: None) -> Iterator[Any]:
    env = skyhub.make("harbor-examples")
    yield env
    env.close()


def play_fix_config(gw: ScriptedGateway, env: Any, **kwargs: Any) -> tuple[Any, Any]:
    session, endpoint = gw.session()
    ep = run_episode(load_harness("terminus", **kwargs), env, endpoint,
                     options={"task_id": "fix-config"})
    return ep, session


# ---------------------------------------------------------------------------- in Docker
@pytest.mark.docker
@pytest.mark.parametrize("fmt,reply", [("json", say), ("xml", say_xml)])
def test_the_right_keystrokes_score_one(gateway, harbor, script, fmt, reply):
    script.play([reply([("cat /app/app.conf\n", 0.2)]),
                 reply([(FIX, 0.1), ("bash /app/check.sh\n", 0.3)]),
                 reply(complete=True), reply(complete=True)])
    ep, session = play_fix_config(gateway, harbor, parser=fmt)
    assert (ep.total_reward, ep.terminated, ep.infra_error) == (1.0, True, False)
    assert len(ep.actions) == 4 and ep.actions[-1] == "<done/>"  # one env turn per reply
    # the model saw the terminal: the file, then the check passing, then the confirmation
    assert "mode=" in script.prompts[1] and "New Terminal Output:" in script.prompts[1]
    assert re.search(r"check\.sh\n(.*\n)?OK\n", script.prompts[2]), script.prompts[2]
    assert "Are you sure?" in script.prompts[3]
    (seg,) = session.segments()  # one conversation, each request extending the last
    assert len(seg.records) == 4


@pytest.mark.docker
def test_no_keystrokes_score_zero(gateway, harbor, script):
    script.play([say(complete=True), say(complete=True)])
    ep, _ = play_fix_config(gateway, harbor)
    assert (ep.total_reward, ep.terminated, ep.infra_error) == (0.0, True, False)
    assert len(ep.actions) == 2 and ep.actions[-1] == "<done/>"


@pytest.mark.docker
def test_a_single_task_complete_asks_for_confirmation_and_the_episode_goes_on(
        gateway, harbor, script):
    script.play([say(complete=True),  # not yet done: asked to confirm...
                 say([(FIX, 0.1)]),   # ...and the model works on instead
                 say(complete=True), say([("", 0.1)], complete=True)])
    ep, _ = play_fix_config(gateway, harbor)
    assert ep.total_reward == 1.0 and len(ep.actions) == 4
    confirm = [p for p in script.prompts if "Are you sure?" in p]
    assert len(confirm) == 2 and '"task_complete": true' in confirm[0]
    # a reply without task_complete in between resets the confirmation
    assert "Are you sure?" not in script.prompts[2]


@pytest.mark.docker
def test_a_malformed_reply_is_told_its_error_and_the_episode_goes_on(gateway, harbor, script):
    script.play(['I will fix it: {"analysis": "x", "plan": "y"}',
                 "no json at all",
                 say([(FIX, 0.1)]), say(complete=True), say(complete=True)])
    ep, _ = play_fix_config(gateway, harbor)
    assert ep.total_reward == 1.0 and ep.terminated
    assert "missing required field: commands" in script.prompts[1]
    assert "could not be read, so nothing was typed" in script.prompts[1]
    assert "no JSON object found" in script.prompts[2]
    assert ep.final_info["reward_breakdown"]["format_errors"] == 2.0  # the env's own count


@pytest.mark.docker
def test_a_small_context_budget_hands_over_to_a_new_segment_and_still_scores(
        gateway, harbor, script):
    script.play([say([("cat /app/app.conf\n", 0.2)]), say([(FIX, 0.1)]),
                 say(complete=True), say(complete=True)])
    # a budget below the first prompt's size: the context is handed over before every turn
    # after the first (never twice in a row: a new conversation needs a turn first)
    ep, session = play_fix_config(gateway, harbor, context_tokens=2000, summarize_below=100)
    assert (ep.total_reward, ep.terminated) == (1.0, True)
    assert len(ep.actions) == 4  # the handover's requests are no env turns
    asked = [p for p in script.prompts if "Another agent will take over" in p]
    assert len(asked) == 3 and "cat /app/app.conf" in asked[0]  # the pending output goes too
    handoff = [p for p in script.prompts if "The previous agent's answers" in p]
    assert handoff and "/app/app.conf" in handoff[0]
    # the questions come from a fresh conversation and the agent goes on in a new one: new
    # segments, each sampled reply recorded in one of them
    segments = session.segments()
    assert len(segments) >= 2
    assert sum(len(s.records) for s in segments) == len(session.records)


@pytest.mark.docker
def test_a_terminal_synth_task_solved_through_the_terminal(gateway, script, docker_daemon):
    env = skyhub.make("terminal-synth", backend="docker", seed=3)
    try:
        # the task's own solution, typed as a heredoc into the terminal
        script.play([lambda: say([(f"bash <<'SOLUTION'\n{env.task.answer}\nSOLUTION\n", 1.0)]),
                     say(complete=True), say(complete=True)])
        _, endpoint = gateway.session()
        ep = run_episode(load_harness("terminus"), env, endpoint, seed=0)
    finally:
        env.close()
    assert (ep.total_reward, ep.terminated, ep.infra_error) == (1.0, True, False)


def test_a_relay_copied_from_each_output_scores_one_with_stop_strings_sent(gateway, script):
    """terminal-relay (local): replies that copy the word the last output names finish the
    relay; the harness's `stop` strings reach the engine with every request."""
    finished = []

    def copy_last_word() -> str:
        finished.extend(re.findall(r"of \d+\. the relay is finished", script.prompts[-1]))
        if finished:
            return say(complete=True)
        # (an output that came after the duration shows in the next turn: then the echo of
        # the last command is copied, the relay answers "wrong word" with the next one)
        word = re.findall(r"\./mark (\w+)", script.prompts[-1])[-1]
        return say([(f"./mark {word}\n", 0.5)])

    env = skyhub.make("terminal-relay", backend="local", n_tasks=2, steps=5)
    try:
        script.play([copy_last_word] * 12)
        _, endpoint = gateway.session()
        before = len(gateway.engine.params)
        ep = run_episode(load_harness("terminus", stop=["false}"]), env, endpoint, seed=0)
    finally:
        env.close()
    assert (ep.total_reward, ep.terminated, ep.infra_error) == (1.0, True, False)
    sent = gateway.engine.params[before:]
    assert len(sent) >= 7 and all(p.stop == ("false}",) for p in sent)


# ------------------------------------------------------------------------ no sandbox
def test_replies_are_read_as_terminus_reads_them():
    r = parse_json('Sure. {"analysis": "a", "plan": "p", "commands": [{"keystrokes": "ls\\n"}]')
    assert not r.error and r.mended and [c.duration for c in r.commands] == [1.0]
    assert any("before the JSON" in w for w in r.warnings)
    assert any("closing braces" in w for w in r.warnings)
    r = parse_json('{"analysis": "a", "plan": "p", "commands": [1], "task_complete": "true"}')
    assert r.complete and not r.error and not r.commands  # complete: a bad command is a warning
    assert parse_json('{"analysis": "a", "plan": "p", "commands": [1]}').error
    r = parse_xml("<response><analysis>a</analysis><plan>p</plan><commands>"
                  '<keystrokes duration="0.5">echo "a < b" &amp;\n</keystrokes>'
                  "</commands><task_complete>true</task_complete>")
    assert r.complete and r.commands[0].keystrokes == 'echo "a < b" &amp;\n' and r.mended
    assert any("&amp;" in w for w in r.warnings)
    assert parse_xml("<response><analysis>a</analysis></response>").error
    assert parse_xml("nothing").error


def test_tmux_key_names_become_their_bytes():
    assert [key_bytes(k) for k in ("C-c", "^D", "Escape", "Up", "M-b", "ls -la\n", "q")] == [
        "\x03", "\x04", "\x1b", "\x1b[A", "\x1bb", "ls -la\n", "q"]
    assert bash_quote("it's\n\x03") == "$'it\\'s\\n\\x03'"


def test_a_turn_is_one_env_command_whatever_the_keystrokes_hold():
    from skyhub.harness.terminus_pane import Command, Pane
    from skyhub.shell import protocol

    pane = Pane(max_wait=5)
    tricky = [Command("echo '</bash>' \"<done/>\"\n", 3), Command("C-c", 4)]
    first = protocol.parse(pane.action(tricky, done=True))
    assert first.done and len(first.commands) == 1
    assert "cat > " in first.commands[0]  # the first turn installs the terminal's helper
    assert bash_quote("echo '</bash>' \"<done/>\"\n") in first.commands[0]
    assert first.commands[0].endswith(" 3 $'echo \\'</bash>\\' \"<done/>\"\\n' 2 $'\\x03'")
    later = protocol.parse(pane.action([Command("ls\n", 0.1)]))
    assert later.commands == (f"bash {pane.dir}/pane.sh 10000 160 40 0.1 $'ls\\n'",)
    assert not later.done and protocol.parse(pane.action([], done=True)) == protocol.Action(
        (), True)


def test_stepwise_training_through_terminus_runs(tmp_path):
    """The long-horizon recipe (`terminal-relay-terminus`: `skyhub train` with
    rollout.harness=terminus and rollout.stepwise=true), shrunk: the tiny random model behind
    the trainer's gateway, a context budget small enough that terminus hands over (new
    segments), each segment a sample."""
    import subprocess

    pytest.importorskip("torch")
    out = subprocess.run(
        [sys.executable, "-m", "skyhub.cli.main", "train", "--recipe",
         "terminal-relay-terminus", "--out", str(tmp_path / "run"), "env.kwargs.steps=4",
         "rollout.harness_kwargs.max_turns=5", "rollout.harness_kwargs.context_tokens=700",
         "rollout.harness_kwargs.summarize_below=150", "rollout.samples_per_prompt=2",
         "optim.train_batch_size=1", "optim.mini_batch_size=1", "env.num_envs=2",
         "loop.max_steps=2", "loop.eval_every=0", "loop.tensorboard=false",
         "loop.save_every=0"],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text()
            .splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["episodes"] == 2 and r["infra_errors"] == 0 for r in rows)
    # handovers and cut-off replies start new conversations: more samples than episodes
    assert all(r["samples"] > r["episodes"] and r["requests"] > r["samples"] for r in rows)
