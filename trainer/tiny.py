"""A tiny policy that needs no download: a tokenizer trained here on the env's own text, and a
randomly initialised Qwen2-shaped model.

This is what `model.name_or_path: tiny` means. It lets the trainer's tests and the tiny-cpu
recipe learn on a CPU in minutes, from chance, with nothing fetched from a model hub. The
tokenizer is a real BPE tokenizer with a chat template, so the same code path (chat template,
token-in/token-out, stop strings) runs for it as for Qwen.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Sequence
from typing import Any

SPECIALS = ("<|pad|>", "<|unk|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>")

# The same shape of template as Qwen's ChatML: a turn is <|role|>content<|end|>; generation
# starts after <|assistant|>; <|end|> is the end-of-turn token (the tokenizer's EOS).
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


VOCAB_SIZE = 320  # the tokenizer's (at most: a small corpus may give fewer merges)


def train_tokenizer(texts: Iterable[str], vocab_size: int = VOCAB_SIZE,
                    words: Iterable[str] = ()) -> Any:
    """A BPE tokenizer (SentencePiece-style word boundaries) trained on `texts` in well under
    a second. Every printable ASCII character is in the alphabet, so any ASCII text encodes
    without unknown tokens; frequent words become single tokens. `words` are added as single
    tokens whatever their length (`model.tiny_words`: e.g. a harness's whole reply, so that a
    random model can emit one at all)."""
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
    if words:
        fast.add_tokens(list(dict.fromkeys(words)))
    return fast


def tiny_model(vocab_size: int, *, hidden_size: int = 128, layers: int = 2, heads: int = 4,
               kv_heads: int = 2, seed: int = 0, tie_embeddings: bool = True,
               prefer: Sequence[int] = (), prefer_mass: float = 0.9) -> Any:
    """A random Qwen2 causal LM (head_dim 32: vLLM's CPU backend rejects 16).

    `prefer`: token ids the untrained model gives about `prefer_mass` of its probability
    together, whatever the context (`model.tiny_words`: a harness's replies, so that a random
    policy plays some at all). It is an initialisation, held in the weights alone (every
    engine and a saved checkpoint see the same model): one direction is added to every
    embedding, which makes it dominate each position's final hidden state, and the preferred
    rows get more of it, which raises their logits."""
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
        model = Qwen2ForCausalLM(cfg)
        if prefer:
            _prefer(model, list(prefer), prefer_mass)
    return model


def _prefer(model: Any, ids: list[int], mass: float) -> None:
    """Raise the logits of `ids` at initialisation (see `tiny_model`), by a bias measured on
    random inputs so that they hold about `mass` of the probability together."""
    import math

    import torch

    emb = model.get_input_embeddings().weight
    vocab, hidden = emb.shape
    with torch.no_grad():
        d = torch.randn(hidden)
        d /= d.norm()
        # the shared direction (with tied embeddings also a logit shift common to all tokens)
        emb += 3.0 * emb.norm(dim=1).mean() * d
        probe = torch.randint(0, vocab, (4, 32))
        h = model.model(input_ids=probe).last_hidden_state  # final-normed hidden states
        along = (h @ d).mean().item()  # how much of d the last hidden state carries
        others = vocab - len(ids)
        target = math.log(mass / (1 - mass) * others / len(ids))  # the logit gap for `mass`
        out = model.get_output_embeddings().weight
        out[ids] += (target / along) * d


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
