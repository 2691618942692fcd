"""Where rollout engines go (`skyhub.trainer.placement`), several engines as one
(`EnginePool`), and the loop's colocated order: generate, sleep, train, wake up, sync.

No GPU here: plans are computed for described devices (`8x80GB`), the vLLM engines of the
loop test are stand-ins at the vLLM boundary (an HF engine generating, sleep/wake recorded),
and the Ray path runs on a real local Ray whose GPUs are logical resources."""

from __future__ import annotations

import os
import threading
import types
from concurrent.futures import Future

import pytest

from skyhub.errors import UsageError
from skyhub.trainer.config import load_config
from skyhub.trainer.inference import Completion, SamplingParams
from skyhub.trainer.inference.pool import EnginePool
from skyhub.trainer.memory import parse_devices
from skyhub.trainer.model_memory import GiB
from skyhub.trainer.placement import EngineSlot, rollout_plan


def cfg(*overrides: str, recipe: str = "sql-grpo-653"):
    return load_config(recipe, list(overrides))


# ------------------------------------------------------------------------------ plans
def test_the_653_recipe_is_skyrl_sqls_placement_two_engines_of_tp4_colocated_and_asleep():
    plan = rollout_plan(cfg(), parse_devices("8x80GB"))
    assert plan.layout == "colocated" and plan.learner_gpus == tuple(range(8))
    assert plan.engines == [EngineSlot(0, 0, (0, 1, 2, 3)), EngineSlot(1, 0, (4, 5, 6, 7))]
    assert plan.sleep and not plan.through_ray
    assert plan.engine_kwargs() == {"tensor_parallel_size": 4, "gpu_memory_utilization": 0.7,
                                    "enable_sleep_mode": True, "weight_sync": "ipc"}


def test_split_puts_the_engines_on_the_gpus_after_the_learners_and_none_sleeps():
    plan = rollout_plan(cfg("dist.rollout_layout=split", "dist.learner_ranks=4",
                            "dist.rollout_tp=2", "rollout.gpu_memory_utilization=null"),
                        parse_devices("8x80GB"))
    assert plan.learner_gpus == (0, 1, 2, 3)
    assert [e.gpus for e in plan.engines] == [(4, 5), (6, 7)]
    assert not plan.sleep and plan.gpu_memory_utilization == 0.9  # vLLM's own default
    assert plan.engine_kwargs()["enable_sleep_mode"] is False
    assert plan.engine_kwargs()["weight_sync"] == "nccl"  # its own GPUs: a broadcast


def test_a_colocated_engines_default_share_leaves_the_learner_what_it_needs():
    c = cfg("rollout.gpu_memory_utilization=null")
    kw = dict(learner_resident=14 * GiB, learner_peak=34 * GiB, context=1.5 * GiB)
    asleep = rollout_plan(c, parse_devices("8x80GB"), **kw)
    # (80 - 14 - 3) / 80 = 0.7875, rounded down to a step of 0.05
    assert asleep.gpu_memory_utilization == 0.75 and asleep.sleep
    awake = rollout_plan(cfg("rollout.gpu_memory_utilization=null", "loop.mode=async"),
                         parse_devices("8x80GB"), **kw)
    # generation overlaps training: nothing sleeps, the learner's peak is left: 43 / 80
    assert not awake.sleep and awake.gpu_memory_utilization == 0.5
    assert any("no sleep" in line for line in awake.describe())
    unknown = rollout_plan(c, parse_devices("8x80GB"))  # no estimate: half, and it says so
    assert unknown.gpu_memory_utilization == 0.5
    assert "set rollout.gpu_memory_utilization" in unknown.utilization_source


def test_two_nodes_place_engines_node_by_node_through_ray():
    plan = rollout_plan(cfg("dist.nnodes=2", "dist.learner_ranks=16", "dist.rollout_engines=4"),
                        parse_devices("8x80GB"))
    assert plan.through_ray
    assert [(e.node, e.gpus) for e in plan.engines] == [
        (0, (0, 1, 2, 3)), (0, (4, 5, 6, 7)), (1, (0, 1, 2, 3)), (1, (4, 5, 6, 7))]
    text = "\n".join(plan.describe())
    assert "placed through Ray" in text and "engine 3 on node 1 GPUs 4-7" in text
    split = rollout_plan(cfg("dist.nnodes=2", "dist.learner_ranks=12", "dist.rollout_engines=2",
                             "dist.rollout_tp=2", "dist.rollout_layout=split"),
                         parse_devices("8x80GB"))
    assert [(e.node, e.gpus) for e in split.engines] == [(0, (6, 7)), (1, (6, 7))]


@pytest.mark.parametrize(("overrides", "devices", "message"), [
    (["dist.rollout_layout=split"], "8x80GB",
     "its 8 ranks per node take all 8: 2 engines x TP 4 need all 8"),
    (["dist.rollout_layout=split", "dist.rollout_engines=1"], "8x80GB",
     r"set dist.learner_ranks=4 \(leaving 4 GPUs per node for 1 engine x TP 4\)"),
    (["dist.rollout_tp=7"], "8x80GB", r"does not divide the 8 GPUs per node .* \[1, 2, 4, 8\]"),
    (["dist.nnodes=2", "dist.learner_ranks=16", "dist.rollout_tp=16"], "8x80GB",
     "a tensor-parallel group stays on one node"),
    (["dist.rollout_engines=3"], "8x80GB", "at most dist.rollout_engines=2 at this TP"),
    (["dist.rollout_tp=8"], "8x80GB", "does not divide the model's 28 attention heads"),
    (["dist.learner_ranks=2"], "8x80GB", r"or dist.learner_ranks=8 \(colocated engines take"),
    (["rollout.engine=hf"], "8x80GB", "need rollout.engine=vllm"),
    (["dist.rollout_tp=1"], "cpu", None),  # 2 engines x TP 1 on a CPU: fine
    ([], "cpu", "tensor parallelism needs GPUs"),
    (["rollout.gpu_memory_utilization=1.5"], "8x80GB", r"must be in \(0, 1\]"),
    (["rollout.engine_kwargs={gpu_memory_utilization: 0.5}"], "8x80GB", "disagree"),
    (["dist.rollout_engines=0"], "8x80GB", "must be >= 1"),
])
def test_misfits_are_refused_with_what_to_change(overrides, devices, message):
    from skyhub.trainer.memory import placement

    if message is None:
        plan = placement(cfg(*overrides), parse_devices(devices))
        assert len(plan.rollout_plan.engines) == 2
        return
    with pytest.raises(UsageError, match=message):
        placement(cfg(*overrides), parse_devices(devices))


def test_an_engine_starts_seeing_only_its_gpus(monkeypatch):
    plan = rollout_plan(cfg(), parse_devices("8x80GB"))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with plan.visible_devices(plan.engines[1]):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    # indices are into what this process sees: a node restricted by the user stays so
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "8,9,10,11,12,13,14,15")
    with plan.visible_devices(plan.engines[1]):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "12,13,14,15"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "8,9,10,11,12,13,14,15"


# ------------------------------------------------------------------------------ the pool
class Scripted:
    """An engine whose completion is a function of (prompt, seed, weights), like a real
    engine's with per-request seeds; `hold` keeps its submitted requests pending."""

    def __init__(self, name: str, hold: bool = False) -> None:
        self.name, self.hold = name, hold
        self.version, self.weights = 0, None
        self.pending: list[tuple[Future, Completion]] = []
        self.calls: list[str] = []
        self.asleep = False
        self.fail_close = False

    def _complete(self, prompt, params, seed) -> Completion:
        assert not self.asleep, "generated while asleep"
        tok = (sum(prompt) * 31 + (seed or 0) * 7 + (self.weights or 0)) % 1000
        return Completion([tok], [-1.0], [self.version], "length")

    def generate(self, prompts, params, seeds=None):
        self.calls.append(f"generate {len(prompts)} seeds={seeds}")
        return [self._complete(p, params, None if seeds is None else seeds[i])
                for i, p in enumerate(prompts)]

    def submit(self, prompt, params, seed):
        self.calls.append("submit")
        f: Future = Future()
        c = self._complete(prompt, params, seed)
        if self.hold:
            self.pending.append((f, c))
        else:
            f.set_result(c)
        return f

    def release(self) -> None:
        for f, c in self.pending:
            f.set_result(c)
        self.pending = []

    def update_weights(self, weights, version):
        self.weights = sum(v for _, v in (weights.items() if hasattr(weights, "items")
                                          else weights))
        self.version = version
        self.calls.append(f"update {version}")

    def sleep(self, level=1):
        self.asleep = True
        self.calls.append(f"sleep {level}")

    def wake_up(self):
        self.asleep = False
        self.calls.append("wake_up")

    def score(self, token_ids):
        return [float(self.name == "a")]

    def close(self):
        self.calls.append("close")
        if self.fail_close:
            raise RuntimeError(f"{self.name} failed to close")


P = SamplingParams(max_tokens=4, seed=100)


def test_requests_go_to_the_least_loaded_engine_and_results_do_not_depend_on_routing():
    a, b = Scripted("a", hold=True), Scripted("b", hold=True)
    pool = EnginePool([a, b])
    futures = [pool.submit([i, i + 1], P, seed=i) for i in range(3)]
    assert pool.load == [2, 1] and len(a.pending) == 2 and len(b.pending) == 1
    b.release()  # b is free again: the next two go to b, then a tie goes to a
    futures += [pool.submit([i, i + 1], P, seed=i) for i in range(3, 5)]
    assert pool.load == [2, 2] and pool.served == [2, 3]
    a.release()
    b.release()
    single = Scripted("s")
    alone = [single.submit([i, i + 1], P, i).result() for i in range(5)]
    assert [f.result(timeout=5).token_ids for f in futures] == [c.token_ids for c in alone]
    assert pool.load == [0, 0]


def test_generate_splits_the_batch_but_numbers_seeds_as_one_engine_would():
    a, b, c = Scripted("a"), Scripted("b"), Scripted("c")
    prompts = [[i] for i in range(7)]
    pooled = EnginePool([a, b, c]).generate(prompts, P)
    one = Scripted("s").generate(prompts, P, [P.seed + i for i in range(7)])
    assert [x.token_ids for x in pooled] == [x.token_ids for x in one]
    assert [len(e.calls) for e in (a, b, c)] == [1, 1, 1]
    assert a.calls == ["generate 3 seeds=[100, 101, 102]"]


def test_weights_sleep_and_close_reach_every_engine():
    a, b = Scripted("a"), Scripted("b")
    b.fail_close = True
    pool = EnginePool([a, b])
    pool.update_weights(iter([("w", 3), ("v", 4)]), version=2)  # an iterator, read once
    assert (a.weights, b.weights, pool.version) == (7, 7, 2)
    pool.sleep()
    assert a.asleep and b.asleep
    pool.wake_up()
    assert pool.score([1, 2]) == [1.0]  # the first engine's
    with pytest.raises(RuntimeError, match="b failed to close"):
        pool.close()
    assert a.calls[-1] == "close" and b.calls[-1] == "close"  # a closed although b failed


def test_a_pool_of_one_is_that_engine():
    a = Scripted("a")
    pool = EnginePool([a])
    pool.generate([[1], [2]], SamplingParams(max_tokens=2))  # no seed: none is invented
    assert a.calls == ["generate 2 seeds=None"]
    assert pool.submit([1], P, 5).result().token_ids == a.submit([1], P, 5).result().token_ids


def test_a_pool_of_hf_engines_samples_what_one_engine_samples():
    import torch

    from skyhub.trainer.inference.hf import HFEngine
    from skyhub.trainer.tiny import tiny_model

    model = tiny_model(64, hidden_size=32, layers=1)
    tok = types.SimpleNamespace(eos_token_id=None, pad_token_id=0,
                                decode=lambda ids, **_: "")
    params = SamplingParams(max_tokens=5, temperature=1.0, seed=11)
    prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11], [12]]
    torch.manual_seed(0)
    one = HFEngine(model, tok)
    pool = EnginePool([HFEngine(model, tok), HFEngine(model, tok)])
    try:
        want = [c.token_ids for c in one.generate(prompts, params)]
        assert [c.token_ids for c in pool.generate(prompts, params)] == want
        got = [pool.submit(p, params, seed=11 + i) for i, p in enumerate(prompts)]
        assert [f.result(timeout=120).token_ids for f in got] == want
    finally:
        one.close()
        pool.close()


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.timeout(900)  # two engine starts: 125 s in all here, on 2 cores at load ~16
def test_a_pool_of_two_vllm_engines_samples_what_one_of_them_samples():
    """Real vLLM (its CPU build, `.venv-vllm`): per-request seeds make a completion the same
    on either engine, through `generate` (split) and `submit` (routed); weights reach both."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
    pytest.importorskip("vllm")
    import torch

    from skyhub.trainer.inference.vllm import VLLMEngine
    from skyhub.trainer.tiny import tiny_model
    from skyhub.trainer.weight_sync import check_sync

    model = tiny_model(256, hidden_size=128, layers=2)
    kw = dict(seed=0, dtype="float32", enforce_eager=True, max_model_len=64)
    engines = [VLLMEngine(model, **kw)]
    try:
        engines.append(VLLMEngine(model, **kw))
        pool = EnginePool(engines)
        params = SamplingParams(max_tokens=6, temperature=1.0, seed=3)
        prompts = [[5 + i, 6 + 2 * i, 7] for i in range(6)]
        want = [c.token_ids for c in engines[1].generate(prompts, params)]
        assert [c.token_ids for c in pool.generate(prompts, params)] == want
        futures = [pool.submit(p, params, 3 + i) for i, p in enumerate(prompts)]
        assert [f.result(timeout=300).token_ids for f in futures] == want
        assert min(pool.served) >= 3  # both engines served requests
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
        pool.update_weights(model.state_dict(), version=1)
        assert pool.version == 1
        for e in engines:
            check_sync(e, model)
    finally:
        for e in engines:
            e.close()


# ------------------------------------------------------------------------------ the loop
@pytest.mark.parametrize("layout", ["colocated", "split"])
def test_the_loop_sleeps_trains_wakes_then_syncs_colocated_engines(tmp_path, monkeypatch,
                                                                        layout):
    """Stand-in vLLM engines (at the boundary: an HF engine generates; sleep and wake are
    recorded), placed as a 2-GPU plan: two engines colocated with two learner GPUs, or one
    engine on the GPU a one-rank learner leaves (split: nothing sleeps)."""
    from skyhub.trainer import loop
    from skyhub.trainer.inference import hf as hf_module
    from skyhub.trainer.learner import Learner

    events: list[str] = []
    lock = threading.Lock()
    built: list[dict] = []

    def note(name: str) -> None:
        with lock:
            if not events or events[-1] != name:
                events.append(name)

    class StandIn:
        def __init__(self, model, tokenizer, **kwargs):
            self.inner = hf_module.HFEngine(model, tokenizer, seed=kwargs["seed"])
            self.asleep = False
            built.append({**kwargs, "visible": os.environ.get("CUDA_VISIBLE_DEVICES")})

        @property
        def version(self):
            return self.inner.version

        def submit(self, prompt, params, seed):
            assert not self.asleep, "a request reached a sleeping engine"
            note("generate")
            return self.inner.submit(prompt, params, seed)

        def generate(self, prompts, params, seeds=None):
            assert not self.asleep, "a request reached a sleeping engine"
            note("generate")
            return self.inner.generate(prompts, params, seeds)

        def update_weights(self, weights, version):
            assert not self.asleep, "weights synced into a sleeping engine"
            note("sync")
            self.inner.update_weights(weights, version)

        def sleep(self, level=1):
            assert level == 1
            self.asleep = True
            note("sleep")

        def wake_up(self):
            self.asleep = False
            note("wake_up")

        def close(self):
            self.inner.close()

    def make_engine(kind, model, tokenizer, *, copy_weights=False, seed=0, **kwargs):
        assert kind == "vllm"
        return StandIn(model, tokenizer, seed=seed, **kwargs)

    checked: list[object] = []
    monkeypatch.setattr(loop, "check_sync",
                        lambda engine, model: (checked.append(engine), note("check")))
    shape = (["dist.learner_ranks=2", "dist.rollout_engines=2"] if layout == "colocated" else
             ["dist.learner_ranks=1", "dist.rollout_engines=1", "dist.rollout_layout=split"])
    gpu_plan = rollout_plan(cfg("rollout.engine=vllm", "dist.rollout_tp=1", *shape,
                                recipe="tiny-cpu"),
                            parse_devices("2x80GB"),
                            learner_resident=1 * GiB, learner_peak=2 * GiB)
    monkeypatch.setattr(loop, "run_plan", lambda c: gpu_plan)
    monkeypatch.setattr(loop, "_check_vllm", lambda: None)
    monkeypatch.setattr("skyhub.trainer.inference.startup.make_engine", make_engine)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    train_step = Learner.train_step

    def recorded_train_step(self, *a, **k):
        note("train")
        return train_step(self, *a, **k)

    monkeypatch.setattr(Learner, "train_step", recorded_train_step)
    c = load_config("tiny-cpu", [
        "rollout.engine=vllm", "rollout.samples_per_prompt=2", "optim.train_batch_size=2",
        "optim.mini_batch_size=2", "env.num_envs=2", "loop.eval_every=0", "loop.max_steps=2",
        "loop.tensorboard=false", "rollout.engine_kwargs={enforce_eager: true, "
        "gpu_memory_utilization: 0.5}", f"loop.out={tmp_path}"])
    summary = loop.train(c, live=False)
    assert summary.steps == 2
    colocated = layout == "colocated"
    step = (["generate", "sleep", "train", "wake_up", "sync", "check"] if colocated else
            ["generate", "train", "sync", "check"])
    assert events == ["sync", "check", *step, *step]
    # the plan's kwargs under the recipe's (which win), each engine on its own GPU
    assert [b["visible"] for b in built] == (["0", "1"] if colocated else ["1"])
    for b in built:
        assert b["tensor_parallel_size"] == 1 and b["enable_sleep_mode"] is colocated
        assert b["gpu_memory_utilization"] == 0.5 and b["enforce_eager"] is True
        assert b["max_model_len"] == c.rollout.max_input_tokens + c.rollout.max_tokens_per_turn
    engines = len(built)
    assert len(checked) == 3 * engines and len({id(e) for e in checked}) == engines


def test_every_rank_empties_its_cache_when_rank_0_asks(monkeypatch):
    """The other ranks' side of `ShardedLearner.empty_cache`: the request is served, never
    taken for a learner method, and the learner's own calls still arrive."""
    from skyhub.trainer import dist as D

    inbox = [(D._EMPTY_CACHE, ()), ("train_step", ([], 2)), (D._EMPTY_CACHE, ()), D._STOP]
    monkeypatch.setattr(D, "receive", lambda: inbox.pop(0))
    emptied: list[int] = []
    monkeypatch.setattr(D, "empty_cache", lambda: emptied.append(1))
    calls: list[tuple] = []
    D.serve(types.SimpleNamespace(train_step=lambda *a: calls.append(a)))
    assert calls == [([], 2)] and len(emptied) == 2 and not inbox


# ------------------------------------------------------------------------------ Ray
@pytest.fixture(scope="module")
def ray_with_gpus():
    """A local Ray with 8 logical GPUs (no device behind them: the engines are scripted); one
    for the module's tests, since starting Ray is most of their time."""
    ray = pytest.importorskip("ray")
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, num_gpus=8, include_dashboard=False, logging_level="WARNING")
    yield ray
    ray.shutdown()


def _scripted_factory():
    """Built inside a function so Ray ships it by value to the actors."""

    class RemoteScripted:
        def __init__(self, model, **kwargs):
            self.model, self.kwargs = model, kwargs
            self.version, self.bias, self.asleep = 0, 0, False

        def _one(self, prompt, seed):
            return Completion([(sum(prompt) + (seed or 0) + self.bias) % 997], [-0.5],
                              [self.version], "length")

        def generate(self, prompts, params, seeds=None):
            return [self._one(p, None if seeds is None else seeds[i])
                    for i, p in enumerate(prompts)]

        def submit(self, prompt, params, seed):
            f: Future = Future()
            f.set_result(self._one(prompt, seed))
            return f

        def update_weights(self, weights, version):
            self.bias = int(sum(float(t.sum()) for t in weights.values()))
            self.version = version

        def sleep(self, level=1):
            self.asleep = True

        def wake_up(self):
            self.asleep = False

        def score(self, token_ids):
            return [self.kwargs["tensor_parallel_size"], int(self.asleep)]

        def close(self):
            pass

    return RemoteScripted


def test_engines_on_other_nodes_are_ray_actors_holding_their_own_gpus(ray_with_gpus):
    import torch

    from skyhub.trainer.inference.startup import start_ray_engines

    ray = ray_with_gpus
    plan = rollout_plan(cfg("dist.nnodes=2", "dist.learner_ranks=16"), parse_devices("8x80GB"))
    engines = start_ray_engines(plan, "Qwen/Qwen2.5-Coder-7B-Instruct",
                                factory=_scripted_factory(), timeout_s=300,
                                **plan.engine_kwargs())
    try:
        gpus = [e.where["gpu_ids"] for e in engines]
        assert [len(g) for g in gpus] == [4, 4] and not set(gpus[0]) & set(gpus[1])
        assert [e.where["cuda_visible_devices"].split(",") for e in engines] == gpus
        pool = EnginePool(engines)
        pool.update_weights({"w": torch.ones(3)}, version=4)
        assert pool.version == 4
        out = [pool.submit([1, 2], P, seed=s).result(timeout=120) for s in range(4)]
        assert [c.token_ids for c in out] == [[3 + s + 3] for s in range(4)]
        assert [c.versions for c in out] == [[4]] * 4
        assert [c.token_ids for c in pool.generate([[1], [2]], P)] == [[1 + 100 + 3],
                                                                       [2 + 101 + 3]]
        pool.sleep()
        assert [e.score([1]) for e in engines] == [[4, 1], [4, 1]]
        pool.wake_up()
        assert engines[1].score([1]) == [4, 0]
    finally:
        for e in engines:
            e.close()
    assert ray.util.placement_group_table() and all(
        pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())


def test_ray_placing_a_split_engine_on_a_learner_gpu_is_refused(ray_with_gpus):
    from skyhub.trainer.inference.startup import start_ray_engines

    ray = ray_with_gpus
    plan = rollout_plan(cfg("dist.nnodes=2", "dist.learner_ranks=12", "dist.rollout_layout=split",
                            "dist.rollout_engines=2", "dist.rollout_tp=2"),
                        parse_devices("8x80GB"))
    assert [e.gpus for e in plan.engines] == [(6, 7), (6, 7)]
    # this Ray sees all 8 GPUs, so of the 4 it hands out at least 2 are learner GPUs (0-5)
    with pytest.raises(UsageError, match="CUDA_VISIBLE_DEVICES=6,7 ray start"):
        start_ray_engines(plan, "m", factory=_scripted_factory(), timeout_s=300,
                          **plan.engine_kwargs())
    assert all(pg["state"] == "REMOVED" for pg in ray.util.placement_group_table().values())
