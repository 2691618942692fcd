"""VLLMEngine against a teacher-forced transformers forward of the same weights.

Runs only where vLLM is installed (its own virtualenv: `bash scripts/vllm-venv.sh`, then
`.venv-vllm/bin/python -m pytest -m vllm tests/trainer/test_vllm_engine.py -p no:cacheprovider`);
in the main venv the module skips at import. Everything is built locally: a random 2-layer
Qwen2 (float32, so vLLM and transformers agree to ~1e-5) and a BPE tokenizer trained in
milliseconds on a generated corpus. One engine serves the whole module (start ~10-20 s on CPU);
every test first pushes the exact weights it compares against, so test order does not matter.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

# Before vLLM is imported: a small CPU KV cache, the model runner inside the engine-core process.
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest.importorskip("vllm")

import torch
from transformers import (
    PreTrainedTokenizerFast,
    Qwen2Config,
    Qwen2ForCausalLM,
)

from skyhub.trainer.engines import Completion, SamplingParams
from skyhub.trainer.engines.vllm import VLLMEngine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

VOCAB = 512
ATOL = 1e-3
WORDS = [
    "select", "from", "where", "join", "group", "order", "by", "limit", "count", "name", "users",
    "orders", "id", "price", "the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog",
    "answer", "sql", "table", "column", "value", "and", "or", "not", "insert", "update",
    "delete", "create", "index", "into", "values", "having", "distinct", "as", "on", "left",
    "right", "inner", "outer", "union", "all", "case", "when", "then", "else", "end", "null",
]


def make_tokenizer() -> PreTrainedTokenizerFast:
    """BPE over a generated corpus, padded to exactly VOCAB ids so that every id the random
    model can sample decodes to text (Metaspace: every token is a valid string)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    rng = random.Random(0)
    corpus = [" ".join(rng.choice(WORDS) for _ in range(12)) + " </sql>" for _ in range(400)]
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Metaspace()
    tok.decoder = decoders.Metaspace()
    tok.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=VOCAB,
                                                        special_tokens=["<unk>", "<eos>"]))
    tok.add_tokens([f"<x{i}>" for i in range(VOCAB - tok.get_vocab_size())])
    assert tok.get_vocab_size() == VOCAB
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", eos_token="<eos>")


def make_model() -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(hidden_size=128, num_attention_heads=4, num_key_value_heads=2,
                         num_hidden_layers=2, vocab_size=VOCAB, intermediate_size=256,
                         head_dim=32, max_position_embeddings=1024, tie_word_embeddings=False)
    return Qwen2ForCausalLM(config).eval()


def perturbed(state: dict[str, torch.Tensor], seed: int, scale: float = 0.05
              ) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in state.items()}


def hf_logprob_table(model: Qwen2ForCausalLM, state: dict[str, torch.Tensor],
                     prompt: list[int], completion: list[int], temperature: float
                     ) -> torch.Tensor:
    """[len(completion), vocab]: log softmax(logits / T) before each completion token,
    teacher-forced with `state`."""
    model.load_state_dict(state)
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1:-1].float()
    return torch.log_softmax(logits / temperature, dim=-1)


def hf_logprobs(model: Qwen2ForCausalLM, state: dict[str, torch.Tensor], prompt: list[int],
                completion: list[int], temperature: float) -> torch.Tensor:
    """log softmax(logits / T) of each completion token, teacher-forced with `state`."""
    table = hf_logprob_table(model, state, prompt, completion, temperature)
    return table.gather(-1, torch.tensor(completion)[:, None])[:, 0]


def assert_close(engine_lp: list[float] | torch.Tensor, ref: torch.Tensor) -> None:
    torch.testing.assert_close(torch.as_tensor(engine_lp, dtype=torch.float32), ref,
                               atol=ATOL, rtol=0.0)


class Harness:
    """The engine plus the weights it was last given (a fresh, increasing version each push)."""

    def __init__(self) -> None:
        self.tokenizer = make_tokenizer()
        self.model = make_model()
        self.base = {k: v.clone() for k, v in self.model.state_dict().items()}
        # float32 to compare with transformers at 1e-3 (vLLM picks bfloat16 on CPU otherwise);
        # eager: torch.compile's warm-up costs ~35 s on 2 cores for nothing at this size.
        self.engine = VLLMEngine(self.model, self.tokenizer, seed=0, max_model_len=512,
                                 dtype="float32", enforce_eager=True)
        self._versions = iter(range(1, 10_000))

    def push(self, state: dict[str, torch.Tensor]) -> int:
        version = next(self._versions)
        self.engine.update_weights(state, version)
        return version

    def prompts(self) -> list[list[int]]:
        return [self.tokenizer.encode("select name from users where"),
                self.tokenizer.encode("the quick brown fox"),
                self.tokenizer.encode("count")]


@pytest.fixture(scope="module")
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.engine.close()


def test_logprobs_match_transformers(h: Harness) -> None:
    version = h.push(h.base)
    for temperature in (1.0, 0.7):
        prompts = h.prompts()
        outs = h.engine.generate(prompts, SamplingParams(max_tokens=24, temperature=temperature,
                                                         seed=3))
        assert len(outs) == len(prompts)
        for prompt, c in zip(prompts, outs, strict=True):
            assert len(c.token_ids) == len(c.logprobs) == len(c.versions) == 24
            assert c.versions == [version] * 24
            assert c.finish_reason == "length"
            assert_close(c.logprobs, hf_logprobs(h.model, h.base, prompt, c.token_ids,
                                                 temperature))
    # Prompts of one batch get different seeds: a GRPO group repeats one prompt.
    same = h.engine.generate([prompts[0]] * 2, SamplingParams(max_tokens=16, seed=3))
    assert same[0].token_ids != same[1].token_ids


def test_top_p_does_not_renormalise(h: Harness) -> None:
    """top_p only restricts which tokens may be drawn: the logprob is still taken over the whole
    vocabulary (vLLM's own processed_logprobs would renormalise over the nucleus)."""
    h.push(h.base)
    prompts = h.prompts()
    outs = h.engine.generate(prompts, SamplingParams(max_tokens=24, temperature=0.7, top_p=0.3,
                                                     seed=4))
    for prompt, c in zip(prompts, outs, strict=True):
        table = hf_logprob_table(h.model, h.base, prompt, c.token_ids, 0.7)
        drawn = table.gather(-1, torch.tensor(c.token_ids)[:, None])[:, 0]
        assert_close(c.logprobs, drawn)
        # The draws did respect top_p: each token is in the nucleus, i.e. the tokens more
        # likely than it hold less than 0.3 of the mass (a small margin for float noise).
        probs = table.exp()
        mass_above = (probs * (probs > drawn.exp()[:, None])).sum(-1)
        assert (mass_above < 0.3 + 1e-4).all()
        assert drawn.max() < 0  # and nothing was renormalised to log 1 = 0 either


def test_update_weights_changes_the_policy(h: Harness) -> None:
    h.push(h.base)
    new = perturbed(h.base, seed=1)
    version = h.push(new)
    assert h.engine.version == version
    prompts = h.prompts()
    outs = h.engine.generate(prompts, SamplingParams(max_tokens=24, temperature=0.8, seed=5))
    for prompt, c in zip(prompts, outs, strict=True):
        assert c.versions == [version] * len(c.token_ids)
        assert_close(c.logprobs, hf_logprobs(h.model, new, prompt, c.token_ids, 0.8))
        old = hf_logprobs(h.model, h.base, prompt, c.token_ids, 0.8)
        assert (old - torch.tensor(c.logprobs)).abs().max() > 20 * ATOL


def test_in_flight_update(h: Harness) -> None:
    """An update lands while a long generation runs.

    What is exactly right to compare: `pause_generation(mode="keep", clear_cache=True)` keeps
    the requests but drops their KV cache; on resume vLLM re-prefills prompt + tokens so far
    with the new weights. So each token is an exact sample of the weights named by its version
    *given the whole prefix*: tokens before the switch match a teacher-forced forward with the
    old weights, tokens after it one with the new weights, both at the usual tolerance (if the
    old KV were kept, the new-version tokens would sit between the two and this would fail).
    """
    old_version = h.push(h.base)
    new = perturbed(h.base, seed=2)
    prompts = h.prompts()[:2]
    params = SamplingParams(max_tokens=400, temperature=1.0, seed=11)
    result: dict[str, Any] = {}

    def run() -> None:
        t0 = time.perf_counter()
        result["outs"] = h.engine.generate(prompts, params)
        result["seconds"] = time.perf_counter() - t0

    # The only timing assumption: the update lands mid-generation. So the wait before it is a
    # fraction of how long this very generation takes on this machine, measured first (a fixed
    # sleep was longer than the whole generation on a faster machine).
    run()
    full = result["seconds"]
    for fraction in (0.3, 0.5, 0.15):
        worker = threading.Thread(target=run)
        worker.start()
        time.sleep(fraction * full)
        new_version = h.push(new)
        worker.join(timeout=120)
        assert not worker.is_alive()
        outs: list[Completion] = result["outs"]
        if all(old_version in c.versions and new_version in c.versions for c in outs):
            break
        old_version = h.push(h.base)
    else:
        pytest.fail(f"the update never landed mid-generation (a whole generation took "
                    f"{full:.2f} s): {[sorted(set(c.versions)) for c in outs]}")

    for prompt, c in zip(prompts, outs, strict=True):
        assert c.finish_reason == "length" and len(c.token_ids) == 400
        switch = c.versions.index(new_version)
        assert 0 < switch < 400
        assert c.versions == [old_version] * switch + [new_version] * (400 - switch)
        ref_old = hf_logprobs(h.model, h.base, prompt, c.token_ids, 1.0)
        ref_new = hf_logprobs(h.model, new, prompt, c.token_ids, 1.0)
        got = torch.tensor(c.logprobs)
        assert_close(got[:switch], ref_old[:switch])
        assert_close(got[switch:], ref_new[switch:])
        assert (got[switch:] - ref_old[switch:]).abs().max() > 20 * ATOL


def test_stop_strings_stop_tokens_and_length(h: Harness) -> None:
    h.push(h.base)
    prompt = h.tokenizer.encode("select name from")
    params = SamplingParams(max_tokens=40, temperature=1.0, seed=7)
    (full,) = h.engine.generate([prompt], params)
    assert full.finish_reason == "length" and len(full.token_ids) == 40

    # A stop token: generation ends at its first occurrence, and the token is kept.
    stop_id = full.token_ids[20]
    first = full.token_ids.index(stop_id)
    (c,) = h.engine.generate([prompt], SamplingParams(max_tokens=40, temperature=1.0, seed=7,
                                                      stop_token_ids=(stop_id,)))
    assert c.finish_reason == "stop"
    assert c.token_ids == full.token_ids[:first + 1]
    assert len(c.logprobs) == len(c.versions) == first + 1

    # A stop string (the text of a later token): the text ends with it, the tokens are a
    # prefix of the unstopped run's.
    stop = next(s for s in (h.tokenizer.decode([t]).strip() for t in full.token_ids[25:])
                if len(s) >= 2 and s in full.text)
    (c,) = h.engine.generate([prompt], SamplingParams(max_tokens=40, temperature=1.0, seed=7,
                                                      stop=(stop,)))
    assert c.finish_reason == "stop"
    assert c.text.endswith(stop) and c.text.count(stop) == 1
    assert c.token_ids == full.token_ids[:len(c.token_ids)]
    assert len(c.token_ids) < 40

    # max_tokens with a stop token that never comes.
    unused = next(t for t in range(VOCAB) if t not in full.token_ids)
    (c,) = h.engine.generate([prompt], SamplingParams(max_tokens=7, temperature=1.0, seed=7,
                                                      stop_token_ids=(unused,)))
    assert c.finish_reason == "length" and c.token_ids == full.token_ids[:7]
