"""Token layout: conversations as token ids, the prompt of an episode, and each env
observation as the tokens that follow the agent's turn (not `skyhub.chat`, which holds the
conversation as text).

Token-in/token-out means the learner trains on exactly the tokens the engine sampled, with the
env's replies tokenized once and appended, never on a re-tokenization of the decoded
conversation (which can merge or split tokens at turn boundaries and silently change what the
policy is credited for). The chat template is applied to *message deltas*: the text the
template puts between the end of an assistant turn and the start of the next one is learned
once by rendering a probe conversation, so any HF chat template works (Qwen's ChatML, the tiny
tokenizer's, ...).

Two layouts put an observation into the conversation (`LAYOUTS`, the rollout's `chat_layout`):
- `user-turns` (default): each observation is a new user turn, then a new assistant turn.
- `assistant-message`: SkyRL-SQL's (skyrl-train's `use_conversation_multi_turn=false`): the
  whole episode is one assistant message; each observation's own tokens are appended right
  after the agent's, and the agent goes on writing in the same message. Its end-of-message
  token, when the engine sampled one mid-episode, is dropped (the message goes on) and one
  closes the message when the episode ends.
"""

from __future__ import annotations

from typing import Any

LAYOUTS = ("user-turns", "assistant-message")
_PROBE_ASSISTANT = "\x00ASSISTANT\x00"
_PROBE_USER = "\x00USER\x00"


class ChatFormat:
    """Turns system prompt, user prompt and observations into token ids for one tokenizer."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        ids = {tokenizer.eos_token_id}
        for name in ("<|im_end|>", "<|end|>", "<|eot_id|>", "<|endoftext|>"):
            tid = tokenizer.convert_tokens_to_ids(name)
            if isinstance(tid, int) and tid != tokenizer.unk_token_id:
                ids.add(tid)
        #: Tokens that end an assistant turn: the engine stops on them.
        self.stop_token_ids: tuple[int, ...] = tuple(sorted(i for i in ids if i is not None))
        self._between = self._probe_between_turns()
        self._inline_ok: bool | None = None  # checked on first use of `inline_ids`

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False,
                                                  add_generation_prompt=generation_prompt)

    def _probe_between_turns(self) -> tuple[str, str]:
        """(text before the observation, text after it) when an observation follows an
        assistant turn: e.g. ("<|im_end|>\\n<|im_start|>user\\n",
        "<|im_end|>\\n<|im_start|>assistant\\n") for ChatML."""
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"},
                {"role": "assistant", "content": _PROBE_ASSISTANT},
                {"role": "user", "content": _PROBE_USER}]
        text = self._render(msgs, generation_prompt=True)
        after_agent = text[text.index(_PROBE_ASSISTANT) + len(_PROBE_ASSISTANT):]
        before, _, after = after_agent.partition(_PROBE_USER)
        return before, after

    def prompt_ids(self, user: str, system: str | None = None) -> list[int]:
        """The episode's first tokens, ending with the assistant's generation prompt."""
        msgs = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": user}]
        return self.encode(self._render(msgs, generation_prompt=True))

    def observation_ids(self, observation: str, agent_ended_turn: bool) -> list[int]:
        """The tokens after an agent turn: end of that turn (unless the engine already sampled
        the end-of-turn token: `agent_ended_turn`), the observation as a user turn, and the
        next generation prompt."""
        return self.encode(self.observation_text(observation, agent_ended_turn))

    def observation_text(self, observation: str, agent_ended_turn: bool) -> str:
        """`observation_ids` as text (for trainers that tokenize it themselves, e.g.
        OpenRLHF's agent loop)."""
        before, after = self._between
        if agent_ended_turn:
            for tid in self.stop_token_ids:
                tok = self.tokenizer.convert_ids_to_tokens(tid)
                if before.startswith(tok):
                    before = before[len(tok):]
                    break
        return before + observation + after

    def inline_ids(self, observation: str) -> list[int]:
        """An observation's tokens inside the agent's own message (`assistant-message`
        layout): the tokenizer's encoding of its text alone, nothing around it, as SkyRL's
        generator encodes it."""
        self.check_inline()
        return self.encode(observation)

    def check_inline(self) -> None:
        """`assistant-message` joins separately encoded texts, which is the same text only for
        a tokenizer that adds nothing in front of a text (byte-level BPE: Qwen, Llama 3,
        GPT). A SentencePiece-style one prepends a word marker to each piece, which would
        put a space before every observation the model never wrote: refused, with the fix."""
        if self._inline_ok is None:
            probes = (("<sql>SELECT 1</sql>", "\n\n<observation>1</observation>\n\n"),
                      ("x", "y"))
            self._inline_ok = all(
                self.tokenizer.decode(self.encode(a) + self.encode(b)) == a + b
                for a, b in probes)
        if not self._inline_ok:
            from skyhub.errors import UsageError

            raise UsageError(
                f"chat_layout 'assistant-message' needs a tokenizer whose encodings of two "
                f"texts join into the encoding of both; {type(self.tokenizer).__name__} adds a "
                "prefix to each text (SentencePiece-style word marker), so every observation "
                "would start with a space the model never saw. Use rollout.chat_layout="
                "user-turns, or a byte-level BPE tokenizer (Qwen's, as SkyRL-SQL uses)")

    def ends_turn(self, token_id: int) -> bool:
        """Is this token one that closes an assistant turn (EOS, `<|im_end|>`...)?"""
        return token_id in self.stop_token_ids

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)
