"""Rollout in the model's own tool format (`rollout.tool_parser`): the prompt rendered with the
env's tools, the sampled text parsed into calls the env plays, the results rendered as the
template's tool messages, the agent's ids kept as sampled, and the episode's stream equal to
the tokenizer's encoding of the template's rendering of the whole conversation.

The env is toy-lookup with protocol="tools" (real env, real VectorEnv); the tokenizer is a
character-level one with a hermes-style template (tests/support/hermes_chat.py).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any

import pytest

import skyhub
from skyhub.errors import UsageError
from skyhub.tool_parsers import get_parser
from skyhub.trainer.config import load_config
from skyhub.trainer.inference import Completion
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.rollout import Rollout, RolloutConfig
from skyhub.trainer.tiny import tiny_model
from skyhub.trainer.token_layout import ChatFormat
from skyhub.trainer.tool_layout import ToolChat, check_exact

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from hermes_chat import HERMES_TEMPLATE, char_tokenizer

ENV = {"protocol": "tools", "max_turns": 5}


@pytest.fixture(scope="module")
def tok() -> Any:
    return char_tokenizer(["<tool_call>", "</tool_call>"])


def call(name: str, key: str, value: str, compact: bool = False) -> str:
    sep = (",", ":") if compact else (", ", ": ")
    return (f'<tool_call>{{"name"{sep[1]}"{name}"{sep[0]}"arguments"{sep[1]}'
            f'{{"{key}"{sep[1]}"{value}"}}}}</tool_call>')


class LookupScript:
    """A model that knows toy-lookup's tool format: turn 0 is text (no call), turn 1 looks up
    the prompt's key and k0 in two parallel calls after a few words, turn 2 answers with the
    value its tool response showed. Records what it was given."""

    version = 0

    def __init__(self, tokenizer: Any, compact: bool = False) -> None:
        self.tokenizer, self.compact = tokenizer, compact
        self.calls: dict[int, tuple[list[int], Completion]] = {}

    def text(self, prompt: str, turn: int) -> str:
        if turn == 0:
            return "Let me think."
        if turn == 1:
            key = re.findall(r"key (k\d+)", prompt)[-1]
            return ("Looking." + call("lookup", "key", key, self.compact)
                    + call("lookup", "key", "k0", self.compact))
        value = re.findall(r"<tool_response>(\w+)", prompt)[0]
        return call("answer", "value", value, self.compact)

    def generate(self, prompts, params, seeds=None):
        outs = []
        for p, s in zip(prompts, seeds, strict=True):
            prompt = self.tokenizer.decode(p, skip_special_tokens=False)
            text = self.text(prompt, s % 64)
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            ids.append(self.tokenizer.eos_token_id)  # <|end|>: the model ends its turn
            c = Completion(ids, [-0.5] * len(ids), [0] * len(ids), "stop",
                           self.tokenizer.decode(ids, skip_special_tokens=True))
            self.calls[s] = (list(p), c)
            outs.append(c)
        return outs

    def update_weights(self, weights, version):  # pragma: no cover - not used here
        self.version = version

    def close(self) -> None:
        pass


def play(engine: Any, tokenizer: Any, *, tasks: int = 2, group: int = 2, **cfg: Any):
    chat = ChatFormat(tokenizer)
    venv = skyhub.make_vec("toy-lookup", 4, autoreset_mode="disabled", **ENV)
    task_ids = [t.id for t in skyhub.make("toy-lookup").unwrapped.tasks][:tasks]
    rollout = Rollout(venv, engine, chat, RolloutConfig(**{"tool_parser": "hermes", **cfg}))
    try:
        return rollout, rollout.run(task_ids, group_size=group, seed=3)
    finally:
        rollout.close()
        venv.close()


def test_tool_calls_are_played_and_the_stream_is_the_templates_rendering(tok):
    engine = LookupScript(tok)
    rollout, episodes = play(engine, tok, max_tokens_per_turn=200)
    for ep in episodes:
        assert ep.reward == 1.0 and ep.outcome == "success", ep.episode.observations
        assert ep.turns == 3
        # the env got the parsed calls: two parallel lookups, then the answer
        actions = ep.episode.actions
        assert actions[0] == "Let me think."
        assert [c["function"]["name"] for c in actions[1]["tool_calls"]] == ["lookup", "lookup"]
        assert actions[1]["content"] == "Looking."
        assert ep.episode.infos[1]["tool_results"][0]["content"].startswith(
            ep.episode.infos[2]["answer"])
        # the prompt was rendered with the env's tools
        conv = ep.conversation
        assert [t["function"]["name"] for t in conv.tools] == ["lookup", "answer"]
        assert 'lookup: {"key": ' in tok.decode(ep.token_ids[:ep.prompt_len])
        # the tool results are tool messages, one per call
        roles = [m["role"] for m in conv.messages]
        assert roles == ["system", "user", "assistant", "user", "assistant", "tool", "tool",
                         "assistant"]
        assert [m["tool_call_id"] for m in conv.messages[5:7]] == ["call_0", "call_1"]
        # the agent's ids are the engine's, as sampled, masked in; the rest masked out
        agent = [i for i, m in zip(ep.token_ids, ep.loss_mask, strict=True) if m]
        sampled = [i for k in range(ep.turns) for i in engine.calls[ep.seed * 64 + k][1].token_ids]
        assert agent == sampled
        for k in range(ep.turns):  # each turn's prompt is the stream so far
            prompt, c = engine.calls[ep.seed * 64 + k]
            assert ep.token_ids[:len(prompt)] == prompt
            assert ep.token_ids[len(prompt):len(prompt) + len(c.token_ids)] == c.token_ids
        # token for token the template's rendering, as parsed and as written
        assert check_exact(rollout.tools, conv, ep.token_ids) is None
        assert check_exact(rollout.tools, conv, ep.token_ids, verbatim=True) is None


def test_arguments_the_template_reserialises_differ_only_from_the_parsed_rendering(tok):
    # The model writes compact JSON; the template writes arguments with `tojson`'s spacing.
    # The stream keeps what the model wrote: it is the rendering of its exact text, not of
    # the calls as parsed (the documented limit).
    rollout, episodes = play(LookupScript(tok, compact=True), tok, tasks=1, group=1,
                             max_tokens_per_turn=200)
    (ep,) = episodes
    assert ep.outcome == "success"
    assert check_exact(rollout.tools, ep.conversation, ep.token_ids, verbatim=True) is None
    why = check_exact(rollout.tools, ep.conversation, ep.token_ids)
    assert why is not None and "differs from the template's rendering" in why


def test_a_random_models_episodes_are_the_templates_rendering(tok):
    # Random text: calls that do not parse are text turns (user messages), special tokens
    # sampled mid-turn stay in the stream; every episode is still the rendering.
    engine = HFEngine(tiny_model(len(tok), seed=1), tok)
    rollout, episodes = play(engine, tok, tasks=3, group=2, max_tokens_per_turn=12,
                             temperature=1.0)
    assert all(ep.turns >= 2 for ep in episodes)
    for ep in episodes:
        assert check_exact(rollout.tools, ep.conversation, ep.token_ids, verbatim=True) is None
        assert check_exact(rollout.tools, ep.conversation, ep.token_ids) is None


def test_tool_parser_settings(tok):
    cfg = load_config("tiny-cpu", ["rollout.tool_parser=hermes"])
    assert cfg.rollout.tool_parser == "hermes"
    chat = ChatFormat(tok)
    venv = skyhub.make_vec("toy-lookup", 1, autoreset_mode="disabled", **ENV)
    try:
        with pytest.raises(UsageError, match="nope"):
            Rollout(venv, LookupScript(tok), chat, RolloutConfig(tool_parser="nope"))
        with pytest.raises(UsageError, match="chat_layout=user-turns"):
            Rollout(venv, LookupScript(tok), chat,
                    RolloutConfig(tool_parser="hermes", chat_layout="assistant-message"))
        auto = Rollout(venv, LookupScript(tok), chat, RolloutConfig(tool_parser="auto"))
        assert auto.tools.parser.name == "hermes"  # the template's <tool_call>
    finally:
        venv.close()


def test_a_template_that_renders_the_last_turn_differently_still_gets_its_delta():
    # Qwen3's template writes an empty reasoning block in the last assistant turn only: the
    # conversation before the tool messages is no prefix of the one after; the delta is then
    # taken after the assistant turn's end.
    tok = char_tokenizer(["<tool_call>", "</tool_call>"])
    tok.chat_template = HERMES_TEMPLATE.replace(
        "<|assistant|>{{ m.content or '' }}",
        "<|assistant|>{% if loop.last %}<think></think>{% endif %}{{ m.content or '' }}")
    tools = ToolChat(ChatFormat(tok), get_parser("hermes"))
    conv, _ = tools.start("word: apple", None, None)
    text = call("reply", "word", "apple")
    tools.turn(conv, text, text)
    replies = [{"role": "tool", "tool_call_id": "call_0", "name": "reply", "content": "ok"}]
    ids = tools.reply_ids(conv, replies, agent_ended_turn=True)
    assert tok.decode(ids, skip_special_tokens=False) == (
        "<|user|><tool_response>ok</tool_response><|end|><|assistant|>")


def test_training_runs_with_a_tool_parser(tmp_path):
    # The loop end to end (the tiny model, whose template knows no tools: the prompt has none
    # and calls are text to it; what is checked is that every piece takes the setting).
    from skyhub.trainer.loop import train

    cfg = load_config("tiny-cpu", [
        f"loop.out={tmp_path}", "loop.tensorboard=false", "loop.save_every=1000",
        "rollout.tool_parser=hermes", "env.id=toy-lookup",
        "env.kwargs={protocol: tools, max_turns: 3, n_tasks: 50}", "env.eval_id=null",
        "env.num_envs=4", "rollout.samples_per_prompt=2", "rollout.max_tokens_per_turn=16",
        "rollout.max_input_tokens=1024", "optim.train_batch_size=2",
        "optim.mini_batch_size=2", "loop.max_steps=2", "loop.eval_every=0"])
    s = train(cfg, live=False)
    assert [r["step"] for r in s.metrics] == [1, 2]
    assert all(r["episodes"] == 4 and r["infra_errors"] == 0 and r["turns_mean"] >= 1
               for r in s.metrics)


def test_a_turn_the_template_refuses_is_rendered_as_the_models_text(tok):
    # Llama 3.1's template raises on more than one call per turn; parallel calls from the
    # model must not stop training: that turn is rendered as the text the model wrote.
    one_call = char_tokenizer(["<tool_call>", "</tool_call>"])
    one_call.chat_template = ("{%- for m in messages %}{%- if m.tool_calls is defined and "
                              "m.tool_calls | length > 1 %}{{ raise_exception('one call per "
                              "turn') }}{%- endif %}{%- endfor %}" + HERMES_TEMPLATE)
    rollout, episodes = play(LookupScript(one_call), one_call, tasks=1, group=1,
                             max_tokens_per_turn=200)
    (ep,) = episodes
    assert ep.outcome == "success"  # the env got both calls
    assert ep.conversation.messages[4] == {"role": "assistant",
                                           "content": ep.conversation.texts[1]}
    assert check_exact(rollout.tools, ep.conversation, ep.token_ids) is None
