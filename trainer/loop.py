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

`train` runs the loop's body, `run`, in this process, or starts the learner's ranks
(`dist.launch` handed `rank_main`) and rank 0 runs it there. What a step logs beside the
learner's statistics is `stats.py`'s; evaluation during training is `evaluator.py`'s.

Over ~400 lines, for a reason: the training loop is read top to bottom in one file on
purpose (as CleanRL's are): `run` and what it calls, in the order it calls them.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import random
import shutil
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

import skyhub
from skyhub.errors import DataNotFound, MissingDependency, UsageError
from skyhub.json_safe import dumps
from skyhub.trainer import dist as D
from skyhub.trainer.checkpoint import export_model
from skyhub.trainer.config import TrainConfig, to_dict, to_yaml
from skyhub.trainer.evaluator import Evaluator
from skyhub.trainer.harness_rollout import make_rollout
from skyhub.trainer.inference import make_engine
from skyhub.trainer.inference.startup import build_engines
from skyhub.trainer.learner import Learner, learner_algo, serve_learner
from skyhub.trainer.memory import run_plan
from skyhub.trainer.placement import check_rollout_settings
from skyhub.trainer.policy import compute_dtype, enable_checkpointing
from skyhub.trainer.rollout import norm_len
from skyhub.trainer.run_log import RunLog
from skyhub.trainer.stats import episode_metrics, informative, throughput
from skyhub.trainer.tiny import env_corpus, tiny_model, train_tokenizer
from skyhub.trainer.token_layout import ChatFormat
from skyhub.trainer.weight_sync import check_sync


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
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = Path(cfg.loop.out)
    device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    if cfg.model.name_or_path == "tiny":
        if checkpoint is not None and (out / "tokenizer").is_dir():
            tokenizer = AutoTokenizer.from_pretrained(out / "tokenizer")
        else:
            texts = env_corpus(cfg.env.id, cfg.env.kwargs, seed=cfg.loop.seed)
            if cfg.env.eval_id:
                texts += env_corpus(cfg.env.eval_id, cfg.env.eval_kwargs, episodes=16)
            if cfg.rollout.harness:
                from skyhub.harness import load_harness

                texts += load_harness(cfg.rollout.harness, **cfg.rollout.harness_kwargs).corpus()
            tokenizer = train_tokenizer(texts, cfg.model.tiny_vocab, words=cfg.model.tiny_words)
        model = tiny_model(len(tokenizer), hidden_size=cfg.model.tiny_hidden,
                           layers=cfg.model.tiny_layers, seed=cfg.loop.seed,
                           prefer=tokenizer.convert_tokens_to_ids(cfg.model.tiny_words))
    else:
        try:
            tokenizer = AutoTokenizer.from_pretrained(cfg.model.name_or_path)
            model = AutoModelForCausalLM.from_pretrained(cfg.model.name_or_path,
                                                         dtype=torch.float32)
        except OSError as e:
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
        raise MissingDependency(f"rollout.engine=vllm needs vLLM ({e}); on a CPU machine run "
                                "in the virtualenv `bash scripts/vllm-venv.sh` makes "
                                "(.venv-vllm), on a GPU machine pip install the vLLM that "
                                "script pins; or rollout.engine=hf") from None


def _env_facts(env_id: str, kwargs: dict[str, Any], section: str = "env.kwargs"
               ) -> tuple[list[str], tuple[str, ...], int | None]:
    """The env's task ids, stop strings and turn budget (`max_turns`), from one instance. A
    data error says how a training run passes the env's kwargs (`env.kwargs.data_dir=...`,
    not `data_dir=...`)."""
    try:
        with skyhub.make(env_id, **kwargs) as env:
            turns = getattr(env.unwrapped, "max_turns", None)
            return ([t.id for t in env.unwrapped.tasks], tuple(env.unwrapped.stop_strings),
                    turns if isinstance(turns, int) else None)
    except DataNotFound as e:
        raise DataNotFound(f"{e} [skyhub train: the env's kwargs are {section}.NAME=VALUE "
                           f"overrides, e.g. {section}.data_dir=PATH]") from None


def total_steps(cfg: TrainConfig, n_tasks: int) -> int:
    """Steps the run takes: `loop.max_steps`, else `total_epochs` passes over `n_tasks`
    (`drop_last`: whole batches of each epoch only, SkyRL's count)."""
    if cfg.loop.max_steps:
        return cfg.loop.max_steps
    bs = cfg.optim.train_batch_size
    if cfg.loop.drop_last:
        if n_tasks < bs:
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
    keep = []
    with skyhub.make(cfg.env.id, **cfg.env.kwargs) as env:
        for tid in task_ids:
            obs, _ = env.reset(seed=cfg.loop.seed, options={"task_id": tid})
            if len(chat.prompt_ids(obs, env.unwrapped.system_prompt)) <= limit:
                keep.append(tid)
    if not keep:
        raise UsageError(f"env.max_prompt_tokens={limit}: every one of the {len(task_ids)} "
                         "tasks' prompts is longer; raise it, or null for no filter")
    return keep


def seed_everything(seed: int, deterministic: bool = False) -> None:
    """Python's, NumPy's and torch's (CPU and every GPU) global generators from `seed`;
    `deterministic`: torch's deterministic algorithms too (GPU kernels without atomics,
    cuBLAS with a fixed workspace; errors for an op that has no deterministic version)."""
    import numpy as np

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


# ------------------------------------------------------------------------------ the loop
def train(cfg: TrainConfig, *, live: bool | None = None) -> RunSummary:
    """Train as `cfg` says; returns a summary (everything is also in `cfg.loop.out`). One
    learner rank: the loop runs here (`run`). With `dist.learner_ranks` > 1 this starts the
    ranks (`rank_main` in each), waits for them and returns rank 0's summary (None on a
    machine without rank 0)."""
    if not D.active() and cfg.dist.node_rank == 0:
        claim_out(Path(cfg.loop.out), resume=cfg.loop.resume, overwrite=cfg.loop.overwrite)
    if cfg.dist.learner_ranks == 1 or D.active():
        return run(cfg, live)
    d = cfg.dist
    _check_gpus(d.learner_ranks // d.nnodes)
    if d.nnodes == 1:  # what the user can fix fails here, before any rank starts
        _env_facts(cfg.env.id, cfg.env.kwargs)
        check_rollout_settings(cfg)
        if cfg.rollout.engine == "vllm":
            run_plan(cfg)
            _check_vllm()
    result = D.launch(rank_main, (cfg, live), ranks=d.learner_ranks, nnodes=d.nnodes,
                      node_rank=d.node_rank, master_addr=d.master_addr,
                      master_port=d.master_port)
    if isinstance(result, BaseException):  # a UsageError on rank 0, raised here
        raise result
    return result


def rank_main(cfg: TrainConfig, live: bool | None) -> Any:
    """One rank of a sharded run (the entry point `train` hands `dist.launch`): rank 0 runs
    the loop (`run`), the others serve its learner calls (`learner.serve_learner`). A
    UsageError (or MissingDependency) on rank 0 is returned, for the caller to raise (a rank
    that raises takes the group down with a traceback instead)."""
    import torch.distributed as dist

    if not cfg.loop.torch_threads and not torch.cuda.is_available():
        # ranks on one CPU share its cores instead of each taking all of them
        local = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // local))
    D.init(cfg.dist.timeout_s)
    try:
        if dist.get_rank() != 0:
            seed_everything(cfg.loop.seed, cfg.loop.deterministic)  # as rank 0 seeds its own
            serve_learner(cfg)
            return None
        try:
            return run(cfg, live)
        except (UsageError, MissingDependency) as e:
            D.stop_workers()
            return e
    finally:
        dist.destroy_process_group()


def run(cfg: TrainConfig, live: bool | None = None) -> RunSummary:
    """The loop in this process (rank 0's in a sharded run), top to bottom: check what the
    user can fix, build the policy, learner, engines, envs and log, then step: rollout,
    learner step, weight sync, log, evaluate, checkpoint. Everything it starts is closed
    on the way out (`stack`), last started first."""
    t_start = time.perf_counter()
    with contextlib.ExitStack() as stack:
        stack.callback(torch.set_num_threads, torch.get_num_threads())
        if cfg.loop.torch_threads:
            torch.set_num_threads(cfg.loop.torch_threads)
        out, r = Path(cfg.loop.out), cfg.rollout
        seed_everything(cfg.loop.seed, cfg.loop.deterministic)
        checkpoint = latest_checkpoint(out) if cfg.loop.resume else None
        if cfg.loop.resume and checkpoint is None:
            raise UsageError(f"--resume: no checkpoint under {out / 'checkpoints'}; train "
                             "without --resume first, or point --out at the run to continue")
        # What can fail for a reason the user can fix fails first, before any model loads.
        task_ids, env_stop, env_turns = _env_facts(cfg.env.id, cfg.env.kwargs)
        if cfg.env.eval_id and cfg.loop.eval_every > 0 and cfg.loop.eval_tasks != 0:
            _env_facts(cfg.env.eval_id, cfg.env.eval_kwargs, "env.eval_kwargs")  # its data too
        check_rollout_settings(cfg)
        plan = run_plan(cfg) if r.engine == "vllm" else None  # a misfit is refused here
        if r.engine == "vllm":
            _check_vllm()

        # The policy and its learner. Sharded, `model` is rank 0's whole copy of the
        # weights, for the rollout engine and evaluation; the learner's ranks hold the
        # masters. vLLM keeps its own copy: the whole one then waits on the CPU.
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
            stack.callback(D.stop_workers)
        else:
            learner = Learner(model, learner_algo(cfg), cfg.optim, **learner_kwargs)

        # Where a resumed run picks up.
        sampler = TaskSampler(task_ids, cfg.loop.seed, cfg.loop.drop_last)
        first_step = 0
        if checkpoint is not None:
            learner.load(checkpoint)
            if sharded:
                model.load_state_dict(learner.full_state_dict())
            state = json.loads((checkpoint / "state.json").read_text())
            if state.get("seed", cfg.loop.seed) != cfg.loop.seed:
                raise UsageError(f"--resume: {checkpoint} was trained with loop.seed="
                                 f"{state['seed']}, not {cfg.loop.seed}; resume with "
                                 f"loop.seed={state['seed']}, or start a new run (--out)")
            sampler.load(state["sampler"])
            first_step = state["step"]

        # The rollout engines, the envs, evaluation and the log.
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
        stack.callback(engine.close)
        sleeping = plan is not None and plan.sleep
        sync_weights(engine, model, first_step)
        total = total_steps(cfg, len(task_ids))
        (out / "config.yaml").write_text(to_yaml(cfg))
        # as many envs as episodes in flight (rollout.max_in_flight; all of a step's by
        # default), so the rollout leases each episode its own
        per_step = cfg.optim.train_batch_size * r.samples_per_prompt
        venv = skyhub.make_vec(cfg.env.id, max(cfg.env.num_envs, min(per_step, r.max_in_flight
                                                                     or per_step)),
                               autoreset_mode="disabled", **cfg.env.kwargs)
        stack.callback(venv.close)
        evaluator = Evaluator(cfg, chat, make_engine(r.engine, model, tokenizer, seed=0)
                              if asynchronous and r.engine == "hf" else engine, rollout_cfg)
        stack.callback(evaluator.close)
        rollout = make_rollout(venv, engine, chat, rollout_cfg)
        stack.callback(rollout.close)
        log = RunLog(out, total, live=live, tensorboard=cfg.loop.tensorboard,
                     wandb_project=cfg.loop.wandb_project, config=to_dict(cfg),
                     first_step=first_step)
        batches = (_async_batches if asynchronous else _sync_batches)(
            cfg, rollout, sampler, engine, first_step, total)
        stack.callback(batches.close)
        stack.enter_context(log)

        # The steps.
        if cfg.loop.eval_before_train and first_step == 0 and evaluator.enabled():
            t = time.perf_counter()
            row = evaluator.run()
            eval_s = time.perf_counter() - t
            log.log({"step": 0, **row, "eval_s": eval_s, "step_s": eval_s,
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
                t_eval = time.perf_counter()
                row.update(evaluator.run())
                row["eval_s"] = time.perf_counter() - t_eval
                log.log_episodes("eval/episodes", step + 1, evaluator.records())
            # the step's checkpoint before its metrics line, so the line can say what the
            # checkpoint took (`checkpoint_s`) and `step_s` is the whole step
            t_save, saved = time.perf_counter(), False
            every = cfg.loop.save_every
            if (every and (step + 1) % every == 0) or step + 1 == total:
                _save(out, learner, step + 1, sampler_state, cfg)
                saved = True
            hf_every = cfg.loop.hf_save_every
            if hf_every and ((step + 1) % hf_every == 0 or step + 1 == total):
                export_hf(out, model, tokenizer, step + 1)
                saved = True
            if saved:
                row["checkpoint_s"] = time.perf_counter() - t_save
            row["step_s"] = time.perf_counter() - row.pop("_t0", t)
            row["elapsed_s"] = time.perf_counter() - t_start
            log.log(row)
        log.plot()
    rows = [x for x in log.rows if "reward_mean" in x]  # not eval_before_train's step 0
    tail = rows[-3:] or [{"reward_mean": float("nan")}]
    evals = [x["eval_reward_mean"] for x in log.rows if "eval_reward_mean" in x]
    return RunSummary(out=out, steps=len(rows), reward_first=rows[0]["reward_mean"] if rows
                      else float("nan"),
                      reward_last=sum(x["reward_mean"] for x in tail) / len(tail),
                      eval_reward=evals[-1] if evals else None,
                      seconds=time.perf_counter() - t_start, metrics=rows,
                      eval_env=evaluator.describe())


#: What a training run writes into its `loop.out` (what --overwrite removes; nothing else).
RUN_FILES = ("checkpoints", "metrics.jsonl", "curves.png", "tensorboard", "episodes",
             "config.yaml", "tokenizer", "hf")


def claim_out(out: Path, *, resume: bool, overwrite: bool) -> None:
    """A new run may not write into a directory that holds one (its checkpoints and metrics
    would be mixed with the new run's): `--resume` continues it, `--overwrite` removes what
    a run wrote there first."""
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
    if torch.cuda.is_available() and torch.cuda.device_count() < per_node:
        raise UsageError(f"dist.learner_ranks asks for {per_node} learner ranks on this machine "
                         f"but it has {torch.cuda.device_count()} GPUs (one rank per GPU): set "
                         f"dist.learner_ranks={torch.cuda.device_count()} (times dist.nnodes), "
                         "and check the fit with --dry-run")


def export_hf(out: Path, model: Any, tokenizer: Any, step: int) -> Path:
    """The policy alone in Hugging Face's format (`loop.hf_save_every`, SkyRL's
    hf_save_interval): `out/hf/step_N`, float32, with its tokenizer. `model` is rank 0's whole
    copy (sharded runs load it after every step), so no collective is needed."""

    path = out / "hf" / f"step_{step:06d}"
    export_model(model, None, path)
    tokenizer.save_pretrained(path)
    return path


def sync_weights(engine: Any, model: Any, version: int) -> None:
    """Give every engine `model`'s weights as `version`, then check each engine's sync: its
    logprobs of a probe sequence must be the learner's (`weight_sync.check_sync` raises for a
    sync that did not land)."""

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


