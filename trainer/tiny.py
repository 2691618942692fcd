"""A tiny policy that needs no download: a tokenizer trained here on the env's own text, and a
randomly initialised Qwen2-shaped model.

This is what `model.name_or_path: tiny` means. It lets the trainer's tests and the tiny-cpu
recipe learn on a CPU in minutes, from chance, with nothing fetched from a model hub. The
tokenizer is a real BPE tokenizer with a chat template, so the same code path (chat template,
token-in/token-out, stop strings) runs for it as for Qwen.
"""

from __future__ import annotations

import string
from collections.abc import Iterable
from typing import Any

SPECIALS = ("<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")

# The same shape of template as Qwen's ChatML: a turn is <|role|>content<|end|>; generation
# starts after <|assistant|>; <|end|> is the end-of-turn token (the tokenizer's EOS).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


VOCAB_SIZE = 320  # the tokenizer's (at most: a small corpus may give fewer merges)


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE) -> Any:
    """A BPE tokenizer (SentencePiece-style word boundaries) trained on `texts` in well under
    a second. Every printable ASCII character is in the alphabet, so any ASCII text encodes
    without unknown tokens; frequent words become single tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<|unk|>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="always")
    tok.decoder = decoders.Metaspace(replacement="▁", prepend_scheme="always")
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIALS),
                                  initial_alphabet=list(string.printable.strip() + "▁"),
                                  show_progress=False)
    tok.train_from_iterator(list(texts), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<|pad|>",
                                   unk_token="<|unk|>", eos_token="<|end|>",
                                   bos_token=None)
    fast.chat_template = CHAT_TEMPLATE
    return fast


def tiny_model(vocab_size: int, *, hidden_size: int = 128, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, seed: int = 0, tie_embeddings: bool = True) -> Any:
    """A random Qwen2 causal LM (head_dim 32: vLLM's CPU backend rejects 16)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=vocab_size, hidden_size=hidden_size,
                      intermediate_size=hidden_size * 2, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv_heads,
                      head_dim=hidden_size // heads, max_position_embeddings=4096,
                      tie_word_embeddings=tie_embeddings)
    cfg._attn_implementation = "sdpa"
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return Qwen2ForCausalLM(cfg)


def env_corpus(env_id: str, env_kwargs: dict[str, Any] | None = None, episodes: int = 64,
               seed: int = 0) -> list[str]:
    """Text to train a tokenizer on: the env's system prompt, and the prompts, reference
    actions and observations of `episodes` episodes played with its reference actions (or
    just the prompts when it has none)."""
    import skyhub

    texts: list[str] = []
    with skyhub.make(env_id, **(env_kwargs or {})) as env:
        for i in range(episodes):
            obs, _ = env.reset(seed=seed + i)
            texts += [env.system_prompt or "", obs]
            for _ in range(16):
                action = env.unwrapped.reference_action()
                if action is None:
                    break
                obs, _, term, trunc, _ = env.step(action)
                texts += [action, obs]
                if term or trunc:
                    break
    return [t for t in texts if t]
