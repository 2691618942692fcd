"""Training configs: plain dataclasses, loaded from a recipe's YAML plus `key=value` overrides.

    cfg = load_config("sql-grpo-653", ["optim.lr=2e-6", "loop.out=runs/try2"])
    print(to_yaml(cfg))                       # what `skyhub train --print-config` shows

A recipe is `trainer/recipes/<name>.yaml` (or any YAML path) holding some of the sections
below; what it leaves out keeps the defaults here. Overrides use dotted keys and YAML values
(`rollout.stop=["</sql>"]`, `algo.dual_clip=null`). Unknown keys and values of the wrong type
are `UsageError`s that name the closest key or the expected type, so a typo never trains a
model with a silently ignored setting.

Over ~400 lines, for a reason: one job, the configuration: every setting of a run, its
default and why, in the dataclasses a recipe fills, and the checks that refuse a bad value.
"""

from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from skyhub.errors import UsageError

RECIPES_DIR = Path(__file__).parent / "recipes"


@dataclass
class ModelConfig:
    """The policy: a Hugging Face id or path, or "tiny" (a small random model and a locally
    trained tokenizer: no download)."""

    name_or_path: str = "tiny"
    # The compute precision ("auto": bf16 on a GPU, float32 on a CPU). The weights and the
    # optimiser state are float32 whatever it says (bf16 masters round small updates away).
    dtype: str = "auto"
    gradient_checkpointing: bool = False
    tiny_hidden: int = 128  # the "tiny" model's width and depth
    tiny_layers: int = 2
    # Strings the "tiny" tokenizer holds as single tokens and the untrained tiny model prefers
    # (~90% of its probability together): a harness's whole replies, so that a random model
    # emits some at all (the terminal-relay-terminus recipe's terminus replies)
    tiny_words: list[str] = field(default_factory=list)
    # the tiny tokenizer's trained vocabulary (at most); it is trained on the env's text and
    # on the harness's prompts (`rollout.harness`)
    tiny_vocab: int = 320  # = trainer.tiny.VOCAB_SIZE


@dataclass
class EnvConfig:
    """Which skyhub env to train on (`skyhub.make_vec(id, num_envs, **kwargs)`), and to
    evaluate on."""

    id: str = "toy-arith"
    kwargs: dict[str, Any] = field(default_factory=dict)
    num_envs: int = 8
    eval_id: str | None = None
    eval_kwargs: dict[str, Any] = field(default_factory=dict)
    # Train only on tasks whose prompt (system + first observation, chat-templated with the
    # generation prompt) is at most this many tokens: SkyRL's trainer.max_prompt_length
    # filter of its dataset. null: every task. Costs one env reset per task at start.
    max_prompt_tokens: int | None = None


@dataclass
class RolloutConfig:
    """How episodes are played: a recipe's `rollout:` section, and what `Rollout` reads (the
    one definition: `skyhub.trainer.rollout.RolloutConfig` is this class). `train` passes
    `Rollout` a copy whose empty `stop` is filled with the env's stop strings."""

    engine: str = "hf"  # "hf" or "vllm"
    samples_per_prompt: int = 5
    temperature: float = 1.0
    top_p: float = 1.0
    # The turn budget is the env's own `max_turns` (it ends its episodes; the loss normaliser
    # takes its length from it). This is only a safety limit for envs without one: the rollout
    # cuts an episode after max(max_turns_cap, the env's max_turns) turns, and warns when a
    # recipe sets it below the env's budget. null: no limit beyond the env's (and
    # max_input_tokens).
    max_turns_cap: int | None = None
    max_tokens_per_turn: int = 256
    max_input_tokens: int = 4096
    stop: list[str] = field(default_factory=list)  # empty: the env's stop_strings
    # Where observations go: "user-turns" (each one a new user turn) or "assistant-message"
    # (appended to the agent's own message: SkyRL-SQL's use_conversation_multi_turn=false)
    chat_layout: str = "user-turns"
    # The model's own tool-call format (skyhub.trainer.tool_layout): null plays the env's text
    # protocol; a parser name ("hermes": Qwen2.5/Qwen3's <tool_call> JSON, or another of
    # skyhub.tool_parsers.PARSERS; "auto": read off the chat template) renders the prompt
    # with the env's tools, parses the sampled text into tool calls and renders the results
    # as the template's tool messages, the agent's ids kept as sampled.
    tool_parser: str | None = None
    engine_kwargs: dict[str, Any] = field(default_factory=dict)  # e.g. vLLM's engine args
    # Episodes playing at once, each scheduled on its own (generate, then env step): null
    # for every episode of a step (train_batch_size x samples_per_prompt). Envs are leased
    # per episode from the VectorEnv, so this may exceed env.num_envs.
    max_in_flight: int | None = None
    # The share of each rollout GPU's memory vLLM may take: null lets the layout choose
    # (see `skyhub.trainer.placement`: less when the engines share the learner's GPUs).
    gpu_memory_utilization: float | None = None
    # The agent loop (skyhub.harness): null plays episodes with the rollout's own loop above;
    # a harness name ("builtin", "terminus", "mini-swe-agent", "command:...") plays each
    # episode with that harness against a gateway in front of the engine
    # (skyhub.trainer.harness_rollout), the tokens taken from what the gateway recorded.
    harness: str | None = None
    harness_kwargs: dict[str, Any] = field(default_factory=dict)  # the harness's constructor
    # Step-wise training (skyhub.trainer.stepwise): each segment of a harness episode (a
    # summary or a sub-agent starts a new one) is its own sample, carrying the episode's
    # advantage. false: an episode trains on its last segment only.
    stepwise: bool = False
    # Tree rollouts (skyhub.trainer.tree_rollout): null plays samples_per_prompt independent
    # episodes per prompt; a turn T plays samples_per_prompt root episodes to turn T, forks
    # each (env.fork) into branch_n children that play on to their ends, and trains the
    # roots' shared prefix once and each child's continuation against its siblings.
    branch_at: int | None = None
    branch_n: int = 2
    # fork again after each of the next branch_depth-1 turns (every child that is still
    # running forks into branch_n): branch_n ** branch_depth leaves per root
    branch_depth: int = 1


#: the advantage estimators whose statistics are per episode (group-wise on the reward): the
#: ones step-wise samples and turn-level credit build on
EPISODE_ESTIMATORS = ("grpo", "dr_grpo", "rloo")


@dataclass
class AlgoConfig:
    advantage: str = "grpo"  # grpo, dr_grpo, rloo, reinforce++, gae
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float | None = None
    aggregation: str = "token-mean"
    kl_coef: float = 0.0
    kl_estimator: str = "k3"
    kl_in_reward: bool = False
    # reinforce++ only: subtract each prompt's mean reward before whitening over the batch
    # (OpenRLHF's reinforce_baseline)
    reinforce_baseline: bool = False
    # Truncated importance sampling against the engine's logprobs (null: off). Applied only
    # where the engine's weights can differ from the learner's (vLLM, or an asynchronous
    # loop): the hf engine in a synchronous loop samples with the learner's own weights, so
    # its logprobs differ from the learner's only by float rounding, and a weight made of
    # that rounding would make the step depend on how requests were batched.
    tis_cap: float | None = 2.0
    # Turn-level credit for harness episodes (skyhub.trainer.turn_credit): each sampled token
    # trains on its episode's advantage plus turn_weight x its request's own (the discounted
    # return, by turn_gamma, of the env rewards that followed it, standardised in the group).
    # 0: off, every token of an episode carries the episode's advantage.
    turn_weight: float = 0.0
    turn_gamma: float = 1.0
    gamma: float = 1.0  # gae only
    lam: float = 0.95  # gae only


@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.0
    grad_clip: float = 1.0
    train_batch_size: int = 256  # prompts per step (x rollout.samples_per_prompt episodes)
    mini_batch_size: int = 256  # prompts per optimizer update
    micro_batch_tokens: int = 8192  # packed tokens per forward/backward
    epochs: int = 1  # passes over each step's batch
    warmup_steps: int = 0
    critic_lr: float = 1e-5  # gae only
    pack: bool = True  # pack episodes into rows (False: pad each micro-batch)


@dataclass
class LoopConfig:
    mode: str = "sync"  # "sync" or "async"
    max_staleness: int = 1  # policy versions a sample may lag behind, in async mode
    total_epochs: int = 1  # passes over the env's tasks
    max_steps: int | None = None
    # Steps per epoch: tasks // train_batch_size, each epoch's remainder left out (a torch
    # DataLoader's drop_last, as SkyRL runs); false: ceil(total_epochs x tasks / batch), a
    # batch running on into the next epoch.
    drop_last: bool = False
    eval_every: int = 5
    eval_before_train: bool = False  # also evaluate the starting policy (step 0; not on --resume)
    # Eval tasks played per batch (each batch finishes before the next starts: SkyRL's
    # eval_batch_size); null: all of them at once (rollout.max_in_flight still caps them).
    eval_batch_size: int | None = None
    # Tasks of the eval env per evaluation (greedy, one episode each): null for all of them,
    # else a sample of this many, seeded by `seed` and spread over the tasks' databases
    # (meta db_id) when they have one; the same tasks at every evaluation; 0: no evaluation.
    eval_tasks: int | None = 64
    save_every: int = 50  # a full checkpoint (resumable) every N steps (0: none), and at the end
    hf_save_every: int | None = None  # also the model alone, HF format, in out/hf/step_N
    seed: int = 0
    # torch.use_deterministic_algorithms on a GPU (cuBLAS workspace config, no
    # nondeterministic kernels; slower: see benchmarks/trainer_gpu.py). A CPU run is
    # bitwise reproducible without it (same seed and config -> same weights).
    deterministic: bool = False
    torch_threads: int | None = None  # CPU threads for torch ops (None: torch's default)
    out: str = "runs/default"
    resume: bool = False  # continue from the newest checkpoint in `out`
    overwrite: bool = False  # `out` holds another run: delete what it wrote, then start
    # Write each step's training episodes to `out/episodes/step-N.jsonl`, in `skyhub eval`'s
    # episodes.jsonl schema (`skyhub view` shows them, `skyhub replay` plays them again).
    save_episodes: bool = False
    tensorboard: bool = True  # when the tensorboard package is installed
    wandb_project: str | None = None  # log to Weights & Biases too (needs `wandb`)


@dataclass
class DistConfig:
    """Where the learner runs. `learner_ranks` is the learner's world size: that many
    processes, one per GPU (NCCL) on a GPU machine, gloo processes on a CPU, each holding a
    1/N shard of the float32 weights, gradients and optimiser state (FSDP2); `skyhub train`
    starts them itself. Rank 0 also runs the envs, the rollout engine and the logging. More
    than one machine: the same command on each, with `nnodes`, this machine's `node_rank` and
    node 0's `master_addr`/`master_port` (`learner_ranks` counts every node's ranks)."""

    learner_ranks: int = 1
    nnodes: int = 1
    node_rank: int = 0
    master_addr: str = "127.0.0.1"
    master_port: int = 29500
    timeout_s: int = 7200  # how long ranks wait in a collective (e.g. for rank 0's rollout)
    # Rollout engines (vLLM) on the node: `rollout_engines` engines of `rollout_tp` GPUs each.
    # "colocated": they share the learner's GPUs and sleep while it trains (vLLM's sleep
    # mode, level 1); "split": the learner's ranks take the first GPUs, the engines the next.
    rollout_layout: str = "colocated"
    rollout_engines: int = 1
    rollout_tp: int = 1


@dataclass
class TrainConfig:
    recipe: str = ""
    notes: str = ""  # hardware and provenance, shown by --print-config
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    loop: LoopConfig = field(default_factory=LoopConfig)
    dist: DistConfig = field(default_factory=DistConfig)


CHOICES = {"rollout.engine": ("hf", "vllm"),
           "rollout.chat_layout": ("user-turns", "assistant-message"),
           "algo.advantage": ("grpo", "dr_grpo", "rloo", "reinforce++", "gae"),
           "algo.aggregation": ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum",
                                "seq-mean-token-sum-norm"),
           "algo.kl_estimator": ("k1", "k2", "k3"), "loop.mode": ("sync", "async"),
           "model.dtype": ("auto", "bfloat16", "float16", "float32"),
           "dist.rollout_layout": ("colocated", "split")}


# ------------------------------------------------------------------------------ loading
def recipes() -> list[str]:
    """The bundled recipe names."""
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def load_config(recipe: str | Path | None = None, overrides: list[str] | None = None, *,
                env_id: str | None = None, env_kwargs: dict[str, Any] | None = None
                ) -> TrainConfig:
    """Defaults, then the recipe (a bundled name or a YAML path), then `env_id` in place of
    the recipe's env (`use_env`: `skyhub train --env ID`), then `key=value` overrides."""
    import yaml

    cfg = TrainConfig()
    if recipe is not None:
        path = Path(recipe)
        if not path.suffix:
            path = RECIPES_DIR / f"{recipe}.yaml"
        if not path.is_file():
            raise UsageError(f"no recipe {str(recipe)!r}: bundled ones are {recipes()}; or "
                             "pass the path of a YAML file")
        try:
            doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except yaml.YAMLError as e:
            raise UsageError(f"{path}: not valid YAML ({e})") from None
        if not isinstance(doc, dict):
            raise UsageError(f"{path}: a recipe is a mapping of sections, got "
                             f"{type(doc).__name__}")
        _merge(cfg, doc, str(path))
        cfg.recipe = cfg.recipe or path.stem
    if env_id is not None:
        use_env(cfg, env_id, env_kwargs, overrides)
    for item in overrides or []:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"override {item!r}: write key=value, e.g. optim.lr=1e-6")
        try:
            value = yaml.safe_load(raw) if raw.strip() else ""
        except yaml.YAMLError:
            value = raw
        _set(cfg, key.strip(), value, "override")
    _check_choices(cfg)
    return cfg


def _merge(cfg: Any, doc: dict[str, Any], where: str, prefix: str = "") -> None:
    for key, value in doc.items():
        full = f"{prefix}{key}"
        target = getattr(cfg, key, None) if isinstance(key, str) else None
        if dataclasses.is_dataclass(target) and isinstance(value, dict):
            _merge(target, value, where, full + ".")
        else:
            _set(cfg, key, value, where, prefix)


def _set(root: Any, dotted: str, value: Any, where: str, prefix: str = "") -> None:
    """Set `dotted` (e.g. "optim.lr") on `root`, checking the key and coercing the type."""
    obj, parts = root, dotted.split(".")
    for i, name in enumerate(parts):
        names = [f.name for f in dataclasses.fields(obj)]
        full = prefix + ".".join(parts[:i + 1])
        if full == "rollout.max_turns":
            raise UsageError(f"{where}: the turn budget is the env's own max_turns, not the "
                             "rollout's: set env.kwargs.max_turns=N (with --env, max_turns=N); "
                             "rollout.max_turns_cap is only a safety limit for envs without a "
                             "budget")
        if name not in names:
            near = difflib.get_close_matches(name, names, n=1)
            raise UsageError(f"{where}: unknown config key {full!r}" + (
                f"; did you mean {prefix + '.'.join([*parts[:i], near[0]])!r}?" if near else
                f"; keys here: {', '.join(names)}"))
        if i == len(parts) - 1:
            hint = typing.get_type_hints(type(obj))[name]
            setattr(obj, name, _coerce(value, hint, full, where))
            return
        obj = getattr(obj, name)
        if isinstance(obj, dict):  # e.g. env.kwargs.n_words=3: a key inside the dict
            _set_in_dict(obj, parts[i + 1:], value)
            return
        if not dataclasses.is_dataclass(obj):
            raise UsageError(f"{where}: {full!r} is a value, not a section")


def _set_in_dict(d: dict[str, Any], keys: list[str], value: Any) -> None:
    """`keys` = ["a", "b"]: d["a"]["b"] = value (inner dicts made as needed). Dict values
    are free-form (an env's kwargs), so their keys are checked where they are used."""
    for k in keys[:-1]:
        if not isinstance(d.get(k), dict):
            d[k] = {}
        d = d[k]
    d[keys[-1]] = value


def use_env(cfg: TrainConfig, env_id: str, kwargs: dict[str, Any] | None = None,
            overrides: list[str] | None = None) -> TrainConfig:
    """`skyhub train --env ID k=v ...`: train on `env_id` with `kwargs` instead of the
    recipe's env (whose kwargs, and eval kwargs, belong to the recipe's env, so they are
    cleared), and evaluate on that same env with its kwargs unless `overrides` set
    `env.eval_id` (another env) or `env.eval_kwargs.*` (the same env, other kwargs)."""
    cfg.env.id, cfg.env.kwargs = env_id, dict(kwargs or {})
    said = {o.partition("=")[0].strip() for o in overrides or []}
    cfg.env.eval_kwargs = {}  # the recipe's were for the recipe's eval env
    if "env.eval_id" not in said:
        # null: the training env with its kwargs; named again when eval kwargs are given
        cfg.env.eval_id = env_id if any(k.startswith("env.eval_kwargs") for k in said) else None
    return cfg


def _coerce(value: Any, hint: Any, key: str, where: str) -> Any:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        inner = [a for a in args if a is not type(None)]
        return _coerce(value, inner[0], key, where)
    bad = UsageError(f"{where}: {key} must be {getattr(hint, '__name__', hint)}, "
                     f"got {value!r}")
    if dataclasses.is_dataclass(hint):
        raise UsageError(f"{where}: {key} is a section; set its keys ({key}.NAME=...)")
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise bad
        try:
            return float(value)  # YAML reads 1e-6 (no dot) as a string
        except ValueError:
            raise bad from None
    if hint is str:
        if isinstance(value, dict | list):
            raise bad
        return str(value)
    if origin is list:
        if not isinstance(value, list):
            raise bad
        return [_coerce(v, args[0], key, where) for v in value] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise bad
        return dict(value)
    return value


def _check_choices(cfg: TrainConfig) -> None:
    for dotted, allowed in CHOICES.items():
        section, name = dotted.split(".")
        value = getattr(getattr(cfg, section), name)
        if value not in allowed:
            raise UsageError(f"{dotted} must be one of {', '.join(allowed)}, not {value!r}")
    if cfg.algo.dual_clip is not None and cfg.algo.dual_clip <= 1:
        raise UsageError(f"algo.dual_clip must be > 1 (or null), not {cfg.algo.dual_clip}")
    if cfg.loop.eval_tasks is not None and cfg.loop.eval_tasks < 0:
        raise UsageError(f"loop.eval_tasks must be >= 0 (0: no evaluation) or null (every "
                         f"task of the eval env), not {cfg.loop.eval_tasks}")
    d = cfg.dist
    if d.learner_ranks < 1 or d.nnodes < 1 or d.learner_ranks % d.nnodes:
        raise UsageError(f"dist.learner_ranks ({d.learner_ranks}) must be a positive multiple "
                         f"of dist.nnodes ({d.nnodes}): the same number of ranks on every node")
    if not 0 <= d.node_rank < d.nnodes:
        raise UsageError(f"dist.node_rank must be in 0..{d.nnodes - 1}, not {d.node_rank}")
    if d.learner_ranks > 1 and cfg.algo.advantage == "gae":
        raise UsageError("algo.advantage=gae (a critic) is not sharded yet: use "
                         "dist.learner_ranks=1, or a critic-free estimator (grpo, rloo, "
                         "dr_grpo, reinforce++)")
    for key in ("env.max_prompt_tokens", "loop.eval_batch_size", "loop.hf_save_every",
                "rollout.max_turns_cap"):
        section, name = key.split(".")
        value = getattr(getattr(cfg, section), name)
        if value is not None and value < 1:
            raise UsageError(f"{key} must be >= 1 or null (off), not {value}")
    a = cfg.algo
    if a.turn_weight < 0 or not 0.0 <= a.turn_gamma <= 1.0:
        raise UsageError(f"algo.turn_weight must be >= 0 and algo.turn_gamma in [0, 1], not "
                         f"{a.turn_weight} and {a.turn_gamma}")
    if a.turn_weight and cfg.rollout.harness is None:
        raise UsageError("algo.turn_weight > 0 credits each request of a harness episode with "
                         "the env rewards that followed it: set rollout.harness (e.g. "
                         "builtin) too")
    if a.turn_weight and a.advantage not in EPISODE_ESTIMATORS:
        raise UsageError(f"algo.turn_weight > 0 adds to a per-episode advantage (algo."
                         f"advantage one of {', '.join(EPISODE_ESTIMATORS)}), not "
                         f"{a.advantage!r}")
    if cfg.optim.train_batch_size % cfg.optim.mini_batch_size:
        raise UsageError(f"optim.train_batch_size ({cfg.optim.train_batch_size}) must be a "
                         f"multiple of optim.mini_batch_size ({cfg.optim.mini_batch_size})")


def to_dict(cfg: TrainConfig) -> dict[str, Any]:
    return dataclasses.asdict(cfg)


def to_yaml(cfg: TrainConfig) -> str:
    """The resolved config as YAML; `load_config(path_of_that_yaml)` gives it back."""
    import yaml

    return yaml.safe_dump(to_dict(cfg), sort_keys=False, default_flow_style=False)


__all__ = ["AlgoConfig", "DistConfig", "EnvConfig", "LoopConfig", "ModelConfig", "OptimConfig",
           "RolloutConfig", "TrainConfig", "load_config", "recipes", "to_dict", "to_yaml",
           "use_env"]
