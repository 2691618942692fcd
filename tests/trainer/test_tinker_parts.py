"""The Tinker server's parts without HTTP: the wire format against the SDK's own codecs, the
losses, the fair job queue, and the model host (adapters, full fine-tuning, snapshots).

The SDK-driven tests of the whole server are in test_tinker_server.py."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("tinker")
pytest.importorskip("peft")
torch = pytest.importorskip("torch")

from tinker import types  # noqa: E402
from tinker.proto.request_conv import forward_backward_request_to_proto  # noqa: E402
from tinker.proto.response_conv import (  # noqa: E402
    deserialize_forward_backward_output,
    deserialize_sample_response,
)

from skyhub.trainer.tinker import losses, wire  # noqa: E402
from skyhub.trainer.tinker.exceptions import Unsupported  # noqa: E402
from skyhub.trainer.tinker.jobs import Jobs, Outcome  # noqa: E402
from skyhub.trainer.tinker.models import (  # noqa: E402
    ATTN,
    MLP,
    UNEMBED,
    LoraSpec,
    ModelHost,
    SampleItem,
    tiny_base_model,
)


# ---------------------------------------------------------------------- wire
def test_forward_backward_request_decodes_what_the_sdk_encodes() -> None:
    sparse = torch.zeros(3, 4)
    sparse[0, 1], sparse[2, 3] = 1.0, 0.5
    datum = types.Datum(model_input=types.ModelInput.from_ints([5, 6, 7]),
                        loss_fn_inputs={"target_tokens": [6, 7, 8],
                                        "advantages": np.array([0.0, 1.5, -2.0], np.float32),
                                        "weights": sparse})
    req = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[datum], loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.9,
                                                         "mode": "x"}),
        model_id="s1:train:0", seq_id=3)
    msg = forward_backward_request_to_proto(req)
    msg.forward_only = True
    call = wire.decode_forward_backward(msg.SerializeToString(), None)
    assert (call.model_id, call.seq_id, call.loss_fn, call.forward_only) == (
        "s1:train:0", 3, "ppo", True)
    assert call.config == {"clip_low_threshold": pytest.approx(0.9), "mode": "x"}
    d = call.data[0]
    assert d.tokens == [5, 6, 7]
    assert d.inputs["target_tokens"].tolist() == [6, 7, 8]
    assert d.inputs["advantages"].tolist() == [0.0, 1.5, -2.0]
    np.testing.assert_array_equal(d.inputs["weights"], sparse.numpy())  # CSR made dense


def test_zstd_bodies_are_decompressed_and_garbage_is_refused() -> None:
    import zstandard

    req = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(
            data=[types.Datum(model_input=types.ModelInput.from_ints([1, 2]),
                              loss_fn_inputs={"target_tokens": [2, 3]})],
            loss_fn="cross_entropy"), model_id="m", seq_id=1)
    body = zstandard.ZstdCompressor().compress(
        forward_backward_request_to_proto(req).SerializeToString())
    assert wire.decode_forward_backward(body, "zstd").data[0].tokens == [1, 2]
    with pytest.raises(ValueError):
        wire.decode_forward_backward(body, "br")


def test_outputs_and_samples_decode_with_the_sdk() -> None:
    outs = [{"logprobs": np.array([-1.0, -2.0], np.float32)},
            {"logprobs": np.array([-0.5], np.float32)}]
    got = deserialize_forward_backward_output(
        wire.encode_forward_backward(outs, {"loss:sum": 3.5}))
    assert got.metrics == {"loss:sum": 3.5}
    assert [o["logprobs"].tolist() for o in got.loss_fn_outputs] == [[-1.0, -2.0], [-0.5]]
    sample = deserialize_sample_response(wire.encode_sample(
        [([4, 5], [-0.25, -0.5], "stop"), ([6], [-1.0], "length")], [float("nan"), -2.0]))
    assert [s.tokens for s in sample.sequences] == [[4, 5], [6]]
    assert [s.stop_reason for s in sample.sequences] == ["stop", "length"]
    assert sample.sequences[0].logprobs == [-0.25, -0.5]
    assert sample.prompt_logprobs == [None, -2.0]


# ---------------------------------------------------------------------- losses
def test_losses_are_sums_with_the_right_gradients() -> None:
    logp = torch.tensor([-1.0, -2.0, -0.5], requires_grad=True)
    w = torch.tensor([0.0, 1.0, 2.0])
    assert losses.cross_entropy(logp, {"weights": w}, {}).item() == pytest.approx(3.0)
    q = logp.detach().clone()  # sampled by the same weights: ratio 1
    adv = torch.tensor([1.0, -1.0, 2.0])
    losses.importance_sampling(logp, {"logprobs": q, "advantages": adv}, {}).backward()
    assert logp.grad.tolist() == pytest.approx((-adv).tolist())  # the policy gradient
    # ppo: a token whose ratio is already above the clip with a positive advantage gets
    # no gradient; one inside the clip does
    logp2 = torch.tensor([0.0, 0.0], requires_grad=True)
    inputs = {"logprobs": torch.tensor([-1.0, -0.05]), "advantages": torch.tensor([1.0, 1.0])}
    losses.ppo(logp2, inputs, {"clip_low_threshold": 0.8, "clip_high_threshold": 1.2}).backward()
    assert logp2.grad[0].item() == 0.0 and logp2.grad[1].item() < 0


def test_unknown_losses_and_config_keys_name_what_is_supported() -> None:
    with pytest.raises(Unsupported, match=r"'cispo'.*cross_entropy, importance_sampling, ppo"):
        losses.get_loss("cispo", {})
    with pytest.raises(Unsupported, match="clip_ratio"):
        losses.get_loss("ppo", {"clip_ratio": 0.2})


# ---------------------------------------------------------------------- jobs
def _wait(jobs: Jobs, request_id: str) -> Outcome:
    async def go() -> Outcome | None:
        return await jobs.wait(request_id, 30)

    outcome = asyncio.run(go())
    assert outcome is not None
    return outcome


def test_jobs_serve_clients_in_turn_not_in_arrival_order() -> None:
    jobs, order, gate = Jobs(), [], threading.Event()

    def job(name: str, block: bool = False):
        def run() -> Outcome:
            if block:
                gate.wait(10)
            order.append(name)
            return Outcome(json={"name": name})
        return run

    first = jobs.submit("a", job("a0", block=True))
    time.sleep(0.1)  # the worker is now inside a0
    ids = [jobs.submit("a", job(f"a{i}")) for i in range(1, 4)]
    ids += [jobs.submit("b", job("b0")), jobs.submit("c", job("c0"))]
    gate.set()
    for request_id in [first, *ids]:
        _wait(jobs, request_id)
    assert order == ["a0", "a1", "b0", "c0", "a2", "a3"]
    jobs.close()


def test_jobs_batch_queued_requests_with_the_same_key_and_report_failures() -> None:
    jobs, calls, gate = Jobs(max_batch=3), [], threading.Event()
    jobs.submit("x", lambda: (gate.wait(10), Outcome(json={}))[1])
    time.sleep(0.1)

    def batch(group):
        calls.append([j.payload for j in group])
        return [Outcome(json={"v": j.payload}) for j in group]

    def single(v):
        return lambda: (calls.append([v]), Outcome(json={"v": v}))[1]

    ids = [jobs.submit("s", single(v), batch_key="k", batch_run=batch, payload=v)
           for v in range(4)]
    ids.append(jobs.submit("s", single(9), batch_key="other", batch_run=batch, payload=9))

    def bad() -> Outcome:
        raise Unsupported("no such thing")

    def broken() -> Outcome:
        raise RuntimeError("boom")

    ids += [jobs.submit("s", bad), jobs.submit("s", broken)]
    gate.set()
    outcomes = [_wait(jobs, i) for i in ids]
    assert calls == [[0, 1, 2], [3], [9]]  # at most 3 together; keys never mix
    assert [o.json for o in outcomes[:5]] == [{"v": v} for v in (0, 1, 2, 3, 9)]
    assert (outcomes[5].error, outcomes[5].category) == ("no such thing", "user")
    assert outcomes[6].category == "server" and "RuntimeError: boom" in outcomes[6].error
    jobs.close()


# ---------------------------------------------------------------------- the model host
@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> ModelHost:
    torch.set_num_threads(1)
    return ModelHost(tiny_base_model(tmp_path_factory.mktemp("base")))


def _datum(tokens: list[int]) -> wire.WireDatum:
    return wire.WireDatum(tokens[:-1], {"target_tokens": np.array(tokens[1:])})


def _logprobs(host: ModelHost, model, tokens: list[int]) -> np.ndarray:
    outs, _ = host.forward_backward(model, [_datum(tokens)], "cross_entropy", {},
                                    backward=False)
    return outs[0]["logprobs"]


def _train(host: ModelHost, model, tokens: list[int], steps: int, lr: float = 1e-2) -> list[float]:
    seen = []
    for _ in range(steps):
        _, metrics = host.forward_backward(model, [_datum(tokens)], "cross_entropy", {},
                                           backward=True)
        host.optim_step(model, lr, 0.9, 0.95, 1e-8, 0.0, 1.0)
        seen.append(metrics["loss:sum"])
    return seen


SEQ_A = [20, 40, 60, 80, 100, 120, 140, 160]
SEQ_B = [25, 45, 65, 85, 105, 125, 145, 165]


def test_adapters_train_apart_and_leave_the_base_alone(host: ModelHost) -> None:
    base_before = host.sample(None, [SampleItem(SEQ_A[:3], 1, 0, True)],
                              _greedy(5))[0]
    a = host.create("t:train:1", LoraSpec(8, ATTN + MLP + UNEMBED, 0))
    b = host.create("t:train:2", LoraSpec(4, ATTN, 0))
    b_before = _logprobs(host, b, SEQ_A)
    seen = _train(host, a, SEQ_A, 15)
    assert seen[-1] < seen[0] / 2
    np.testing.assert_allclose(_logprobs(host, b, SEQ_A), b_before, atol=1e-6)
    base_after = host.sample(None, [SampleItem(SEQ_A[:3], 1, 0, True)], _greedy(5))[0]
    assert base_after[0] == base_before[0]
    np.testing.assert_allclose(base_after[1][1:], base_before[1][1:], atol=1e-6)


def _greedy(max_tokens: int):
    from skyhub.trainer.inference import SamplingParams

    return SamplingParams(max_tokens=max_tokens, temperature=0.0)


def test_snapshots_keep_their_weights_while_training_goes_on(host: ModelHost,
                                                             tmp_path: Path) -> None:
    model = host.create("t:train:3", LoraSpec(8, ATTN + MLP + UNEMBED, 1))
    _train(host, model, SEQ_B, 20)
    snap = host.snapshot(model)
    at_snapshot = host.sample(model, [SampleItem(SEQ_B[:2], 1, 0, False)], _greedy(6))
    assert at_snapshot[0][0][0][0] == SEQ_B[2:8]  # memorized
    before_more = _logprobs(host, model, SEQ_B)
    _train(host, model, SEQ_A, 20)
    assert not np.allclose(_logprobs(host, model, SEQ_B), before_more, atol=1e-3)
    assert host.sample(snap, [SampleItem(SEQ_B[:2], 1, 0, False)], _greedy(6)) == at_snapshot
    # and on disk: save, train on, load back
    host.save(model, tmp_path / "ck", optimizer=True)
    saved = _logprobs(host, model, SEQ_A)
    _train(host, model, SEQ_B, 3)
    host.load(model, tmp_path / "ck", optimizer=True)
    np.testing.assert_allclose(_logprobs(host, model, SEQ_A), saved, atol=1e-6)
    other = host.create("t:train:4", LoraSpec(4, ATTN, 0))
    with pytest.raises(Unsupported, match="does not match"):
        host.load(other, tmp_path / "ck", optimizer=False)


def test_full_fine_tuning_trains_its_own_copy(host: ModelHost) -> None:
    lora = host.create("t:train:5", LoraSpec(8, ATTN, 0))
    lora_before = _logprobs(host, lora, SEQ_A)
    full = host.create("t:train:6", None)
    seen = _train(host, full, SEQ_A, 10, lr=3e-3)
    assert seen[-1] < seen[0] / 2
    assert len(full.params) == len(list(full.module.parameters()))  # every weight trains
    np.testing.assert_allclose(_logprobs(host, lora, SEQ_A), lora_before, atol=1e-6)
    snap = host.snapshot(full)
    got = host.sample(snap, [SampleItem(SEQ_A[:2], 1, 0, False)], _greedy(4))
    assert got == host.sample(full, [SampleItem(SEQ_A[:2], 1, 0, False)], _greedy(4))


def test_batched_samples_match_one_by_one_and_bad_input_is_refused(host: ModelHost) -> None:
    from skyhub.trainer.inference import SamplingParams

    params = SamplingParams(max_tokens=6, temperature=1.0)
    items = [SampleItem(SEQ_A[:3], 2, 7, False), SampleItem(SEQ_B[:4], 3, 11, True)]
    together = host.sample(None, items, params)
    alone = [host.sample(None, [it], params)[0] for it in items]
    for (got, _), (want, _) in zip(together, alone, strict=True):  # padding moves logprobs
        assert [(t, r) for t, _, r in got] == [(t, r) for t, _, r in want]  # by ~1e-6 only
        for (_, lp, _), (_, lp_want, _) in zip(got, want, strict=True):
            np.testing.assert_allclose(lp, lp_want, atol=1e-4)
    assert together[1][1][0] != together[1][1][0]  # NaN: the first prompt token has none
    for prompt, message in (([], "empty"), ([10**6], "outside the vocabulary"),
                            ([1] * 5000, "longer than the model's context")):
        with pytest.raises(Unsupported, match=message):
            host.check_prompt(prompt, 4)
    with pytest.raises(Unsupported, match="has 2 entries but model_input has 3"):
        host.forward_backward(host.create("t:train:7", LoraSpec(2, ATTN)),
                              [wire.WireDatum([1, 2, 3], {"target_tokens": np.array([2, 3])})],
                              "cross_entropy", {}, backward=True)


def test_merged_weights_compute_what_the_adapter_computes(host: ModelHost) -> None:
    """What `--engine vllm` loads into vLLM: base weights with the adapter merged in, under
    transformers' names. A plain model with them gives the adapter's logprobs."""
    from transformers import AutoModelForCausalLM

    model = host.create("t:train:8", LoraSpec(8, ATTN + MLP, 3))
    _train(host, model, SEQ_A, 5)
    want = _logprobs(host, model, SEQ_A)
    plain = AutoModelForCausalLM.from_pretrained(host.path, dtype=torch.float32)
    before = _plain_logprobs(plain, SEQ_A)
    missing, unexpected = plain.load_state_dict(host.merged_weights(model), strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}  # tied to the embedding
    np.testing.assert_allclose(_plain_logprobs(plain, SEQ_A), want, atol=1e-5)
    assert not np.allclose(before, want, atol=1e-3)
    with pytest.raises(Unsupported, match="train_unembed=False"):
        host.merged_weights(host.create("t:train:9", LoraSpec(2, ATTN + UNEMBED)))


def _plain_logprobs(model, tokens: list[int]) -> np.ndarray:
    from skyhub.trainer.policy import token_logprobs

    with torch.no_grad():
        logits = model(input_ids=torch.tensor([tokens[:-1]])).logits[0]
    return token_logprobs(logits, torch.tensor(tokens[1:])).numpy()


# ---------------------------------------------------------------------- serving
def test_the_serve_command_refuses_unsafe_or_unusable_settings(tmp_path: Path) -> None:
    import subprocess
    import sys

    skyhub = Path(sys.executable).parent / "skyhub"
    cases = [(["--host", "0.0.0.0"], "without an API key"),
             (["--api-key", "secret"], "must start with 'tml-'"),
             (["--engine", "trt"], "use hf or vllm"),
             (["--base-model", str(tmp_path / "nowhere")], "could not load --base-model")]
    for extra, message in cases:
        args = ["tinker", "serve", "--base-model", "tiny", "--state-dir", str(tmp_path / "s"),
                *extra]
        r = subprocess.run([str(skyhub), *args], capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and message in r.stderr, (extra, r.stderr[-2000:])


def test_a_server_with_an_api_key_refuses_other_keys(tmp_path: Path) -> None:
    import tinker

    from skyhub.trainer.tinker import TinkerServerThread

    with TinkerServerThread("tiny", tmp_path, api_key="tml-right", threads=1) as srv:
        with pytest.raises(tinker.AuthenticationError, match="wrong or missing API key"):
            tinker.ServiceClient(base_url=srv.url, api_key="tml-wrong") \
                .create_lora_training_client(base_model="tiny", rank=2).result()
        sc = tinker.ServiceClient(base_url=srv.url, api_key="tml-right")
        tc = sc.create_lora_training_client(base_model="tiny", rank=2).result()
        assert tc.get_info().model_data.model_name == "tiny"
        assert tc.get_tokenizer().decode(tc.get_tokenizer().encode(" lazy dog")) == "lazy dog"
        # a checkpoint name is not silently reused, unless the request says so
        first = tc.save_state("ck").result().path
        assert tc.save_state("ck", overwrite=True).result().path == first
        sampler_path = tc.save_weights_for_sampler("for-eval").result().path
        listed = sc.create_rest_client().list_checkpoints(tc.model_id).result().checkpoints
        assert sorted((c.checkpoint_type, c.tinker_path) for c in listed) == [
            ("sampler", sampler_path), ("training", first)]
        assert all(c.size_bytes > 0 for c in listed)
        with pytest.raises(tinker.RequestFailedError, match="'ck' exists; pass overwrite=True"):
            tc.save_state("ck").result()


def test_sessions_that_go_silent_are_ended_and_their_models_freed(tmp_path: Path) -> None:
    import tinker

    from skyhub.trainer.tinker import TinkerServerThread

    with TinkerServerThread("tiny", tmp_path, threads=1, session_ttl_s=1.0) as srv:
        gone = tinker.ServiceClient(base_url=srv.url, api_key="tml-a")
        tc = gone.create_lora_training_client(base_model="tiny", rank=2).result()
        assert len(srv.service.host.models) == 1
        time.sleep(1.5)  # no heartbeat yet: the SDK sends its first after 10 s
        live = tinker.ServiceClient(base_url=srv.url, api_key="tml-b")
        other = live.create_lora_training_client(base_model="tiny", rank=2).result()
        assert list(srv.service.host.models) == [other.model_id]
        datum = types.Datum(model_input=types.ModelInput.from_ints([5, 6]),
                            loss_fn_inputs={"target_tokens": [6, 7]})
        with pytest.raises(tinker.RequestFailedError, match="session ended"):
            tc.forward([datum], "cross_entropy").result()
        assert other.forward([datum], "cross_entropy").result().metrics["loss:sum"] > 0
