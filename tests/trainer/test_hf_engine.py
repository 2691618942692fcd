"""The hf engine: logprobs it reports are the model's, sampling does not depend on batch
company, stop conditions end a completion, and weights can change mid-generation."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from skyhub.trainer.inference import SamplingParams
from skyhub.trainer.inference.hf import HFEngine


def teacher_forced(model, prompt, completion, temperature=1.0):
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1].float() / temperature
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(completion)[:, None])[:, 0]


def test_reported_logprobs_match_a_teacher_forced_forward(model, tokenizer, chat):
    engine = HFEngine(model, tokenizer)
    prompts = [chat.prompt_ids("word: raven", "Reply with the word."),
               chat.prompt_ids("key: lima and some longer text to pad", None)]
    for temperature in (1.0, 0.7):
        outs = engine.generate(prompts, SamplingParams(max_tokens=12, temperature=temperature),
                               seeds=[1, 2])
        for p, c in zip(prompts, outs, strict=True):
            assert len(c.token_ids) == len(c.logprobs) == len(c.versions) == 12
            ref = teacher_forced(model, p, c.token_ids, temperature)
            assert torch.allclose(ref, torch.tensor(c.logprobs), atol=1e-4)


def test_a_completion_depends_on_its_seed_not_on_its_batch(model, tokenizer, chat):
    engine = HFEngine(model, tokenizer)
    a = chat.prompt_ids("word: amber", None)
    b = chat.prompt_ids("key: echo, with a much longer prompt than the other one", None)
    params = SamplingParams(max_tokens=10)
    alone = engine.generate([a], params, seeds=[7])[0]
    together = engine.generate([b, a, b], params, seeds=[3, 7, 4])[1]
    assert alone.token_ids == together.token_ids
    other_seed = engine.generate([a], params, seeds=[8])[0]
    assert other_seed.token_ids != alone.token_ids


def test_stop_strings_and_tokens_end_a_completion(model, tokenizer, chat):
    engine = HFEngine(model, tokenizer)
    prompt = chat.prompt_ids("word: amber", None)
    free = engine.generate([prompt], SamplingParams(max_tokens=20), seeds=[5])[0]
    assert free.finish_reason == "length" and len(free.token_ids) == 20
    # stop on the 4th sampled token's id: the completion ends there, stop token included
    stop_id = free.token_ids[3]
    first = free.token_ids.index(stop_id)
    stopped = engine.generate([prompt], SamplingParams(max_tokens=20,
                                                       stop_token_ids=(stop_id,)), seeds=[5])[0]
    assert stopped.finish_reason == "stop"
    assert stopped.token_ids == free.token_ids[:first + 1]
    # a stop string: the text of a later token
    text = tokenizer.decode(free.token_ids[:8])
    stop = text[-3:].strip() or text[-1]
    by_text = engine.generate([prompt], SamplingParams(max_tokens=20, stop=(stop,)),
                              seeds=[5])[0]
    assert by_text.finish_reason == "stop" and stop in by_text.text
    assert by_text.token_ids == free.token_ids[:len(by_text.token_ids)]
    assert len(by_text.token_ids) <= 8


def test_greedy_is_deterministic_and_reports_temperature_one_logprobs(model, tokenizer, chat):
    engine = HFEngine(model, tokenizer)
    prompt = chat.prompt_ids("word: onyx", None)
    a = engine.generate([prompt], SamplingParams(max_tokens=6, temperature=0.0), seeds=[1])[0]
    b = engine.generate([prompt], SamplingParams(max_tokens=6, temperature=0.0), seeds=[2])[0]
    assert a.token_ids == b.token_ids
    ref = teacher_forced(model, prompt, a.token_ids)
    assert torch.allclose(ref, torch.tensor(a.logprobs), atol=1e-4)


def test_weights_updated_mid_generation_take_effect_at_the_next_token(model, tokenizer, chat):
    engine = HFEngine(model, tokenizer, copy_weights=True)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    prompt = chat.prompt_ids("word: raven", None)
    result = {}
    steps = []
    original = engine.model.forward

    def slow_forward(*args, **kwargs):  # slow decoding so the update lands mid-generation
        steps.append(1)
        time.sleep(0.02)
        return original(*args, **kwargs)

    engine.model.forward = slow_forward
    t = threading.Thread(target=lambda: result.update(
        c=engine.generate([prompt], SamplingParams(max_tokens=60), seeds=[0])[0]))
    t.start()
    while len(steps) < 10:
        time.sleep(0.005)
    engine.update_weights(new, version=1)
    t.join()
    c = result["c"]
    assert c.versions[0] == 0 and c.versions[-1] == 1
    switch = c.versions.index(1)
    assert 10 <= switch < 60 and c.versions == [0] * switch + [1] * (60 - switch)
    # The token at `switch` was the first sampled from the new weights (over the old weights'
    # KV cache, as vLLM's keep mode does): its logprob is the new model's, computed with the
    # cache of the old one, so check it against exactly that computation.
    engine.model.forward = original
    old_model = model
    updated = type(model)(model.config)
    updated.load_state_dict(new)
    from transformers import DynamicCache

    with torch.no_grad():
        cache = DynamicCache()
        ctx = torch.tensor([prompt + c.token_ids[:switch - 1]])
        old_model(input_ids=ctx, cache=cache, use_cache=True)
        logits = updated(input_ids=torch.tensor([[c.token_ids[switch - 1]]]), cache=cache,
                         use_cache=True, position_ids=torch.tensor([[ctx.shape[1]]])).logits
    lp = torch.log_softmax(logits[0, -1].float(), -1)[c.token_ids[switch]]
    assert abs(float(lp) - c.logprobs[switch]) < 1e-4
    assert engine.version == 1


class _OlderTransformers(torch.nn.Module):
    """A model whose forward takes the KV cache as `past_key_values`, as transformers did
    before `cache` (the version vLLM pins still does)."""

    def __init__(self, inner):
        super().__init__()
        self.inner = inner

    def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                past_key_values=None, use_cache=None, **kwargs):
        assert "cache" not in kwargs, "the engine passed `cache` to an older forward"
        return self.inner(input_ids=input_ids, attention_mask=attention_mask,
                          position_ids=position_ids, cache=past_key_values,
                          use_cache=use_cache)


def test_the_kv_cache_reaches_older_forward_signatures(model, tokenizer, chat):
    prompt = chat.prompt_ids("word: amber", None)
    params = SamplingParams(max_tokens=10, temperature=0.0)
    want = HFEngine(model, tokenizer).generate([prompt], params)[0]
    got = HFEngine(_OlderTransformers(model), tokenizer).generate([prompt], params)[0]
    assert got.token_ids == want.token_ids
    assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(want.logprobs), atol=1e-5)


# --------------------------------------------------------------------------- per-request serving
def _counting(engine):
    """Count the engine's forward passes (decoding steps), to wait on steps, not on time."""
    steps = []
    original = engine.model.forward

    def forward(*args, **kwargs):
        steps.append(1)
        return original(*args, **kwargs)

    engine.model.forward = forward
    return steps


def test_a_short_request_joins_a_running_one_and_finishes_first(model, tokenizer, chat):
    """Continuous refill: a request submitted while a long one decodes is prefilled at the next
    step and merged into the running batch; it completes while the long one goes on, and
    both completions are what each gives alone (its seed, not its company, decides)."""
    long_prompt = chat.prompt_ids("key: echo, with a much longer prompt than the other", None)
    short_prompt = chat.prompt_ids("word: amber", None)
    long_p, short_p = SamplingParams(max_tokens=150), SamplingParams(max_tokens=4)
    alone = HFEngine(model, tokenizer)
    want_long = alone.generate([long_prompt], long_p, seeds=[11])[0]
    want_short = alone.generate([short_prompt], short_p, seeds=[12])[0]
    engine = HFEngine(model, tokenizer)
    steps = _counting(engine)
    running = engine.submit(long_prompt, long_p, seed=11)
    deadline = time.monotonic() + 60
    while len(steps) < 3 and time.monotonic() < deadline:
        time.sleep(0.001)
    short = engine.submit(short_prompt, short_p, seed=12).result(timeout=60)
    assert not running.done()  # 150 steps to go for it, 4 for the short one
    assert short.token_ids == want_short.token_ids
    assert torch.allclose(torch.tensor(short.logprobs), torch.tensor(want_short.logprobs),
                          atol=1e-5)
    got = running.result(timeout=120)
    assert got.token_ids == want_long.token_ids
    assert torch.allclose(torch.tensor(got.logprobs), torch.tensor(want_long.logprobs),
                          atol=1e-5)
    # one forward per step once merged: the long one's 150, plus the short one's prefill
    assert len(steps) == 151


def test_requests_with_different_sampling_params_share_a_batch(model, tokenizer, chat):
    prompts = [chat.prompt_ids(f"word: {w}", None) for w in ("raven", "lima", "onyx")]
    params = [SamplingParams(max_tokens=8, temperature=0.0),
              SamplingParams(max_tokens=5, temperature=0.7),
              SamplingParams(max_tokens=8, temperature=1.0, top_p=0.5)]
    engine = HFEngine(model, tokenizer)
    alone = [engine.submit(p, sp, seed=k).result(60)
             for k, (p, sp) in enumerate(zip(prompts, params, strict=True))]
    futures = [engine.submit(p, sp, seed=k)
               for k, (p, sp) in enumerate(zip(prompts, params, strict=True))]
    for a, f in zip(alone, futures, strict=True):
        b = f.result(60)
        assert a.token_ids == b.token_ids and a.finish_reason == b.finish_reason
        assert torch.allclose(torch.tensor(a.logprobs), torch.tensor(b.logprobs), atol=1e-5)
    assert len(alone[1].token_ids) == 5 and alone[1].finish_reason == "length"


def test_top_p_restricts_the_draw_without_renormalising_the_logprob(model, tokenizer, chat):
    """With a tiny top-p only the most likely token may be drawn: the greedy tokens, with
    their logprob under softmax(logits / temperature) of the whole vocabulary."""
    engine = HFEngine(model, tokenizer)
    prompt = chat.prompt_ids("word: raven", None)
    greedy = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.0))[0]
    nucleus = engine.generate([prompt], SamplingParams(max_tokens=8, temperature=0.8,
                                                       top_p=1e-6), seeds=[3])[0]
    assert nucleus.token_ids == greedy.token_ids
    ref = teacher_forced(model, prompt, nucleus.token_ids, temperature=0.8)
    assert torch.allclose(ref, torch.tensor(nucleus.logprobs), atol=1e-4)
    assert all(lp < 0 for lp in nucleus.logprobs)  # not renormalised to probability 1


def test_score_is_the_teacher_forced_logprob_under_the_current_weights(model, tokenizer,
                                                                       chat):
    engine = HFEngine(model, tokenizer, copy_weights=True)
    ids = chat.prompt_ids("word: raven and then some", None)
    got = engine.score(ids)
    assert len(got) == len(ids) - 1
    assert torch.allclose(torch.tensor(got), teacher_forced(model, ids[:1], ids[1:]), atol=1e-4)
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in model.state_dict().items()}
    engine.update_weights(new, version=1)
    moved = engine.score(ids)
    assert max(abs(a - b) for a, b in zip(got, moved, strict=True)) > 1e-3
    updated = type(model)(model.config)
    updated.load_state_dict(new)
    assert torch.allclose(torch.tensor(moved), teacher_forced(updated, ids[:1], ids[1:]),
                          atol=1e-4)


def test_a_failing_forward_fails_its_requests_and_the_engine_goes_on(model, tokenizer, chat):
    engine = HFEngine(model, tokenizer)
    prompt = chat.prompt_ids("word: amber", None)
    original = engine.model.forward
    engine.model.forward = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("device lost"))
    with pytest.raises(RuntimeError, match="device lost"):
        engine.submit(prompt, SamplingParams(max_tokens=3), seed=0).result(60)
    engine.model.forward = original
    assert len(engine.submit(prompt, SamplingParams(max_tokens=3), seed=0).result(60)
               .token_ids) == 3


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_on_a_gpu_only_token_ids_and_logprobs_leave_the_device(model, tokenizer, chat,
                                                               monkeypatch):
    """Sampling and logprobs on the model's device: every device-to-host copy the engine
    makes during decoding is at most two numbers per row."""
    import copy

    engine = HFEngine(copy.deepcopy(model).cuda(), tokenizer)  # `model` stays on the CPU
    prompts = [chat.prompt_ids(f"word: {w}", None) for w in ("raven", "lima")]
    copied = []
    to_host = torch.Tensor.cpu

    def spy(self, *a, **k):
        if self.is_cuda:
            copied.append(self.numel())
        return to_host(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "cpu", spy)
    outs = engine.generate(prompts, SamplingParams(max_tokens=6, top_p=0.9), seeds=[1, 2])
    monkeypatch.undo()
    assert copied and max(copied) <= 2 * len(prompts)
    for p, c in zip(prompts, outs, strict=True):
        ref = teacher_forced(model, p, c.token_ids)
        assert torch.allclose(ref, torch.tensor(c.logprobs), atol=1e-3)


def test_the_learners_module_decodes_in_eval_mode_and_is_handed_back_in_its_own(model,
                                                                               tokenizer,
                                                                               chat):
    """With `copy_weights=False` the engine samples from the learner's module: it decodes in
    eval mode and restores the module's mode before any caller gets its completion, so a
    train step right after a rollout never runs in the wrong mode."""
    engine = HFEngine(model, tokenizer)
    modes = []
    original = engine.model.forward
    engine.model.forward = lambda *a, **k: (modes.append(model.training), original(*a, **k))[1]
    prompt = chat.prompt_ids("word: amber", None)
    for training in (True, False, True):
        model.train(training)
        engine.generate([prompt, prompt], SamplingParams(max_tokens=3), seeds=[1, 2])
        assert model.training is training
        engine.submit(prompt, SamplingParams(max_tokens=2), seed=3).result(60)
        assert model.training is training
    assert modes and not any(modes)
