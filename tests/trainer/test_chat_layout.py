"""The `assistant-message` chat layout (SkyRL-SQL's `use_conversation_multi_turn=false`, the
`sql-grpo-653` recipe's): the whole episode is one assistant message, each observation's own
tokens appended to the agent's, as skyrl-train's `SkyRLGymGenerator` builds it
(`_update_agent_loop_state_with_singleturn_chat_template`, `get_obs_ids_from_obs`):
an EOS sampled before an observation is dropped, the observation is `tokenizer.encode(text)`
with no chat-template text around it, and an EOS closes the message when the episode ends
after a turn that was not cut at the token limit (loss mask 1, as skyrl-train trains it).

The tokenizer here is a byte-level BPE with a ChatML template (the shape of Qwen2.5's, which
the recipe trains), trained on the SQL env's own text, and the model a tiny random Qwen2:
nothing is downloaded.
"""

from __future__ import annotations

import asyncio
import types
from typing import Any, ClassVar

import pytest
import torch

import skyhub
from skyhub.errors import UsageError
from skyhub.trainer import openrlhf as adapter
from skyhub.trainer.config import AlgoConfig, OptimConfig, load_config
from skyhub.trainer.inference import Completion
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Rollout, RolloutConfig
from skyhub.trainer.token_layout import ChatFormat

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
          "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
TASK = "spider-dev-0"  # concert_singer: "How many singers do we have?"


@pytest.fixture(scope="module")
def qwen_like() -> Any:
    """A byte-level BPE tokenizer (Qwen's kind: no word marker in front of a text), with
    `<|im_end|>` as EOS, trained on the sql-spider env's prompts and replies."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from skyhub.trainer.tiny import env_corpus

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(env_corpus("sql-spider", {}, episodes=6), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHATML
    return fast


class ScriptedEngine:
    """Answers turn k of every episode with `turns[k]` (text, and whether the model ends it
    with EOS), encoded by the tokenizer; records what it was given."""

    version = 0

    def __init__(self, tokenizer: Any, turns: list[tuple[str, bool]]) -> None:
        self.tokenizer, self.turns = tokenizer, turns
        self.prompts: dict[int, list[int]] = {}

    def generate(self, prompts, params, seeds=None):
        outs = []
        for p, s in zip(prompts, seeds, strict=True):
            text, eos = self.turns[s % 64]
            ids = self.tokenizer.encode(text, add_special_tokens=False)
            ids += [self.tokenizer.eos_token_id] if eos else []
            self.prompts[s] = list(p)
            outs.append(Completion(ids, [-0.25] * len(ids), [0] * len(ids), "stop",
                                   self.tokenizer.decode(ids, skip_special_tokens=True)))
        return outs

    def update_weights(self, weights, version):  # pragma: no cover - not used here
        self.version = version

    def close(self) -> None:
        pass


def replay(env_id: str, task_id: str, actions: list[str], **env_kwargs: Any
           ) -> tuple[str, str, list[str], float]:
    """The env's system prompt, first observation, each reply and the total reward."""
    with skyhub.make(env_id, **env_kwargs) as env:
        first, _ = env.reset(options={"task_id": task_id})
        replies, total = [], 0.0
        for a in actions:
            obs, r, term, trunc, _ = env.step(a)
            replies.append(obs)
            total += r
            if term or trunc:
                break
        return env.system_prompt, first, replies, total


def play(venv_id: str, engine: Any, chat: ChatFormat, cfg: RolloutConfig, group: int = 1,
         **env_kwargs: Any):
    venv = skyhub.make_vec(venv_id, 2, autoreset_mode="disabled", **env_kwargs)
    try:
        return Rollout(venv, engine, chat, cfg).run([TASK], group_size=group, seed=3)
    finally:
        venv.close()


def test_the_episode_is_one_assistant_message_in_the_tokenizers_own_encoding(qwen_like):
    tok = qwen_like
    turns = [("<think>I will count them.</think>", True),  # ends its turn with EOS, no tag
             ("<think>Check the table.</think>\n<sql>SELECT count(*) FROM singer</sql>", False),
             ("<think>That is it.</think>\n<solution>SELECT count(*) FROM singer</solution>",
              False)]
    engine = ScriptedEngine(tok, turns)
    cfg = RolloutConfig(max_turns_cap=6, max_tokens_per_turn=64, max_input_tokens=8192,
                        stop=("</sql>", "</solution>"), chat_layout="assistant-message")
    (ep,) = play("sql-spider", engine, ChatFormat(tok), cfg)
    system, first, replies, total = replay("sql-spider", TASK, [t for t, _ in turns])
    assert ep.turns == 3 and len(replies) == 3 and replies[-1] == ""
    assert ep.reward == total and not ep.infra_error

    # The tokenizer's own encoding of the conversation in this layout: the chat template's
    # prompt, then each agent text and each observation, encoded alone, in one message.
    enc = [tok.encode(t, add_special_tokens=False) for t, _ in turns]
    obs = [tok.encode(o, add_special_tokens=False) for o in replies[:-1]]
    prompt = tok.apply_chat_template([{"role": "system", "content": system},
                                      {"role": "user", "content": first}],
                                     add_generation_prompt=True, tokenize=True,
                                     return_dict=False)
    eos = tok.eos_token_id
    expected = prompt + enc[0] + obs[0] + enc[1] + obs[1] + enc[2] + [eos]
    assert ep.token_ids == expected
    assert ep.prompt_len == len(prompt)
    # The loss mask is exactly the agent's tokens (its EOS before an observation is gone, the
    # closing EOS is the agent's), never the prompt's or an observation's.
    mask = ([0] * len(prompt) + [1] * len(enc[0]) + [0] * len(obs[0]) + [1] * len(enc[1])
            + [0] * len(obs[1]) + [1] * (len(enc[2]) + 1))
    assert ep.loss_mask == mask
    assert ep.logprobs == [-0.25 if m else 0.0 for m in mask[:-1]] + [0.0]
    assert all((v == 0) == bool(m) for v, m in zip(ep.versions, mask, strict=True))
    # What the engine was given each turn is exactly the sequence so far (no generation
    # prompt, no user turn between the agent's text and the observation).
    starts = [len(prompt), len(prompt) + len(enc[0]) + len(obs[0]),
              len(prompt) + len(enc[0]) + len(obs[0]) + len(enc[1]) + len(obs[1])]
    assert [engine.prompts[ep.seed * 64 + k] for k in range(3)] == [expected[:s] for s in starts]

    # As text, the same: the chat template's rendering of [system, user, one assistant message
    # holding every turn and observation], closed by the EOS.
    message = turns[0][0] + replies[0] + turns[1][0] + replies[1] + turns[2][0]
    rendered = tok.apply_chat_template(
        [{"role": "system", "content": system}, {"role": "user", "content": first},
         {"role": "assistant", "content": message}],
        tokenize=False, continue_final_message=True)
    assert tok.decode(ep.token_ids) == rendered + "<|im_end|>"


def test_user_turns_layout_is_unchanged(qwen_like):
    """The default layout still gives each observation its own user turn."""
    tok = qwen_like
    turns = [("<think>Look.</think>\n<sql>SELECT count(*) FROM singer</sql>", False),
             ("<think>Done.</think>\n<solution>SELECT count(*) FROM singer</solution>", False)]
    chat = ChatFormat(tok)
    cfg = RolloutConfig(max_turns_cap=6, max_tokens_per_turn=64, max_input_tokens=8192)
    (ep,) = play("sql-spider", ScriptedEngine(tok, turns), chat, cfg)
    _, _, replies, _ = replay("sql-spider", TASK, [t for t, _ in turns])
    between = chat.observation_ids(replies[0], agent_ended_turn=False)
    assert tok.decode(between).startswith("<|im_end|>\n<|im_start|>user\n")
    enc = [tok.encode(t, add_special_tokens=False) for t, _ in turns]
    assert ep.token_ids[ep.prompt_len:] == enc[0] + between + enc[1]  # no closing EOS added


def test_sampled_turns_train_on_exactly_the_engines_tokens(qwen_like):
    """A tiny random model samples for real: each turn's prompt is the sequence so far, and
    the learner's logprobs of the agent's tokens match the engine's."""
    from skyhub.trainer.tiny import tiny_model

    tok = qwen_like
    model = tiny_model(len(tok), seed=0)

    class Recording(HFEngine):
        calls: ClassVar[dict[int, tuple[list[int], Completion]]] = {}

        def generate(self, prompts, params, seeds=None):
            outs = super().generate(prompts, params, seeds)
            for p, s, c in zip(prompts, seeds, outs, strict=True):
                self.calls[s] = (list(p), c)
            return outs

    engine = Recording(model, tok)
    chat = ChatFormat(tok)
    cfg = RolloutConfig(max_tokens_per_turn=8, max_input_tokens=8192,
                        stop=("</sql>", "</solution>"), chat_layout="assistant-message")
    episodes = play("sql-spider", engine, chat, cfg, group=2, max_turns=2)
    eos = tok.eos_token_id
    for ep in episodes:
        texts = [engine.calls[ep.seed * 64 + k][1].text for k in range(ep.turns)]
        system, first, replies, _ = replay("sql-spider", TASK, texts, max_turns=2)
        seq = chat.prompt_ids(first, system)
        mask = [0] * len(seq)
        for k in range(ep.turns):
            prompt, c = engine.calls[ep.seed * 64 + k]
            assert prompt == seq
            ids = list(c.token_ids)
            last = k + 1 == ep.turns
            if not last and ids[-1] == eos:
                ids = ids[:-1]
            seq, mask = seq + ids, mask + [1] * len(ids)
            if not last:
                seq += tok.encode(replies[k], add_special_tokens=False)
            elif c.finish_reason != "length" and ids[-1] != eos:
                seq, mask = [*seq, eos], [*mask, 1]
            mask += [0] * (len(seq) - len(mask))
        assert seq == ep.token_ids and mask == ep.loss_mask
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=4096))
    for ep, lp in zip(episodes, learner.logprobs(episodes), strict=True):
        agent = torch.tensor(ep.loss_mask[1:]).bool()
        sampled = agent & (torch.tensor(ep.logprobs[1:]) != 0.0)  # not an appended EOS
        assert sampled.sum() > 0
        assert torch.allclose(lp[sampled], torch.tensor(ep.logprobs[1:])[sampled], atol=1e-4)


def test_a_tokenizer_that_prefixes_each_text_is_refused(tokenizer):
    """The trainer's tiny tokenizer (SentencePiece-style word marker) would put a space in
    front of every observation: the layout says so instead of training on it."""
    chat = ChatFormat(tokenizer)
    with pytest.raises(UsageError, match=r"assistant-message.*user-turns"):
        chat.check_inline()
    venv = skyhub.make_vec("toy-arith", 1, autoreset_mode="disabled")
    try:
        with pytest.raises(UsageError, match="byte-level"):
            Rollout(venv, ScriptedEngine(tokenizer, []), chat,
                    RolloutConfig(chat_layout="assistant-message"))
        with pytest.raises(UsageError, match="chat_layout must be one of"):
            Rollout(venv, ScriptedEngine(tokenizer, []), chat,
                    RolloutConfig(chat_layout="one-message"))
    finally:
        venv.close()


def test_the_653_recipe_uses_the_assistant_message_layout():
    cfg = load_config("sql-grpo-653")
    assert cfg.rollout.chat_layout == "assistant-message"
    assert load_config("tiny-cpu").rollout.chat_layout == "user-turns"
    with pytest.raises(UsageError, match=r"rollout\.chat_layout must be one of"):
        load_config("sql-grpo-653", ["rollout.chat_layout=conversation"])


def test_the_training_loop_passes_the_layout_to_its_rollout(tmp_path):
    from skyhub.trainer.loop import train

    cfg = load_config("tiny-cpu", ["rollout.chat_layout=assistant-message", "loop.max_steps=1",
                                   f"loop.out={tmp_path}", "loop.tensorboard=false"])
    with pytest.raises(UsageError, match="chat_layout 'assistant-message'"):
        train(cfg, live=False)  # the tiny tokenizer is refused: the setting reached Rollout


# ------------------------------------------------------------------ OpenRLHF adapter
def test_openrlhf_feedback_in_the_assistant_message_layout_is_the_observation(qwen_like):
    tok = qwen_like
    label = adapter.make_label("sql-spider", TASK, chat_layout="assistant-message")
    assert adapter.chat_layout_of(label) == "assistant-message"
    assert adapter.chat_layout_of(adapter.make_label("sql-spider", TASK)) == "user-turns"
    with pytest.raises(UsageError, match="chat_layout must be one of"):
        adapter.make_label("sql-spider", TASK, chat_layout="single")
    action = "<think>Check.</think>\n<sql>SELECT count(*) FROM singer</sql>"
    _, _, replies, _ = replay("sql-spider", TASK, [action])

    async def go() -> dict[str, Any]:
        inst = adapter.AgentInstance(tokenizer=tok, sampling_params=types.SimpleNamespace(
            stop=None, include_stop_str_in_output=False))
        await inst.reset({"observation": "PROMPT", "label": label})
        try:
            return await inst.step({"observation_text": "", "action_text": action,
                                    "label": label, "sampling_params": None})
        finally:
            inst.close()

    res = asyncio.run(go())
    assert not res["done"] and res["environment_feedback"] == replies[0]  # nothing around it


def test_openrlhf_engine_wrapper_drops_an_eos_before_the_observation(qwen_like,
                                                                     monkeypatch):
    tok = qwen_like
    eos = tok.eos_token_id

    class Engine:
        def __init__(self, ids):
            self.ids = ids

        async def generate(self, *a, **k):
            out = types.SimpleNamespace(token_ids=tuple(self.ids),
                                        logprobs=[{i: -0.1} for i in self.ids])
            return types.SimpleNamespace(outputs=[out])

    def sampled(layout: str, ids: list[int]) -> tuple[list[int], int]:
        rollout = adapter._Rollout(tok, None)
        rollout.layout = layout
        out = asyncio.run(adapter._RecordingEngine(Engine(ids), rollout).generate([1]))
        return list(out.outputs[0].token_ids), len(out.outputs[0].logprobs)

    assert sampled("assistant-message", [5, 6, eos]) == ([5, 6], 2)
    assert sampled("assistant-message", [5, 6]) == ([5, 6], 2)
    assert sampled("user-turns", [5, 6, eos]) == ([5, 6, eos], 3)
    monkeypatch.setenv("SKYHUB_CHAT_LAYOUT", "assistant-message")
    assert adapter.chat_layout_of(adapter.make_label("sql-spider", TASK)) == "assistant-message"
    monkeypatch.setenv("SKYHUB_CHAT_LAYOUT", "bad")
    with pytest.raises(UsageError, match="SKYHUB_CHAT_LAYOUT"):
        adapter.chat_layout_of("x")
