"""VLLMEngine against a teacher-forced transformers forward of the same weights.

Runs only where vLLM is installed (its own virtualenv: `bash scripts/vllm-venv.sh`, then
`.venv-vllm/bin/python -m pytest -m vllm tests/trainer/test_vllm_engine.py -p no:cacheprovider`);
in the main venv the module skips at import. Everything is built locally: a random 2-layer
Qwen2 (float32, so vLLM and transformers agree to ~1e-5) and a BPE tokenizer trained in
milliseconds on a generated corpus. One engine serves the whole module (start ~10-20 s on CPU);
every test first pushes the exact weights it compares against, so test order does not matter.
A second engine (the file fallback with `keep_kv_cache`) serves the two tests about those.
vLLM's NCCL/IPC weight transfer and sleep mode need a GPU: their tests drive our trainer side
with AsyncLLM and CUDA/NCCL replaced at that boundary.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
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

from skyhub.errors import UsageError
from skyhub.trainer.errors import WeightSyncError
from skyhub.trainer.inference import Completion, SamplingParams
from skyhub.trainer.inference.vllm import VLLMEngine, _EngineClient, _nccl_init, _WeightSync
from skyhub.trainer.weight_sync import check_sync

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
    # the text is the ids' decoding (as the hf engine's): it holds the stop string once, and
    # the last token completed it (that token may reach past it: "index" for "inde")
    assert c.text == h.tokenizer.decode(c.token_ids, skip_special_tokens=True)
    assert c.text.count(stop) == 1
    assert stop not in h.tokenizer.decode(c.token_ids[:-1], skip_special_tokens=True)
    assert c.token_ids == full.token_ids[:len(c.token_ids)]
    assert len(c.token_ids) < 40

    # max_tokens with a stop token that never comes.
    unused = next(t for t in range(VOCAB) if t not in full.token_ids)
    (c,) = h.engine.generate([prompt], SamplingParams(max_tokens=7, temperature=1.0, seed=7,
                                                      stop_token_ids=(unused,)))
    assert c.finish_reason == "length" and c.token_ids == full.token_ids[:7]


# -- per-request interface, scoring ------------------------------------------------------------
def test_text_is_the_tokenizers_decoding_of_the_sampled_ids(h: Harness) -> None:
    """The env is scored on `Completion.text`: it must be what the sampled ids decode to.
    vLLM's own detokenizer leaves this Metaspace tokenizer's "▁" in ("▁word"), so a toy-recall
    policy trained on vLLM rollouts scored 0 whatever it answered."""
    params = SamplingParams(max_tokens=6, temperature=1.0)
    outs = h.engine.generate(h.prompts() * 4, params, seeds=list(range(12)))
    for c in outs:
        assert c.text == h.tokenizer.decode(c.token_ids, skip_special_tokens=True)
        assert "▁" not in c.text
    assert any(" " in c.text or c.text.strip() for c in outs)


def test_submit_completes_each_request_on_its_own(h: Harness) -> None:
    """A short request submitted after a long one is done while the long one still runs, and
    a submitted request is the same sample as the batch call with the same seed."""
    version = h.push(h.base)
    prompt = h.prompts()[0]
    long = h.engine.submit(prompt, SamplingParams(max_tokens=300, seed=1), 21)
    short = h.engine.submit(h.prompts()[1], SamplingParams(max_tokens=4, seed=1), 22)
    c = short.result(timeout=300)
    assert not long.done()
    assert len(c.token_ids) == 4 and c.versions == [version] * 4
    assert len(long.result(timeout=300).token_ids) == 300
    params = SamplingParams(max_tokens=12, temperature=0.9)
    (batch,) = h.engine.generate([prompt], params, seeds=[5])
    assert h.engine.submit(prompt, params, 5).result(timeout=300).token_ids == batch.token_ids


def test_score_is_the_logprob_of_each_token_at_temperature_1(h: Harness) -> None:
    new = perturbed(h.base, seed=3)
    h.push(new)
    seq = h.tokenizer.encode("select count from orders where price")
    ref = hf_logprobs(h.model, new, seq[:1], seq[1:], 1.0)
    assert_close(h.engine.score(seq), ref)
    with pytest.raises(UsageError, match="at least 2"):
        h.engine.score(seq[:1])


# -- weight sync in memory, and its canary ---------------------------------------------------------
def test_memory_sync_writes_no_file_and_loads_in_buckets(h: Harness) -> None:
    """The default sync never touches disk, and a model split over many buckets (a layer's
    weights across two of them) loads as exactly as one bucket does."""
    sync = h.engine._sync
    assert sync is not None and sync.kind == "memory"
    new = perturbed(h.base, seed=4)
    h.push(h.base)
    trainer = sync.trainer
    sent = trainer.buckets_sent
    trainer.bucket_bytes = 48 << 10  # ~30 buckets for this model, most layers split
    try:
        h.push(new)
    finally:
        trainer.bucket_bytes = 256 << 20
    assert trainer.buckets_sent - sent > 10
    assert not (h.engine._tmp / "weights").exists()
    seq = h.tokenizer.encode("the lazy dog jumps over the quick brown fox")
    assert_close(h.engine.score(seq), hf_logprobs(h.model, new, seq[:1], seq[1:], 1.0))
    h.model.load_state_dict(new)
    check_sync(h.engine, h.model)


def test_canary_passes_after_a_sync_and_fails_for_one_that_did_nothing(h: Harness) -> None:
    h.push(h.base)
    h.model.load_state_dict(h.base)
    assert check_sync(h.engine, h.model) < ATOL
    new = perturbed(h.base, seed=5)
    h.push(new)
    h.model.load_state_dict(new)
    assert check_sync(h.engine, h.model) < ATOL

    # A transport that starts and finishes the update but loads nothing: the version is
    # relabelled, the weights stay; only the canary can tell.
    trainer = h.engine._sync.trainer
    real = trainer.send_weights

    def nothing() -> None:
        trainer.client.start_weight_update()
        trainer.client.finish_weight_update()

    trainer.send_weights = nothing
    try:
        version = h.push(perturbed(h.base, seed=6))
    finally:
        trainer.send_weights = real
    h.model.load_state_dict(perturbed(h.base, seed=6))
    assert h.engine.version == version
    with pytest.raises(WeightSyncError, match=f"version {version}\\) did not take"):
        check_sync(h.engine, h.model)


# -- the file fallback, keeping the KV cache -------------------------------------------------------
@pytest.fixture(scope="module")
def kept(h: Harness) -> Iterator[VLLMEngine]:
    engine = VLLMEngine(h.model, h.tokenizer, seed=0, max_model_len=512, dtype="float32",
                        enforce_eager=True, weight_sync="file", keep_kv_cache=True)
    yield engine
    engine.close()


def test_file_fallback_loads_the_weights(h: Harness, kept: VLLMEngine) -> None:
    assert kept._sync is None
    new = perturbed(h.base, seed=7)
    kept.update_weights(new, 1)
    assert (kept._tmp / "weights" / "model.safetensors").exists()
    seq = h.tokenizer.encode("insert into users values")
    assert_close(kept.score(seq), hf_logprobs(h.model, new, seq[:1], seq[1:], 1.0))


def test_keep_kv_cache_continues_on_the_old_prefix(h: Harness, kept: VLLMEngine) -> None:
    """With keep_kv_cache the running requests are not re-prefilled: tokens after the switch
    are sampled from the new weights on top of the KV the old ones built, so they are not
    what a teacher-forced forward of the new weights gives (the default engine's are, see
    test_in_flight_update). Prefix caching is off, so no new request can reuse old KV."""
    assert kept._llm.vllm_config.cache_config.enable_prefix_caching is False
    new = perturbed(h.base, seed=8)
    old_version = 10
    kept.update_weights(h.base, old_version)
    prompt = h.prompts()[0]
    params = SamplingParams(max_tokens=400, temperature=1.0, seed=12)
    t0 = time.perf_counter()
    kept.generate([prompt], params)
    full = time.perf_counter() - t0  # as in test_in_flight_update: no fixed sleep
    for version, fraction in ((11, 0.3), (13, 0.5), (15, 0.15)):
        future = kept.submit(prompt, params, 12)
        time.sleep(fraction * full)
        kept.update_weights(new, version)
        c = future.result(timeout=300)
        if old_version in c.versions and version in c.versions:
            break
        old_version = version + 1
        kept.update_weights(h.base, old_version)
    else:
        pytest.fail("the update never landed mid-generation")
    switch = c.versions.index(version)
    got = torch.tensor(c.logprobs)
    ref_old = hf_logprobs(h.model, h.base, prompt, c.token_ids, 1.0)
    ref_new = hf_logprobs(h.model, new, prompt, c.token_ids, 1.0)
    assert_close(got[:switch], ref_old[:switch])
    assert (got[switch:] - ref_new[switch:]).abs().max() > 20 * ATOL


# -- GPU-only paths, mocked at the CUDA / NCCL boundary --------------------------------------------
class FakeAsyncLLM:
    """AsyncLLM's weight-sync and sleep surface (what crosses into the engine process),
    recording each call."""

    def __init__(self, fail_update: bool = False) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.fail_update = fail_update
        self.vllm_config = SimpleNamespace(model_config=SimpleNamespace(enable_sleep_mode=True))

    async def pause_generation(self, *, mode: str, clear_cache: bool) -> None:
        self.calls.append(("pause", mode, clear_cache))

    async def resume_generation(self) -> None:
        self.calls.append(("resume",))

    async def init_weight_transfer_engine(self, request: Any) -> None:
        self.calls.append(("init", request.init_info))

    async def start_weight_update(self) -> None:
        self.calls.append(("start",))

    async def update_weights(self, request: Any) -> None:
        if self.fail_update:
            raise RuntimeError("worker rejected the update")
        self.calls.append(("update", request.update_info))

    async def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.calls.append(("finish", weight_version))

    async def sleep(self, level: int = 1) -> None:
        self.calls.append(("sleep", level))

    async def wake_up(self) -> None:
        self.calls.append(("wake_up",))


def small_weights() -> list[tuple[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [("model.embed_tokens.weight", torch.randn(8, 4, generator=g)),
            ("model.layers.0.mlp.up_proj.weight", torch.randn(6, 4, generator=g)),
            ("lm_head.weight", torch.randn(8, 4, generator=g).to(torch.bfloat16))]


def test_nccl_sync_drives_vllm_nccl_weight_transfer(monkeypatch: pytest.MonkeyPatch) -> None:
    """`weight_sync="nccl"`: vLLM's NCCLTrainerWeightTransferEngine, with only the NCCL
    communicator faked: the workers are told to join as ranks 1.., generation is paused
    around the transfer, each tensor is broadcast in the order the update info announces,
    and the version is set when the workers finish."""
    from vllm.distributed.weight_transfer import nccl_engine

    sent: list[torch.Tensor] = []

    class Comm:
        def broadcast(self, tensor: torch.Tensor, src: int, stream: Any) -> None:
            assert src == 0
            sent.append(tensor.clone())

        def destroy(self) -> None:
            pass

    monkeypatch.setattr(nccl_engine, "open_trainer_endpoint", lambda info: Comm())
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: None)
    llm = FakeAsyncLLM()
    sync = _WeightSync("nccl", _EngineClient(llm, asyncio.run, keep_kv_cache=False),
                       {"master_address": "127.0.0.1", "master_port": 29561, "world_size": 3,
                        "packed": False})
    weights = small_weights()
    sync.send(weights, 7)
    sync.send(weights, 8)  # the communicator is made once, then reused
    kinds = [c[0] for c in llm.calls]
    assert kinds == ["init"] + ["pause", "start", "update", "finish", "resume"] * 2
    init = llm.calls[0][1]
    assert (init["rank_offset"], init["world_size"], init["packed"]) == (1, 3, False)
    assert llm.calls[1] == ("pause", "keep", True)
    update = llm.calls[3][1]
    assert update["names"] == [n for n, _ in weights]
    assert update["dtype_names"] == ["float32", "float32", "bfloat16"]
    assert update["shapes"] == [list(t.shape) for _, t in weights]
    assert llm.calls[4] == ("finish", "7") and llm.calls[9] == ("finish", "8")
    assert len(sent) == 6
    for got, (_, want) in zip(sent, weights * 2, strict=True):
        assert torch.equal(got, want)
    assert sync.source.pairs == []  # the learner's tensors are not held between syncs
    # The defaults VLLMEngine fills in: rank 0 + every worker (TP 4 x DP 2), a free port here.
    init = _nccl_init({"packed": True}, SimpleNamespace(world_size=4, data_parallel_size=2))
    assert init["world_size"] == 9 and init["master_address"] == "127.0.0.1"
    assert 0 < init["master_port"] < 65536 and init["packed"] is True


def test_ipc_sync_ships_cuda_ipc_handles(monkeypatch: pytest.MonkeyPatch) -> None:
    """`weight_sync="ipc"`: vLLM's IPCTrainerWeightTransferEngine with the CUDA calls faked:
    one handle per tensor, keyed by the GPU's UUID, in one update between pause and resume."""
    from vllm.distributed.weight_transfer import ipc_engine

    exported: list[torch.Tensor] = []

    def reduce_tensor(t: torch.Tensor) -> tuple[Any, tuple[Any, ...]]:
        exported.append(t)
        return (None, ("handle", len(exported) - 1))

    monkeypatch.setattr(ipc_engine, "reduce_tensor", reduce_tensor)
    monkeypatch.setattr(torch.accelerator, "current_device_index", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda i: SimpleNamespace(uuid="GPU-test"))
    monkeypatch.setattr(torch.cuda, "ipc_collect", lambda: None)
    llm = FakeAsyncLLM()
    sync = _WeightSync("ipc", _EngineClient(llm, asyncio.run, keep_kv_cache=True),
                       {"packed": False})
    weights = small_weights()
    sync.send(weights, 3)
    assert [c[0] for c in llm.calls] == ["init", "pause", "start", "update", "finish",
                                         "resume"]
    assert llm.calls[0] == ("init", {"packed": False})
    assert llm.calls[1] == ("pause", "keep", False)  # keep_kv_cache: no cache reset
    update = llm.calls[3][1]
    assert update["names"] == [n for n, _ in weights]
    assert update["ipc_handles"] == [{"GPU-test": ("handle", i)} for i in range(3)]
    for got, (_, want) in zip(exported, weights, strict=True):
        assert torch.equal(got, want)


def test_a_failed_sync_resumes_generation() -> None:
    llm = FakeAsyncLLM(fail_update=True)
    sync = _WeightSync("memory", _EngineClient(llm, asyncio.run, keep_kv_cache=False),
                       {"bucket_bytes": 1 << 20})
    with pytest.raises(RuntimeError, match="rejected"):
        sync.send(small_weights(), 2)
    # The workers' update session is closed without relabelling, then generation resumes.
    assert llm.calls[1:] == [("pause", "keep", True), ("start",), ("finish", None),
                             ("resume",)]
    llm.fail_update = False
    sync.send(small_weights(), 3)  # the next sync starts cleanly
    assert llm.calls[-2:] == [("finish", "3"), ("resume",)]
    sync.close()


def test_sleep_wake_up_and_gpu_only_options(h: Harness) -> None:
    """Sleep mode is GPU-only in the pinned vLLM: on CPU the engine refuses it up front, and
    the calls reach AsyncLLM's sleep/wake_up (mocked) when it is on; likewise vLLM's GPU weight
    transfers."""
    with pytest.raises(UsageError, match="needs a CUDA"):
        VLLMEngine(h.model, h.tokenizer, enable_sleep_mode=True)
    with pytest.raises(UsageError, match="use weight_sync='memory'"):
        VLLMEngine(h.model, h.tokenizer, weight_sync="nccl")
    with pytest.raises(UsageError, match="enable_sleep_mode=True"):
        h.engine.sleep(1)
    engine = VLLMEngine.__new__(VLLMEngine)
    llm = FakeAsyncLLM()
    engine._llm, engine._run, engine._in_flight = llm, asyncio.run, 0
    engine.sleep(1)
    engine.wake_up()
    engine.sleep(level=2)
    assert llm.calls == [("sleep", 1), ("wake_up",), ("sleep", 2)]
    with pytest.raises(UsageError, match="level must be 1 or 2"):
        engine.sleep(3)
    engine._in_flight = 2
    with pytest.raises(UsageError, match="2 requests in flight"):
        engine.sleep(1)
