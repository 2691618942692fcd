"""The training loop, top to bottom: build the policy, envs, engine and learner from a
`TrainConfig`, then repeat rollout -> learner step -> weight sync, synchronously or with
generation running ahead of the learner (asynchronous, in-flight weight updates, at most
`loop.max_staleness` policy versions behind).

vLLM engines are placed on the node's GPUs as `skyhub.trainer.placement` plans them
(`dist.rollout_engines` x `dist.rollout_tp`, colocated or split). Colocated in a synchronous
loop, a step is: generate, engines sleep, learner step, engines wake up, weight sync (SkyRL's
colocate_all order), and every sync is checked with `weight_sync.check_sync`.

    from skyhub.trainer.config import load_config
    from skyhub.trainer.loop import train
    summary = train(load_config("tiny-cpu", ["loop.out=runs/mine"]))

Over ~400 lines, for a reason: the training loop is read top to bottom in one file on
purpose (as CleanRL's are).
"""

from __future__ import annotations

import contextlib
import json
import math
import queue
import random
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from skyhub.trainer.config import TrainConfig, to_dict, to_yaml


@dataclass
class RunSummary:
    out: Path
    steps: int
    reward_first: float
    reward_last: float  # mean over the last few steps
    eval_reward: float | None
    seconds: float
    metrics: list[dict[str, Any]]
    eval_env: str = ""  # the env (and kwargs) the evaluations ran on


class TaskSampler:
    """The env's task ids in a seeded random order, epoch after epoch. Its state is part of a
    checkpoint, so a resumed run trains on the prompts the uninterrupted run would have.

    `drop_last`: a batch never runs on into the next epoch; an epoch's remainder (fewer
    than a batch) is left out, as a DataLoader with drop_last=True leaves it out."""

    def __init__(self, task_ids: list[str], seed: int, drop_last: bool = False) -> None:
        if not task_ids:
            from skyhub.errors import UsageError

            raise UsageError("the env has no tasks to train on")
        self.task_ids, self.seed, self.drop_last = task_ids, seed, drop_last
        self.epoch, self.pos = 0, 0
        self._order = self._shuffled()

    def _shuffled(self) -> list[str]:
        order = list(self.task_ids)
        random.Random(self.seed * 7919 + self.epoch).shuffle(order)
        return order

    def next(self, n: int) -> list[str]:
        if self.drop_last and len(self._order) - self.pos < n:
            self.epoch, self.pos = self.epoch + 1, 0
            self._order = self._shuffled()
        out = []
        while len(out) < n:
            if self.pos == len(self._order):
                self.epoch, self.pos = self.epoch + 1, 0
                self._order = self._shuffled()
            out.append(self._order[self.pos])
            self.pos += 1
        return out

    def state(self) -> dict[str, int]:
        return {"epoch": self.epoch, "pos": self.pos}

    def load(self, state: dict[str, int]) -> None:
        self.epoch, self.pos = state["epoch"], state["pos"]
        self._order = self._shuffled()


# ------------------------------------------------------------------------------ building
def build_policy(cfg: TrainConfig, checkpoint: Path | None = None,
                 device: str | None = None) -> tuple[Any, Any]:
    """(model, tokenizer): "tiny" trains a tokenizer on the env's text and makes a random
    model; anything else is loaded with transformers (a hub id or a local path). The weights
    are float32 (the learner's masters, whatever `model.dtype` says: that is the compute
    precision), on `device` (default: the GPU if there is one, else the CPU)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(cfg.loop.out)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.model.name_or_path == "tiny":
        from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer

        if checkpoint is not None and (out / "tokenizer").is_dir():
            tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
        else:
            texts = env_corpus(cfg.env.id, cfg.env.kwargs, seed=cfg.loop.seed)
            if cfg.env.eval_id:
                texts += env_corpus(cfg.env.eval_id, cfg.env.eval_kwargs, episodes=16)
            tokenizer = train_tokenizer(texts)
        model = tiny_model(len(tokenizer), hidden_size=cfg.model.tiny_hidden,
                           layers=cfg.model.tiny_layers, seed=cfg.loop.seed)
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(cfg.model.name_or_path)
            model = AutoModelForCausalLM.from_pretrained(cfg.model.name_or_path,
                                                         dtype=torch.float32)
        except OSError as e:
            from skyhub.errors import UsageError

            raise UsageError(f"could not load model.name_or_path={cfg.model.name_or_path!r} "
                             f"({str(e).splitlines()[0]}); pass a local directory or a hub id "
                             "this machine can download, or model.name_or_path=tiny") from None
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    model.to(device=device, dtype=torch.float32)
    if cfg.model.gradient_checkpointing:
        enable_checkpointing(model)
        model.config.use_cache = False
    tokenizer.save_pretrained(out / "tokenizer")
    return model, tokenizer


def _check_vllm() -> None:
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        from skyhub.errors import MissingDependency

        raise MissingDependency(f"rollout.engine=vllm needs vLLM ({e}); on a CPU machine run "
                                "in the virtualenv `bash scripts/vllm-venv.sh` makes "
                                "(.venv-vllm), on a GPU machine pip install the vLLM that "
                                "script pins; or rollout.engine=hf") from None


def enable_checkpointing(model: Any) -> None:
    """Gradient (activation) checkpointing, under the name this transformers version uses."""
    enable = getattr(model, "activation_checkpointing_enable", None)
    (enable or model.gradient_checkpointing_enable)()


def _env_facts(env_id: str, kwargs: dict[str, Any], section: str = "env.kwargs"
               ) -> tuple[list[str], tuple[str, ...], int | None]:
    """The env's task ids, stop strings and turn budget (`max_turns`), from one instance. A
    data error says how a training run passes the env's kwargs (`env.kwargs.data_dir=...`,
    not `data_dir=...`)."""
    import skyhub
    from skyhub.errors import DataNotFound

    try:
        with skyhub.make(env_id, **kwargs) as env:
            turns = getattr(env.unwrapped, "max_turns", None)
            return ([t.id for t in env.unwrapped.tasks], tuple(env.unwrapped.stop_strings),
                    turns if isinstance(turns, int) else None)
    except DataNotFound as e:
        raise DataNotFound(f"{e} [skyhub train: the env's kwargs are {section}.NAME=VALUE "
                           f"overrides, e.g. {section}.data_dir=PATH]") from None


def eval_task_ids(tasks: Any, n: int | None, seed: int) -> list[str]:
    """The tasks an evaluation plays: all of them (`n` None or >= their number), else `n`
    drawn with `seed` and spread over the tasks' databases (`skyhub.task.spread_sample`, the
    sample `skyhub eval --n` takes too), in the task set's order."""
    from skyhub.task import spread_sample

    if n is None or n >= len(tasks):
        return [t.id for t in tasks]
    return [tasks[i].id for i in sorted(spread_sample(tasks, n, seed, "db_id"))]


def total_steps(cfg: TrainConfig, n_tasks: int) -> int:
    """Steps the run takes: `loop.max_steps`, else `total_epochs` passes over `n_tasks`
    (`drop_last`: whole batches of each epoch only, SkyRL's count)."""
    if cfg.loop.max_steps:
        return cfg.loop.max_steps
    bs = cfg.optim.train_batch_size
    if cfg.loop.drop_last:
        if n_tasks < bs:
            from skyhub.errors import UsageError

            raise UsageError(f"loop.drop_last: the env has {n_tasks} tasks to train on, fewer "
                             f"than one batch (optim.train_batch_size={bs}): lower the batch, "
                             "or loop.drop_last=false")
        return cfg.loop.total_epochs * (n_tasks // bs)
    return math.ceil(cfg.loop.total_epochs * n_tasks / bs)


def filter_prompts(cfg: TrainConfig, task_ids: list[str], chat: Any) -> list[str]:
    """The tasks whose prompt, as the rollout builds it (system prompt and first observation,
    chat-templated with the generation prompt), is at most `env.max_prompt_tokens` tokens:
    SkyRL's prompt-length filter of its dataset. One reset per task, once per run."""
    limit = cfg.env.max_prompt_tokens
    if limit is None:
        return task_ids
    import skyhub

    keep = []
    with skyhub.make(cfg.env.id, **cfg.env.kwargs) as env:
        for tid in task_ids:
            obs, _ = env.reset(seed=cfg.loop.seed, options={"task_id": tid})
            if len(chat.prompt_ids(obs, env.unwrapped.system_prompt)) <= limit:
                keep.append(tid)
    if not keep:
        from skyhub.errors import UsageError

        raise UsageError(f"env.max_prompt_tokens={limit}: every one of the {len(task_ids)} "
                         "tasks' prompts is longer; raise it, or null for no filter")
    return keep


def learner_algo(cfg: TrainConfig) -> Any:
    """`cfg.algo` as the learner applies it: truncated importance sampling only where the
    engine's weights can differ from the learner's (see `AlgoConfig.tis_cap`). The hf engine
    in a synchronous loop samples with the weights the learner is about to train, so the
    learner's logprobs are the sampling distribution's (every rank builds its learner with
    this, so all agree)."""
    same_weights = cfg.rollout.engine == "hf" and cfg.loop.mode == "sync"
    return replace(cfg.algo, tis_cap=None) if same_weights else cfg.algo


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Python's, NumPy's and torch's (CPU and every GPU) global generators from `seed`;
    `deterministic`: torch's deterministic algorithms too (GPU kernels without atomics,
    cuBLAS with a fixed workspace; errors for an op that has no deterministic version)."""
    import os

    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)  # seeds every CUDA device too
    if deterministic:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
        torch.backends.cudnn.benchmark = False


def by_episode_index(episodes: list[Any]) -> list[Any]:
    """Trajectories in episode order (group, then sample), whatever order they finished in,
    so the learner's packing, rank split and float sums are the same run to run."""
    return sorted(episodes, key=lambda e: (e.group, e.seed))


def latest_checkpoint(out: Path) -> Path | None:
    ckpts = sorted((out / "checkpoints").glob("step_*"))
    return ckpts[-1] if ckpts else None


def episode_metrics(episodes: list[Any], step: int) -> dict[str, float]:
    ok = [e for e in episodes if not e.infra_error]
    n = max(len(ok), 1)
    rewards = [e.reward for e in ok]
    mean = sum(rewards) / n
    versions = [e.min_version for e in ok if e.min_version >= 0]
    groups: dict[int, set[float]] = {}
    for e in ok:
        groups.setdefault(e.group, set()).add(e.reward)
    lengths = [e.agent_tokens for e in ok] or [0]
    return {"reward_mean": mean,
            "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / n),
            "success_rate": sum(e.outcome == "success" for e in ok) / n,
            "episodes": float(len(episodes)),
            "infra_errors": float(len(episodes) - len(ok)),
            "truncated_frac": sum(e.truncated for e in ok) / n,
            "turns_mean": sum(e.turns for e in ok) / n,
            "response_tokens_mean": sum(e.agent_tokens for e in ok) / n,
            "response_tokens_min": float(min(lengths)),
            "response_tokens_max": float(max(lengths)),
            # groups whose samples all scored the same: no signal for GRPO-style estimators
            "zero_variance_groups": (sum(len(r) == 1 for r in groups.values())
                                     / max(len(groups), 1)),
            "seq_tokens_mean": sum(len(e.token_ids) for e in ok) / n,
            "staleness_mean": (sum(step - v for v in versions) / len(versions)
                               if versions else 0.0),
            "staleness_max": float(max((step - v for v in versions), default=0))}


# ------------------------------------------------------------------------------ the loop
def train(cfg: TrainConfig, *, live: bool | None = None) -> RunSummary:
    """Train as `cfg` says; returns a summary (everything is also in `cfg.loop.out`). With
    `dist.learner_ranks` > 1 this starts the ranks, waits for them and returns rank 0's
    summary (None on a machine without rank 0)."""
    from skyhub.trainer import dist as D

    if not D.active() and cfg.dist.node_rank == 0:
        claim_out(Path(cfg.loop.out), resume=cfg.loop.resume, overwrite=cfg.loop.overwrite)
    if cfg.dist.learner_ranks == 1 or D.active():
        return _train_here(cfg, live)
    d = cfg.dist
    _check_gpus(d.learner_ranks // d.nnodes)
    if d.nnodes == 1:  # what the user can fix fails here, before any rank starts
        from skyhub.trainer.memory import run_plan
        from skyhub.trainer.placement import check_rollout_settings

        _env_facts(cfg.env.id, cfg.env.kwargs)
        check_rollout_settings(cfg)
        if cfg.rollout.engine == "vllm":
            run_plan(cfg)
            _check_vllm()
    result = D.launch(D.rank_main, (cfg, live), ranks=d.learner_ranks, nnodes=d.nnodes,
                      node_rank=d.node_rank, master_addr=d.master_addr,
                      master_port=d.master_port)
    if isinstance(result, BaseException):  # a UsageError on rank 0, raised here
        raise result
    return result


#: What a training run writes into its `loop.out` (what --overwrite removes; nothing else).
RUN_FILES = ("checkpoints", "metrics.jsonl", "curves.png", "tensorboard", "episodes",
             "config.yaml", "tokenizer", "hf")


def claim_out(out: Path, *, resume: bool, overwrite: bool) -> None:
    """A new run may not write into a directory that holds one (its checkpoints and metrics
    would be mixed with the new run's): `--resume` continues it, `--overwrite` removes what
    a run wrote there first."""
    from skyhub.errors import UsageError

    held = [name for name in RUN_FILES if (out / name).exists()]
    if not held or resume:
        return
    if not overwrite:
        raise UsageError(f"{out} already holds a training run ({', '.join(held)}): pass "
                         "--resume to continue it, --overwrite to start it again (what it "
                         "wrote is deleted), or --out another directory")
    for name in held:
        path = out / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()


def _check_gpus(per_node: int) -> None:
    """One learner rank per GPU: a GPU machine needs as many as this node's ranks (a CPU
    machine runs gloo processes instead, as many as asked)."""
    import torch

    if torch.cuda.is_available() and torch.cuda.device_count() < per_node:
        from skyhub.errors import UsageError

        raise UsageError(f"dist.learner_ranks asks for {per_node} learner ranks on this machine "
                         f"but it has {torch.cuda.device_count()} GPUs (one rank per GPU): set "
                         f"dist.learner_ranks={torch.cuda.device_count()} (times dist.nnodes), "
                         "and check the fit with --dry-run")


def _train_here(cfg: TrainConfig, live: bool | None) -> RunSummary:
    import torch

    t_start = time.perf_counter()
    threads = torch.get_num_threads()
    if cfg.loop.torch_threads:
        torch.set_num_threads(cfg.loop.torch_threads)
    try:
        return _train(cfg, live, t_start)
    finally:
        torch.set_num_threads(threads)


def _train(cfg: TrainConfig, live: bool | None, t_start: float) -> RunSummary:
    from skyhub.trainer import dist as D
    from skyhub.trainer.learner import Learner
    from skyhub.trainer.policy import compute_dtype
    from skyhub.trainer.rollout import norm_len
    from skyhub.trainer.token_layout import ChatFormat

    out = Path(cfg.loop.out)
    seed_everything(cfg.loop.seed, cfg.loop.deterministic)
    checkpoint = latest_checkpoint(out) if cfg.loop.resume else None
    if cfg.loop.resume and checkpoint is None:
        from skyhub.errors import UsageError

        raise UsageError(f"--resume: no checkpoint under {out / 'checkpoints'}; train without "
                         "--resume first, or point --out at the run to continue")
    # What can fail for a reason the user can fix fails first, before any model loads.
    task_ids, env_stop, env_turns = _env_facts(cfg.env.id, cfg.env.kwargs)
    if cfg.env.eval_id and cfg.loop.eval_every > 0 and cfg.loop.eval_tasks != 0:
        _env_facts(cfg.env.eval_id, cfg.env.eval_kwargs, "env.eval_kwargs")  # its data too
    r = cfg.rollout
    from skyhub.trainer.memory import run_plan
    from skyhub.trainer.placement import check_rollout_settings

    check_rollout_settings(cfg)
    plan = run_plan(cfg) if r.engine == "vllm" else None  # a misfit is refused here
    if r.engine == "vllm":
        _check_vllm()
    # Sharded, `model` is rank 0's whole copy of the weights, for the rollout engine and
    # evaluation; the learner's ranks hold the masters. vLLM keeps its own copy: the whole
    # one then waits on the CPU.
    sharded = D.active()
    model, tokenizer = build_policy(cfg, checkpoint,
                                    device="cpu" if sharded and r.engine == "vllm" else None)
    chat = ChatFormat(tokenizer)
    if r.chat_layout == "assistant-message":
        chat.check_inline()  # a tokenizer this layout cannot use fails before envs start
    task_ids = filter_prompts(cfg, task_ids, chat)
    rollout_cfg = replace(r, stop=list(r.stop) or list(env_stop))  # empty: the env's
    learner_kwargs = {"temperature": r.temperature, "pad_id": tokenizer.pad_token_id,
                      "pack": cfg.optim.pack, "norm_len": norm_len(r, env_turns),
                      "dtype": compute_dtype(cfg.model.dtype, D.device())}
    if sharded:
        D.send((type(model), model.config, learner_kwargs))  # the other ranks build theirs
        learner: Any = D.ShardedLearner(Learner(model, learner_algo(cfg), cfg.optim,
                                                shard=True, **learner_kwargs))
    else:
        learner = Learner(model, learner_algo(cfg), cfg.optim, **learner_kwargs)
    try:
        return _run(cfg, live, t_start, learner, model, tokenizer, chat, rollout_cfg, task_ids,
                    checkpoint, plan)
    finally:
        if sharded:
            D.stop_workers()


def _run(cfg: TrainConfig, live: bool | None, t_start: float, learner: Any, model: Any,
         tokenizer: Any, chat: Any, rollout_cfg: Any, task_ids: list[str],
         checkpoint: Path | None, plan: Any = None) -> RunSummary:
    import skyhub
    from skyhub.trainer import dist as D
    from skyhub.trainer.inference import make_engine
    from skyhub.trainer.inference.startup import build_engines
    from skyhub.trainer.rollout import Rollout
    from skyhub.trainer.run_log import RunLog

    out, r = Path(cfg.loop.out), cfg.rollout
    sharded = learner.sharded
    sampler = TaskSampler(task_ids, cfg.loop.seed, cfg.loop.drop_last)
    first_step = 0
    if checkpoint is not None:
        learner.load(checkpoint)
        if sharded:
            model.load_state_dict(learner.full_state_dict())
        state = json.loads((checkpoint / "state.json").read_text())
        if state.get("seed", cfg.loop.seed) != cfg.loop.seed:
            from skyhub.errors import UsageError

            raise UsageError(f"--resume: {checkpoint} was trained with loop.seed="
                             f"{state['seed']}, not {cfg.loop.seed}; resume with "
                             f"loop.seed={state['seed']}, or start a new run (--out)")
        sampler.load(state["sampler"])
        first_step = state["step"]
    asynchronous = cfg.loop.mode == "async"
    engine_kwargs = dict(r.engine_kwargs)
    if r.engine == "vllm":
        engine_kwargs.setdefault("max_model_len", r.max_input_tokens + r.max_tokens_per_turn)
    with D.outside_the_group() if sharded else contextlib.nullcontext():
        if plan is None:  # the hf engine, in this process
            engine = make_engine(r.engine, model, tokenizer, copy_weights=asynchronous,
                                 seed=cfg.loop.seed, **engine_kwargs)
        else:  # the plan's engines (one, or an EnginePool), the recipe's kwargs over its own
            engine = build_engines(plan, model, tokenizer, copy_weights=asynchronous,
                                   seed=cfg.loop.seed, **engine_kwargs)
    sleeping = plan is not None and plan.sleep
    sync_weights(engine, model, first_step)
    total = total_steps(cfg, len(task_ids))
    (out / "config.yaml").write_text(to_yaml(cfg))
    # as many envs as episodes in flight (rollout.max_in_flight; all of a step's by default),
    # so the rollout leases each episode its own
    per_step = cfg.optim.train_batch_size * r.samples_per_prompt
    venv = skyhub.make_vec(cfg.env.id, max(cfg.env.num_envs, min(per_step, r.max_in_flight
                                                                 or per_step)),
                           autoreset_mode="disabled", **cfg.env.kwargs)
    evaluator = _Evaluator(cfg, chat, make_engine(r.engine, model, tokenizer, seed=0)
                           if asynchronous and r.engine == "hf" else engine, rollout_cfg)
    rollout = Rollout(venv, engine, chat, rollout_cfg)
    log = RunLog(out, total, live=live, tensorboard=cfg.loop.tensorboard,
                 wandb_project=cfg.loop.wandb_project, config=to_dict(cfg),
                 first_step=first_step)
    batches = (_async_batches if asynchronous else _sync_batches)(
        cfg, rollout, sampler, engine, first_step, total)
    try:
        with log:
            if cfg.loop.eval_before_train and first_step == 0 and evaluator.enabled():
                t = time.perf_counter()
                log.log({"step": 0, **evaluator.run(), "step_s": time.perf_counter() - t,
                         "elapsed_s": time.perf_counter() - t_start})
                log.log_episodes("eval/episodes", 0, evaluator.records())
            for step, episodes, sampler_state, rollout_stats in batches:
                t = time.perf_counter()
                episodes = by_episode_index(episodes)
                if sleeping:  # colocated: the learner gets the GPUs' memory for its step
                    engine.sleep(level=1)
                metrics = learner.train_step(episodes, r.samples_per_prompt)
                if sharded:  # rank 0's whole copy, for the engine and evaluation
                    model.load_state_dict(learner.full_state_dict())
                train_s = time.perf_counter() - t
                if sleeping:  # what the step's working set freed goes back to the engines
                    (learner.empty_cache if sharded else D.empty_cache)()
                    engine.wake_up()
                sync_weights(engine, model, step + 1)
                row = {"step": step + 1, "world_size": learner.world,
                       **episode_metrics(episodes, step),
                       **informative(metrics, cfg), **rollout_stats, "train_s": train_s,
                       **throughput(episodes, rollout_stats, train_s, cfg.optim.epochs)}
                if cfg.loop.save_episodes:
                    save_episodes(out, step + 1, episodes, cfg)
                if evaluator.due(step + 1, total):
                    row.update(evaluator.run())
                    log.log_episodes("eval/episodes", step + 1, evaluator.records())
                row["step_s"] = time.perf_counter() - row.pop("_t0", t)
                row["elapsed_s"] = time.perf_counter() - t_start
                log.log(row)
                if (step + 1) % cfg.loop.save_every == 0 or step + 1 == total:
                    _save(out, learner, step + 1, sampler_state, cfg)
                hf_every = cfg.loop.hf_save_every
                if hf_every and ((step + 1) % hf_every == 0 or step + 1 == total):
                    export_hf(out, model, tokenizer, step + 1)
            log.plot()
    finally:
        batches.close()
        rollout.close()
        venv.close()
        evaluator.close()
        engine.close()
    rows = [x for x in log.rows if "reward_mean" in x]  # not eval_before_train's step 0
    tail = rows[-3:] or [{"reward_mean": float("nan")}]
    evals = [x["eval_reward_mean"] for x in log.rows if "eval_reward_mean" in x]
    return RunSummary(out=out, steps=len(rows), reward_first=rows[0]["reward_mean"] if rows
                      else float("nan"),
                      reward_last=sum(x["reward_mean"] for x in tail) / len(tail),
                      eval_reward=evals[-1] if evals else None,
                      seconds=time.perf_counter() - t_start, metrics=rows,
                      eval_env=evaluator.describe())


#: Learner statistics that are exactly 1 (ratio, TIS weight) or 0 (clip fraction, approx
#: KL) unless the policy that is trained differs from the one that sampled.
OFF_POLICY_KEYS = ("ratio_mean", "clip_frac", "approx_kl", "dual_clip_frac")
TIS_KEYS = ("tis_weight_mean", "tis_capped_frac")


def informative(metrics: dict[str, float], cfg: TrainConfig) -> dict[str, float]:
    """The learner's statistics less those that cannot differ from their on-policy value in
    this run: the ratio, clip fraction and approx KL need several epochs or mini-batches
    (the policy moves between sampling and training) or an asynchronous loop; the TIS
    weight needs TIS applied (an engine whose weights can differ: `learner_algo`)."""
    o = cfg.optim
    moves = (o.epochs > 1 or o.mini_batch_size < o.train_batch_size
             or cfg.loop.mode == "async" or cfg.rollout.engine != "hf")
    drop = set(() if moves else OFF_POLICY_KEYS)
    if learner_algo(cfg).tis_cap is None:
        drop.update(TIS_KEYS)
    return {k: v for k, v in metrics.items() if k not in drop}


def throughput(episodes: list[Any], rollout_stats: dict[str, Any], train_s: float,
               epochs: int) -> dict[str, float]:
    """Tokens per second: sampled by the engine over the rollout's wall time, and trained
    (every token of every episode the learner used, each epoch) over the learner's."""
    used = [e for e in episodes if not e.infra_error and e.agent_tokens > 0]
    gen_s = float(rollout_stats.get("rollout_s") or 0.0)
    out = {}
    if gen_s > 0:
        out["gen_tokens_per_s"] = sum(e.agent_tokens for e in episodes) / gen_s
    if train_s > 0:
        out["train_tokens_per_s"] = epochs * sum(len(e.token_ids) for e in used) / train_s
    return out


def export_hf(out: Path, model: Any, tokenizer: Any, step: int) -> Path:
    """The policy alone in Hugging Face's format (`loop.hf_save_every`, SkyRL's
    hf_save_interval): `out/hf/step_N`, float32, with its tokenizer. `model` is rank 0's whole
    copy (sharded runs load it after every step), so no collective is needed."""
    from skyhub.trainer.checkpoint import export_model

    path = out / "hf" / f"step_{step:06d}"
    export_model(model, None, path)
    tokenizer.save_pretrained(path)
    return path


def sync_weights(engine: Any, model: Any, version: int) -> None:
    """Give every engine `model`'s weights as `version`, then check each engine's sync: its
    logprobs of a probe sequence must be the learner's (`weight_sync.check_sync` raises for a
    sync that did not land)."""
    from skyhub.trainer.weight_sync import check_sync

    engine.update_weights(model.state_dict(), version)
    for e in getattr(engine, "engines", None) or [engine]:
        check_sync(e, model)


def _sync_batches(cfg: TrainConfig, rollout: Any, sampler: TaskSampler, engine: Any,
                  first: int, total: int):
    """Generate a batch with the current weights, hand it to the learner, repeat."""
    for step in range(first, total):
        t0 = time.perf_counter()
        tasks = sampler.next(cfg.optim.train_batch_size)
        episodes = rollout.run(tasks, cfg.rollout.samples_per_prompt,
                               seed=cfg.loop.seed * 100_003 + step)
        yield step, episodes, sampler.state(), {**rollout.stats, "_t0": t0}


def _async_batches(cfg: TrainConfig, rollout: Any, sampler: TaskSampler, engine: Any,
                   first: int, total: int):
    """A producer thread keeps generating while the learner trains. Batch b may start only
    once the engine holds weights of version >= b - max_staleness, so no sample is more than
    `max_staleness` versions old when the learner (at version b) uses it; weights that arrive
    mid-generation are used from the next decoding step on (each token records its
    version, and truncated importance sampling corrects for the lag)."""
    ready: queue.Queue[Any] = queue.Queue(maxsize=cfg.loop.max_staleness + 1)
    stop = threading.Event()

    def produce() -> None:
        import torch

        # OpenMP thread counts are per thread: on a CPU, generating with one core leaves the
        # others to the learner instead of both oversubscribing every core.
        torch.set_num_threads(1)
        try:
            for b in range(first, total):
                while engine.version < b - cfg.loop.max_staleness and not stop.is_set():
                    time.sleep(0.002)
                if stop.is_set():
                    return
                tasks = sampler.next(cfg.optim.train_batch_size)
                episodes = rollout.run(tasks, cfg.rollout.samples_per_prompt,
                                       seed=cfg.loop.seed * 100_003 + b)
                ready.put((b, episodes, sampler.state(), {**rollout.stats}))
        except BaseException as e:  # surfaced in the learner's thread
            ready.put(e)

    producer = threading.Thread(target=produce, name="skyhub-rollout", daemon=True)
    producer.start()
    try:
        for _ in range(first, total):
            t0 = time.perf_counter()
            item = ready.get()
            if isinstance(item, BaseException):
                raise item
            b, episodes, state, stats = item
            yield b, episodes, state, {**stats, "wait_s": time.perf_counter() - t0, "_t0": t0}
    finally:
        stop.set()
        while producer.is_alive():
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.05)
        producer.join()


def save_episodes(out: Path, step: int, episodes: list[Any], cfg: TrainConfig) -> Path:
    """`out/episodes/step-N.jsonl`: the step's training episodes as eval records (agent
    `policy@N`: the policy before step N's update)."""
    from skyhub.eval.rundir import dumps

    path = out / "episodes" / f"step-{step:06d}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(dumps(e.to_record(k, env_id=cfg.env.id, env_kwargs=cfg.env.kwargs,
                                              agent=f"policy@{step}"),
                                  default=str, ensure_ascii=False) + "\n"
                            for k, e in enumerate(episodes)), encoding="utf-8")
    return path


def _save(out: Path, learner: Any, step: int, sampler_state: dict[str, int],
          cfg: TrainConfig) -> Path:
    path = out / "checkpoints" / f"step_{step:06d}"
    learner.save(path)
    (path / "state.json").write_text(json.dumps({"step": step, "sampler": sampler_state,
                                                 "recipe": cfg.recipe, "seed": cfg.loop.seed}))
    return path


class _Evaluator:
    """Greedy evaluation on `env.eval_id` (or the training env), one episode per task."""

    def __init__(self, cfg: TrainConfig, chat: Any, engine: Any, rollout_cfg: Any) -> None:
        from dataclasses import replace

        self.cfg, self.engine = cfg, engine
        self.env_id = cfg.env.eval_id or cfg.env.id
        self.kwargs = cfg.env.eval_kwargs if cfg.env.eval_id else cfg.env.kwargs
        self.rollout_cfg = replace(rollout_cfg, temperature=0.0)
        self.chat = chat
        self._rollout: Any = None
        self._tasks: list[str] = []
        self._episodes: list[Any] = []

    def describe(self) -> str:
        """`toy-recall n_words=6`: what the evaluations ran on, for the summary and logs."""
        return " ".join([self.env_id, *(f"{k}={v}" for k, v in self.kwargs.items())])

    def enabled(self) -> bool:
        return self.cfg.loop.eval_every > 0 and self.cfg.loop.eval_tasks != 0

    def due(self, step: int, total: int) -> bool:
        return self.enabled() and (step % self.cfg.loop.eval_every == 0 or step == total)

    def run(self) -> dict[str, float]:
        import skyhub
        from skyhub.trainer.rollout import Rollout

        if self._rollout is None:
            self._tasks = self.task_ids()
            n = len(self._tasks)  # one env per eval episode, up to rollout.max_in_flight
            venv = skyhub.make_vec(self.env_id, max(1, min(n, self.rollout_cfg.max_in_flight
                                                           or n)),
                                   autoreset_mode="disabled", **self.kwargs)
            self._rollout = Rollout(venv, self.engine, self.chat, self.rollout_cfg)
        size = self.cfg.loop.eval_batch_size or len(self._tasks)
        episodes = self._episodes = [  # batch after batch, each finished before the next
            e for k in range(0, len(self._tasks), size)
            for e in self._rollout.run(self._tasks[k:k + size], 1, seed=k // size)]
        m = episode_metrics(episodes, 0)
        return {"eval_reward_mean": m["reward_mean"], "eval_success_rate": m["success_rate"],
                "eval_infra_errors": m["infra_errors"], "eval_turns_mean": m["turns_mean"],
                "eval_env": self.env_id}

    def task_ids(self) -> list[str]:
        """The eval env's tasks that every evaluation plays (`loop.eval_tasks`)."""
        import skyhub

        with skyhub.make(self.env_id, **self.kwargs) as env:
            return eval_task_ids(env.unwrapped.tasks, self.cfg.loop.eval_tasks,
                                 self.cfg.loop.seed)

    def records(self, limit: int = 3) -> list[dict[str, Any]]:
        """The last evaluation's first episodes as eval records (TensorBoard's text tab)."""
        return [e.to_record(k, env_id=self.env_id, env_kwargs=self.kwargs, agent="policy")
                for k, e in enumerate(self._episodes[:limit])]

    def close(self) -> None:
        if self._rollout is not None:
            self._rollout.close()
            self._rollout.venv.close()
