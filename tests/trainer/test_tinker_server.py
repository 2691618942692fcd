"""skyhub's Tinker-compatible training server, driven by the official `tinker` SDK as client.

One server on a tiny random Qwen2 (CPU, nothing downloaded) is shared by the module; each test
makes its own LoRA training clients on it. The tests check what a Tinker user relies on:
supervised fine-tuning memorizes, an RL loop with the importance-sampling loss raises a
verifiable reward, checkpoints round-trip (also across a server restart), two clients train
at once without touching each other's weights, and unsupported requests fail with messages
that say what is wrong while the server keeps serving.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
tinker = pytest.importorskip("tinker")

from tinker import types  # noqa: E402

from skyhub.trainer.tinker import TinkerServerThread, tiny_base_model  # noqa: E402

API_KEY = "tml-skyhub-test"

# Memorization sets: a short prompt (weight 0) and a continuation (weight 1, then EOS). The
# words are single tokens of `tiny_base_model`'s tokenizer, so a continuation is a chain of
# distinct tokens that a tiny random model can learn in a few steps.
SFT_A = [
    ("The 1", " quick brown fox"),
    ("The 2", " lazy jumps over"),
    ("The 3", " Tinker trains models"),
    ("The 4", " skyhub serves agents"),
]
SFT_B = [
    ("The 1", " answers questions."),
    ("The 2", " the dog."),
    ("The 3", " and skyhub"),
    ("The 4", " The environments,"),
]


# ---------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="module")
def base_model(tmp_path_factory: pytest.TempPathFactory) -> str:
    return tiny_base_model(tmp_path_factory.mktemp("tinker-base"))


@pytest.fixture(scope="module")
def server(base_model: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    state = tmp_path_factory.mktemp("tinker-state")
    with TinkerServerThread(base_model=base_model, state_dir=state, port=0, threads=1) as srv:
        yield srv


@pytest.fixture(scope="module")
def service(server: Any) -> Iterator[Any]:
    sc = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
    yield sc
    close_quietly(sc)


@pytest.fixture(scope="module")
def tok(service: Any, base_model: str) -> Any:
    tc = service.create_lora_training_client(base_model=base_model, rank=8).result()
    return tc.get_tokenizer()


# ---------------------------------------------------------------------------------------------
# helpers


def close_quietly(sc: Any) -> None:
    """Ends the SDK session; closing is not what these tests check, so failures are ignored."""
    with contextlib.suppress(Exception):
        sc.close("success").result(timeout=20)


def encode(tok: Any, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


def sft_examples(tok: Any, pairs: list[tuple[str, str]]) -> list[tuple[list[int], list[int]]]:
    """(prompt tokens, continuation tokens + EOS) per pair."""
    return [(encode(tok, p), [*encode(tok, c), tok.eos_token_id]) for p, c in pairs]


def sft_datum(prompt: list[int], cont: list[int]) -> types.Datum:
    tokens = prompt + cont
    weights = [0.0] * len(prompt) + [1.0] * len(cont)
    return types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                       loss_fn_inputs={"target_tokens": tokens[1:], "weights": weights[1:]})


def sft_data(tok: Any, pairs: list[tuple[str, str]]) -> list[types.Datum]:
    return [sft_datum(p, c) for p, c in sft_examples(tok, pairs)]


def total_weight(data: list[types.Datum]) -> float:
    return float(sum(d.loss_fn_inputs["weights"].to_numpy().sum() for d in data))


def mean_loss(out: Any, data: list[types.Datum]) -> float:
    """Mean per-token loss of a cross-entropy forward(_backward) (the server sums)."""
    return out.metrics["loss:sum"] / total_weight(data)


def sft_step(tc: Any, data: list[types.Datum], lr: float) -> float:
    fb = tc.forward_backward(data, "cross_entropy")
    opt = tc.optim_step(types.AdamParams(learning_rate=lr))
    out = fb.result()
    opt.result()
    return mean_loss(out, data)


def forward_logprobs(tc: Any, data: list[types.Datum]) -> list[np.ndarray]:
    out = tc.forward(data, "cross_entropy").result()
    assert len(out.loss_fn_outputs) == len(data)
    return [np.asarray(o["logprobs"].to_numpy(), dtype=np.float64) for o in out.loss_fn_outputs]


def eval_loss(tc: Any, data: list[types.Datum]) -> float:
    return mean_loss(tc.forward(data, "cross_entropy").result(), data)


def greedy(sampler: Any, prompt: list[int], max_tokens: int, eos: int) -> Any:
    params = types.SamplingParams(max_tokens=max_tokens, temperature=0.0, stop=[eos])
    res = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                         sampling_params=params).result()
    assert len(res.sequences) == 1
    return res.sequences[0]


def assert_close_lists(a: list[np.ndarray], b: list[np.ndarray], atol: float) -> None:
    assert [len(x) for x in a] == [len(y) for y in b]
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, atol=atol, rtol=0)


def max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b, strict=True))


def error_text(exc: BaseException) -> str:
    return str(getattr(exc, "message", None) or exc)


# ---------------------------------------------------------------------------------------------
# 1. supervised fine-tuning


def test_sft_memorizes_continuations_and_sampler_reproduces_them(service, base_model, tok):
    tc = service.create_lora_training_client(base_model=base_model, rank=16).result()
    eos = tok.eos_token_id
    examples = sft_examples(tok, SFT_A)
    data = [sft_datum(p, c) for p, c in examples]

    losses = [sft_step(tc, data, lr=5e-3) for _ in range(20)]
    assert all(math.isfinite(x) for x in losses), losses
    # a random model starts near log(vocab): the loss is a sum over weighted tokens
    assert abs(losses[0] - math.log(len(tok))) < 0.5, losses
    assert losses[-1] <= 0.5 * losses[0], losses

    sampler = tc.save_weights_and_get_sampling_client().result()
    for prompt, cont in examples:
        seq = greedy(sampler, prompt, max_tokens=len(cont) + 4, eos=eos)
        tokens = list(seq.tokens)
        # the memorized continuation, ending at EOS (whether or not the stop token is kept)
        assert tokens in (cont, cont[:-1]), (tok.decode(prompt), tokens, cont)
        assert seq.logprobs is not None
        assert len(seq.logprobs) == len(tokens)
        assert all(lp <= 1e-6 for lp in seq.logprobs), seq.logprobs
        assert seq.stop_reason == "stop", seq.stop_reason

    # the sampler scores a prompt the way the trainer does
    fwd = forward_logprobs(tc, data)
    for (prompt, cont), lp in zip(examples, fwd, strict=True):
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt + cont)).result()
        assert len(scored) == len(prompt) + len(cont)
        assert scored[0] is None
        assert all(isinstance(x, float) for x in scored[1:]), scored
        np.testing.assert_allclose(np.asarray(scored[1:], dtype=np.float64), lp, atol=1e-3)
        # memorized: the continuation is likely under the trained weights
        assert float(np.mean(lp[len(prompt) - 1:])) > -1.5, lp


# ---------------------------------------------------------------------------------------------
# 2. RL with importance sampling / PPO


def rl_datum(prompt: list[int], tokens: list[int], logprobs: list[float],
             advantage: float) -> types.Datum:
    full = prompt + tokens
    n_prompt = len(prompt) - 1  # target positions that predict prompt tokens
    return types.Datum(
        model_input=types.ModelInput.from_ints(full[:-1]),
        loss_fn_inputs={
            "target_tokens": full[1:],
            "logprobs": [0.0] * n_prompt + [float(x) for x in logprobs],
            "advantages": [0.0] * n_prompt + [advantage] * len(tokens),
        },
    )


def test_rl_importance_sampling_raises_a_verifiable_reward(service, base_model, tok):
    tc = service.create_lora_training_client(base_model=base_model, rank=8).result()
    eos = tok.eos_token_id
    prompt = encode(tok, "pick:")
    # the rewarded tokens: a quarter of the vocabulary, never EOS
    target = {i for i in range(len(tok)) if i % 4 == 1 and i != eos}
    max_tokens, num_samples = 8, 16

    def reward(tokens: list[int]) -> float:
        return sum(t in target for t in tokens) / max_tokens

    rewards: list[float] = []
    for it in range(12):
        sampler = tc.save_weights_and_get_sampling_client().result()
        params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=1000 + it)
        res = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=num_samples,
                             sampling_params=params).result()
        seqs = [s for s in res.sequences if len(s.tokens) > 0]
        assert len(res.sequences) == num_samples
        assert len(seqs) >= num_samples // 2
        rs = [reward(list(s.tokens)) for s in seqs]
        rewards.append(float(np.mean(rs)))
        baseline = float(np.mean(rs))
        data = [rl_datum(prompt, list(s.tokens), list(s.logprobs), r - baseline)
                for s, r in zip(seqs, rs, strict=True)]
        fb = tc.forward_backward(data, "importance_sampling")
        opt = tc.optim_step(types.AdamParams(learning_rate=1e-2))
        out = fb.result()
        opt.result()
        loss = out.metrics["loss:sum"]
        assert math.isfinite(loss)
        if it == 0:
            # on policy the ratio is 1: the loss is -sum(advantages) and the trainer's
            # logprobs of the sampled tokens are the sampler's
            expected = -sum((r - baseline) * len(s.tokens) for s, r in zip(seqs, rs, strict=True))
            assert loss == pytest.approx(expected, abs=1e-2), (loss, expected)
            for s, o in zip(seqs, out.loss_fn_outputs, strict=True):
                lp = o["logprobs"].to_numpy()[len(prompt) - 1:]
                np.testing.assert_allclose(lp, np.asarray(s.logprobs), atol=1e-3)

    first, last = rewards[0], float(np.mean(rewards[-3:]))
    assert last >= first + 0.25, rewards

    # one PPO step with clip thresholds, on policy: loss = -sum(advantages), finite
    sampler = tc.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0, seed=7)
    res = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=8,
                         sampling_params=params).result()
    seqs = [s for s in res.sequences if len(s.tokens) > 0]
    rs = [reward(list(s.tokens)) for s in seqs]
    baseline = float(np.mean(rs))
    # a reward spread is not guaranteed at this point; unit-variance advantages keep it testable
    advs = [r - baseline if len(set(rs)) > 1 else (1.0 if i % 2 else -1.0)
            for i, r in enumerate(rs)]
    data = [rl_datum(prompt, list(s.tokens), list(s.logprobs), a)
            for s, a in zip(seqs, advs, strict=True)]
    clip = {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}
    out = tc.forward_backward(data, "ppo", loss_fn_config=clip).result()
    tc.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    loss = out.metrics["loss:sum"]
    assert math.isfinite(loss)
    expected = -sum(a * len(s.tokens) for s, a in zip(seqs, advs, strict=True))
    assert loss == pytest.approx(expected, abs=1e-2), (loss, expected)

    # off policy (sampler logprobs 1 nat lower, ratio ~e): the clip thresholds shape the loss
    stale = [rl_datum(prompt, list(s.tokens), [x - 1.0 for x in s.logprobs], a)
             for s, a in zip(seqs, advs, strict=True)]
    for low, high in ((0.8, 1.2), (0.5, 2.0)):
        cfg = {"clip_low_threshold": low, "clip_high_threshold": high}
        out = tc.forward(stale, "ppo", loss_fn_config=cfg).result()
        expected = 0.0
        for d, o in zip(stale, out.loss_fn_outputs, strict=True):
            ratio = np.exp(o["logprobs"].to_numpy() - d.loss_fn_inputs["logprobs"].to_numpy())
            adv = d.loss_fn_inputs["advantages"].to_numpy()
            expected -= float(np.minimum(ratio * adv, np.clip(ratio, low, high) * adv).sum())
        assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-3, abs=1e-3), cfg


# ---------------------------------------------------------------------------------------------
# 3. checkpoints


def test_save_and_load_state_round_trip(service, base_model, tok):
    eos = tok.eos_token_id
    data = sft_data(tok, SFT_A)
    probe = sft_data(tok, SFT_B)  # scored, never trained on here
    tc = service.create_lora_training_client(base_model=base_model, rank=8).result()
    for _ in range(3):
        sft_step(tc, data, lr=5e-3)
    saved = tc.save_state("round-trip").result().path
    assert saved.startswith("tinker://"), saved
    lp_saved = forward_logprobs(tc, data + probe)

    for _ in range(3):
        sft_step(tc, data, lr=5e-3)
    lp_later = forward_logprobs(tc, data + probe)
    assert max_diff(lp_saved, lp_later) > 1e-3  # training went on: the weights changed

    tc.load_state(saved).result()
    assert_close_lists(forward_logprobs(tc, data + probe), lp_saved, atol=1e-4)

    tc2 = service.create_training_client_from_state(saved).result()
    assert_close_lists(forward_logprobs(tc2, data + probe), lp_saved, atol=1e-4)

    # sampler weights saved under a name serve what the trainer holds now
    sampler_path = tc.save_weights_for_sampler("round-trip-sampler").result().path
    assert sampler_path.startswith("tinker://"), sampler_path
    named = service.create_sampling_client(model_path=sampler_path).result()
    current = tc.save_weights_and_get_sampling_client().result()
    for prompt, _ in sft_examples(tok, SFT_A):
        a = greedy(named, prompt, max_tokens=6, eos=eos)
        b = greedy(current, prompt, max_tokens=6, eos=eos)
        assert list(a.tokens) == list(b.tokens)
        assert len(a.tokens) > 0
    full = [p + c for p, c in sft_examples(tok, SFT_A)]
    base = service.create_sampling_client(base_model=base_model).result()
    for tokens, lp in zip(full, lp_saved[:len(full)], strict=True):
        scored = named.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        np.testing.assert_allclose(np.asarray(scored[1:], dtype=np.float64), lp, atol=1e-3)
        # ... and not the base model's
        scored_base = base.compute_logprobs(types.ModelInput.from_ints(tokens)).result()
        assert float(np.max(np.abs(np.asarray(scored_base[1:]) - lp))) > 1e-3


def test_checkpoint_survives_server_restart(base_model, tok, tmp_path: Path):
    state = tmp_path / "state"
    data = sft_data(tok, SFT_A)
    with TinkerServerThread(base_model=base_model, state_dir=state, port=0, threads=1) as srv:
        sc = tinker.ServiceClient(base_url=srv.url, api_key=API_KEY)
        tc = sc.create_lora_training_client(base_model=base_model, rank=8).result()
        for _ in range(3):
            sft_step(tc, data, lr=5e-3)
        saved = tc.save_state("before-restart").result().path
        lp_saved = forward_logprobs(tc, data)
        close_quietly(sc)

    with TinkerServerThread(base_model=base_model, state_dir=state, port=0, threads=1) as srv:
        sc = tinker.ServiceClient(base_url=srv.url, api_key=API_KEY)
        try:
            tc = sc.create_training_client_from_state(saved).result()
            assert_close_lists(forward_logprobs(tc, data), lp_saved, atol=1e-4)
            # and it trains on from there
            before = eval_loss(tc, data)
            sft_step(tc, data, lr=5e-3)
            assert eval_loss(tc, data) < before
        finally:
            close_quietly(sc)


# ---------------------------------------------------------------------------------------------
# 4. two clients at once


def test_two_clients_train_concurrently_without_mixing(server, base_model, tok):
    data = {"A": sft_data(tok, SFT_A), "B": sft_data(tok, SFT_B)}
    losses: dict[str, list[float]] = {}
    clients: dict[str, Any] = {}
    services: dict[str, Any] = {}
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def train(name: str) -> None:
        try:
            sc = tinker.ServiceClient(base_url=server.url, api_key=API_KEY)
            services[name] = sc
            tc = sc.create_lora_training_client(base_model=base_model, rank=8).result()
            clients[name] = tc
            start.wait(timeout=60)
            losses[name] = [sft_step(tc, data[name], lr=5e-3) for _ in range(5)]
        except BaseException as e:  # reported below, in the test's thread
            errors.append(e)
            start.abort()

    threads = [threading.Thread(target=train, args=(n,)) for n in ("A", "B")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)
    try:
        assert not any(t.is_alive() for t in threads), "a training thread did not finish"
        assert not errors, errors
        for name in ("A", "B"):
            assert losses[name][-1] < losses[name][0], (name, losses[name])
        own_a, other_a = eval_loss(clients["A"], data["A"]), eval_loss(clients["B"], data["A"])
        own_b, other_b = eval_loss(clients["B"], data["B"]), eval_loss(clients["A"], data["B"])
        assert own_a < other_a, (own_a, other_a)
        assert own_b < other_b, (own_b, other_b)
    finally:
        for sc in services.values():
            close_quietly(sc)


# ---------------------------------------------------------------------------------------------
# 5. unsupported requests


@pytest.mark.timeout(180)
def test_unsupported_requests_fail_clearly_and_server_keeps_serving(service, base_model, tok):
    data = sft_data(tok, SFT_A)

    def fresh() -> Any:
        return service.create_lora_training_client(base_model=base_model, rank=8).result()

    def still_works() -> None:
        out = fresh().forward(data, "cross_entropy").result()
        assert math.isfinite(out.metrics["loss:sum"])

    tc = fresh()
    with pytest.raises(tinker.RequestFailedError) as info:
        tc.forward_backward(data, "cispo").result()
    msg = error_text(info.value)
    assert "cispo" in msg, msg
    for supported in ("cross_entropy", "importance_sampling", "ppo"):
        assert supported in msg, msg
    still_works()

    with pytest.raises(tinker.RequestFailedError) as info:
        service.create_lora_training_client(base_model="no-such-org/no-such-model", rank=8
                                            ).result()
    msg = error_text(info.value)
    assert "no-such-org/no-such-model" in msg, msg
    still_works()

    prompt, cont = sft_examples(tok, SFT_A)[0]
    tokens = prompt + cont
    bad = types.Datum(model_input=types.ModelInput.from_ints(tokens[:-1]),
                      loss_fn_inputs={"target_tokens": tokens[1:-1],
                                      "weights": [1.0] * (len(tokens) - 2)})
    with pytest.raises(tinker.RequestFailedError) as info:
        fresh().forward_backward([bad], "cross_entropy").result()
    msg = error_text(info.value)
    assert "target_tokens" in msg, msg
    assert str(len(tokens) - 1) in msg and str(len(tokens) - 2) in msg, msg
    still_works()

    # an image chunk: this server trains text models
    image = types.ModelInput(chunks=[
        types.EncodedTextChunk(tokens=prompt),
        types.ImageChunk(data=b"\x89PNG\r\n\x1a\n", format="png", expected_tokens=2),
        types.EncodedTextChunk(tokens=cont[:-1]),
    ])
    n = image.length
    with pytest.raises(tinker.RequestFailedError) as info:
        fresh().forward_backward([types.Datum(
            model_input=image, loss_fn_inputs={"target_tokens": [cont[-1]] * n,
                                               "weights": [1.0] * n})], "cross_entropy").result()
    msg = error_text(info.value)
    assert "image" in msg, msg
    still_works()

    bogus = "tinker://no-such-model/weights/no-such-checkpoint"
    with pytest.raises(tinker.RequestFailedError) as info:
        fresh().load_state(bogus).result()
    msg = error_text(info.value)
    assert "no-such-checkpoint" in msg or "no-such-model" in msg, msg
    with pytest.raises(tinker.RequestFailedError):
        service.create_training_client_from_state(bogus).result()
    # creating a sampler is no future in the protocol: a plain HTTP 4xx
    bogus_sampler = "tinker://no-such-model/sampler_weights/no-such-sampler"
    with pytest.raises(tinker.APIStatusError) as info:
        service.create_sampling_client(model_path=bogus_sampler).result()
    assert 400 <= info.value.status_code < 500
    assert "no-such-sampler" in error_text(info.value), error_text(info.value)
    still_works()

    # a good training step after all of that
    tc = fresh()
    before = eval_loss(tc, data)
    sft_step(tc, data, lr=5e-3)
    assert eval_loss(tc, data) < before


# ---------------------------------------------------------------------------------------------
# 7. custom losses (computed by the SDK) and full fine-tuning


def test_custom_losses_run_through_the_sdk(service, base_model, tok):
    """`forward_backward_custom` computes the loss in the client and sends its gradient
    back as cross-entropy weights: the server's per-token logprobs must carry it."""
    import torch

    tc = service.create_lora_training_client(base_model=base_model, rank=8, seed=0).result()
    data = sft_data(tok, SFT_A[:2])

    def neg_ll(batch: list[types.Datum], logprobs: list[torch.Tensor]):
        loss = sum((-lp * d.loss_fn_inputs["weights"].to_torch()).sum()
                   for d, lp in zip(batch, logprobs, strict=True))
        return loss, {"nll:sum": float(loss)}

    seen = []
    for _ in range(8):
        out = tc.forward_backward_custom(data, neg_ll).result()
        tc.optim_step(types.AdamParams(learning_rate=5e-3)).result()
        seen.append(out.metrics["nll:sum"])
    assert seen[-1] < 0.7 * seen[0]
    assert seen[-1] == pytest.approx(eval_loss(tc, data) * total_weight(data), rel=0.2)


def test_a_create_model_request_without_lora_is_full_fine_tuning(service, base_model, tok):
    """The SDK only asks for LoRA clients; a raw `create_model` without `lora_config` (what
    the protocol allows) trains every weight. The SDK's TrainingClient then drives it."""
    from tinker.lib.public_interfaces.training_client import TrainingClient

    holder = service.holder
    seq = holder.get_training_client_id()
    session = holder.get_session_id()

    async def create() -> Any:
        with holder.aclient(_train_pool()) as client:
            return await client.models.create(request=types.CreateModelRequest(
                session_id=session, model_seq_id=seq, base_model=base_model))

    untyped = holder.run_coroutine_threadsafe(create()).result()
    model_id = f"{session}:train:{seq}"
    from tinker.lib.api_future_impl import _APIFuture

    async def wait() -> Any:
        return await _APIFuture(types.CreateModelResponse, holder, untyped,
                                request_start_time=0.0, request_type="CreateModel")

    assert holder.run_coroutine_threadsafe(wait()).result().model_id == model_id
    info = holder.run_coroutine_threadsafe(_info(holder, model_id)).result()
    assert info.is_lora is False and info.lora_rank is None
    tc = TrainingClient(holder, model_seq_id=seq, model_id=model_id, info=info)
    data = sft_data(tok, SFT_B[:2])
    losses = [sft_step(tc, data, 1e-3) for _ in range(8)]
    assert losses[-1] < losses[0] / 2


def _train_pool() -> Any:
    from tinker.lib.client_connection_pool_type import ClientConnectionPoolType

    return ClientConnectionPoolType.TRAIN


async def _info(holder: Any, model_id: str) -> Any:
    from tinker.lib.public_interfaces.training_client import fetch_training_info

    return await fetch_training_info(holder, model_id)
