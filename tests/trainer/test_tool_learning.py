"""GRPO learns to call a tool in the model's own format: a tiny random model, a tokenizer and a
hermes-style chat template made here (tests/support/hermes_chat.py), trained with
`rollout.tool_parser=hermes` on an env where only a tool call can succeed, goes from chance to
>= 0.9 success, and every episode's token stream is the template's rendering of its
conversation (`check_exact`). Seeded; a few minutes on 2 CPU cores (one torch thread, as the
tiny-cpu recipe runs).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from skyhub.env import StepResult, TextEnv
from skyhub.task import Task, TaskSet
from skyhub.tool_parsers import get_parser
from skyhub.tools import function_tool
from skyhub.trainer.config import AlgoConfig, OptimConfig, RolloutConfig
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Rollout
from skyhub.trainer.tiny import tiny_model
from skyhub.trainer.token_layout import ChatFormat
from skyhub.trainer.tool_layout import check_exact
from skyhub.vector import VectorEnv

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from hermes_chat import char_tokenizer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

WORDS = ("apple", "river")  # what a call may say; the tasks ask for the first
# The call's skeleton as tokens of this tokenizer, so that a random model can write a call in
# two tokens: OPEN, then the word with the call's end (one character per token, a call would
# take about seventy). The tokenizer matches the longest added token, so the template's
# rendering of a call is these two tokens too, while the prompt's word is the word alone.
OPEN = '<tool_call>{"name": "reply", "arguments": {"word": "'
CLOSE = '"}}</tool_call>'
CALLED = "\x00reply "  # a call's text action: no sampled text holds \x00 (not in the vocabulary)


class ReplyCall(TextEnv):
    """"word: apple" -> call the `reply` tool with that word. Two turns: a miss is answered
    (a tool message for a call, a user message for text) and the agent tries again.

    The tasks ask for one word by default (`words`): what this test teaches a random model is
    the call's format, in the template's tokens. Reading which word from the prompt is
    test_learning.py's toy-recall; here a random tiny model learns it too slowly for a test
    (the call's word is a token of its own, not the prompt's, so nothing favours copying),
    and with two turns it learns instead to try the other word after a miss.

    Only a call of `reply` with the task's word succeeds (reward 1). An episode that misses
    scores its best turn by how far along the call it got (a format reward, so that a random
    policy finds the skeleton): text that starts with the call's opening 0.2, with a word
    after it 0.3, with the task's word 0.5; a call of another word 0.4 (not a word: 0.2, as
    the opening alone: closing a call early does not pay)."""

    system_prompt = "Call reply with the word."

    def __init__(self, n_tasks: int = 400, seed: int = 0, max_turns: int = 2,
                 words: tuple[str, ...] = WORDS[:1]) -> None:
        super().__init__(max_turns=max_turns)
        rng = random.Random(seed)
        self.tasks = TaskSet([Task(f"w{seed}-{i}", f"word: {w}", w)
                              for i, w in enumerate(rng.choice(words) for _ in range(n_tasks))])
        self.tools = [function_tool("reply", "Reply.", {"word": {"type": "string"}})]

    def reset(self, *, seed: int | None = None,
              options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        self._best = 0.0
        return self.start_episode(seed, options).prompt, self.make_info()

    def tool_action(self, name: str, arguments: dict[str, Any]) -> str:
        return CALLED + str(arguments["word"])

    def step(self, action: str) -> StepResult:
        assert self.task is not None, "call reset() before step()"
        self.next_turn()
        word = self.task.answer
        if action == CALLED + word:
            return "", 1.0, True, False, self.make_info("success")
        if action.startswith(CALLED):
            score, reply = 0.4 if action[len(CALLED):] in WORDS else 0.2, "not the word"
        else:
            rest = action[len(OPEN):] if action.startswith(OPEN) else None
            score = 0.0 if rest is None else 0.5 if rest.startswith(word) else 0.3 if any(
                rest.startswith(w) for w in WORDS) else 0.2
            reply = "call reply"
        self._best = max(self._best, score)
        if self.out_of_turns:
            return self.out_of_turns_step(reward=self._best)
        return f"{reply} {self.turns_left_note()}", 0.0, False, False, self.make_info()


def as_the_template_writes(text: str) -> str:
    """A turn's text as this template writes its parsed message: the content, then each call
    with `tojson`'s spacing. It differs from the text where the model wrote something the
    parsed message leaves out (text after a call: docs/training.md's list)."""
    turn = get_parser("hermes").parse(text)
    return turn.content + "".join(
        f'<tool_call>{{"name": "{c.name}", "arguments": {json.dumps(c.arguments)}}}</tool_call>'
        for c in turn.calls)


def tokenizer() -> Any:
    """Characters of what the conversations hold, the call's two pieces and the words."""
    env = ReplyCall()
    added = [OPEN, *WORDS, *(w + CLOSE for w in WORDS)]
    tok = char_tokenizer(added)
    text = tok.apply_chat_template(
        [{"role": "system", "content": env.system_prompt}, {"role": "user", "content": "word:"},
         {"role": "assistant", "content": "", "tool_calls": [
             {"type": "function", "function": {"name": "reply", "arguments": {"word": "x"}}}]},
         {"role": "tool", "content": "not the word (1 turn left)"},
         {"role": "user", "content": "call reply"}],
        tools=env.tools, tokenize=False)
    return char_tokenizer(added, alphabet="".join(sorted(set(text))))


def test_grpo_learns_to_call_a_tool_in_the_templates_format_with_exact_tokens():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        tok = tokenizer()
        model = tiny_model(len(tok), seed=0)
        engine = HFEngine(model, tok, seed=0)
        cfg = RolloutConfig(tool_parser="hermes", temperature=1.5, max_tokens_per_turn=2,
                            max_input_tokens=512)
        learner = Learner(model, AlgoConfig(advantage="grpo"), OptimConfig(
            lr=3e-3, train_batch_size=8, mini_batch_size=8), temperature=cfg.temperature,
            pad_id=tok.pad_token_id, norm_len=4)
        chat = ChatFormat(tok)
        train = VectorEnv([ReplyCall] * 16, autoreset_mode="disabled")
        held_out = VectorEnv([lambda: ReplyCall(n_tasks=48, seed=99)] * 16,
                             autoreset_mode="disabled")
        rollout = Rollout(train, engine, chat, cfg)
        greedy = Rollout(held_out, engine, chat,
                         RolloutConfig(**{**cfg.__dict__, "temperature": 0.0}))
        tasks = [t.id for t in ReplyCall().tasks]
        eval_tasks = [t.id for t in ReplyCall(n_tasks=48, seed=99).tasks]
        success: list[float] = []  # sampled, per step
        held: list[float] = []  # greedy, on held-out tasks, every 20 steps
        parsed = tool_replies = 0  # episodes: equal to the parsed rendering; with tool messages
        for step in range(400):
            batch = tasks[8 * step % len(tasks):][:8]
            episodes = rollout.run(batch, group_size=8, seed=step)
            success.append(sum(e.outcome == "success" for e in episodes) / len(episodes))
            for e in episodes:  # token for token the template's rendering
                assert check_exact(rollout.tools, e.conversation, e.token_ids,
                                   verbatim=True) is None
                why = check_exact(rollout.tools, e.conversation, e.token_ids)
                # as parsed too, unless the parsed message leaves out some of a turn's text
                assert why is None or any(as_the_template_writes(t) != t
                                          for t in e.conversation.texts), why
                parsed += why is None
                tool_replies += any(m["role"] == "tool" for m in e.conversation.messages)
            learner.train_step(episodes, group_size=8)
            engine.update_weights(model.state_dict(), step + 1)
            if step % 20 == 19:
                final = greedy.run(eval_tasks, group_size=1, seed=1000)
                held.append(sum(e.outcome == "success" for e in final) / len(final))
                if held[-1] >= 0.9:
                    break
        for e in final:
            assert check_exact(greedy.tools, e.conversation, e.token_ids) is None
        rollout.close()
        greedy.close()
        train.close()
        held_out.close()
    finally:
        torch.set_num_threads(threads)
    calls = [e for e in final if e.conversation.messages[2].get("tool_calls")]
    print(f"steps {len(success)}, sampled success every 20 steps {success[::20]}, greedy "
          f"held-out {held}, streams equal to the parsed rendering {parsed}/{64 * len(success)}"
          f", with tool messages {tool_replies}, last step's sampled success {success[-1]}")
    assert success[0] < 0.1  # chance: a random model almost never writes the call
    assert tool_replies > 0  # calls of the other word were answered by tool messages
    assert held[-1] >= 0.9, (held, success[::20])
    assert len(calls) == len(final)  # it answers with the tool, in the template's format
