"""A skyhub env as the rollout and reward side of TRL's `GRPOTrainer`, multi-turn.

    from trl import GRPOConfig, GRPOTrainer
    from skyhub.adapters.trl import SkyhubRollout, make_dataset, skyhub_reward

    rollout = SkyhubRollout("toy-recall", env_kwargs={"hops": 2})
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=GRPOConfig(...),
                          train_dataset=make_dataset("toy-recall", 64, env_kwargs={"hops": 2}),
                          reward_funcs=[skyhub_reward], rollout_func=rollout)

Which TRL mechanism, and why: TRL 1.16's `GRPOTrainer` offers three ways to bring an
environment in. Reward functions alone score one completion and cannot answer the model
between turns. `environment_factory` exposes an environment's methods as *tools* the model
calls through its chat template's tool-call format; a skyhub env's action is the model's whole
reply (`<sql>...</sql>`, a bare word), not a function call, and a model that does not emit
tool calls would never reach it. `rollout_func(prompts, trainer)` hands the whole generation
to the caller and takes back token ids, an `env_mask` and extra per-completion fields that
reach the reward functions: that is the one that fits a multi-turn text env, and
`SkyhubRollout` is such a function.

What one call does: the batch's prompts (one row per completion: TRL's sampler has already
repeated each prompt `num_generations` times, so a group is one task played several times) are
reset on a `skyhub.VectorEnv` (`skyhub.make_vec`, one env per completion, autoreset off) to
their rows' tasks and seeds. Then, turn by turn, the still running episodes' conversations
are generated from with the trainer's model and generation settings (`trainer.generation_config`:
temperature, top-p/k, ...), each reply is sent to its env, and each observation is appended as
the next user turn, tokenized once (token-in/token-out: TRL trains on exactly the sampled
tokens). `completion_ids` is the whole episode after the prompt; `env_mask` is 1 on the
model's tokens and 0 on the env's (TRL's loss ignores those); `max_completion_length` bounds
the whole episode's completion. An episode that ends closes its last turn with EOS (masked);
one cut short by that bound ends without it, which TRL counts as truncated: with
`mask_truncated_completions=True` it is masked, otherwise scored with the reward it had so far.

Contract:
- **infra errors**: an episode whose env failed (`info["infra_error"]`; the VectorEnv also
  reports an env that raised, died or hung past `step_timeout` this way) gets the reward
  `None` from `skyhub_reward`. TRL then treats the completion as unscorable: it is left out
  of its group's mean and std and its advantage is 0, so it moves the policy neither way
  (instead of being scored 0, which would push the policy away from what it did). The share
  of such episodes is logged as `skyhub/infra_error_rate` next to TRL's `reward`.
- **system prompt**: the env's `system_prompt` is the first message of every conversation.
- **stop strings**: generation stops at the env's `stop_strings` (and at EOS), and the reply
  the env receives keeps the stop string.

The default generation runs the trainer's model with transformers' `generate` (what TRL does
without vLLM). With `use_vllm`, or to generate elsewhere, pass `generate=`: a function from
token-id prompts and a token budget to the sampled token ids.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Sequence
from typing import Any

from skyhub.errors import MissingDependency, UsageError

__all__ = ["SkyhubRollout", "make_dataset", "skyhub_reward"]

#: The TRL release whose `rollout_func` contract this module follows (see the docstring).
TRL_VERSION = "1.16.0"

#: The key of a prompt's user message that carries the skyhub task to reset to.
TASK_KEY = "skyhub_task"

Generate = Callable[[list[list[int]], int], list[list[int]]]


def _require_trl() -> None:
    try:
        import trl  # noqa: F401
    except ImportError as e:
        raise MissingDependency(
            f"skyhub.adapters.trl needs trl=={TRL_VERSION} ({e}): pip install 'skyhub[trl]'"
        ) from e


def make_dataset(env_id: str, n: int = 64, *, seed: int = 0,
                 env_kwargs: dict[str, Any] | None = None) -> Any:
    """A `datasets.Dataset` of `n` conversational prompts for `GRPOTrainer`: row `i` is the
    task that `reset(seed=seed + i)` picks, as the env's system prompt and first observation.
    The user message also carries the task's id and seed under `"skyhub_task"`, which is how
    `SkyhubRollout` (which sees only the prompts) resets each env to its row's task."""
    _require_trl()
    from datasets import Dataset

    import skyhub

    if n < 1:
        raise UsageError(f"make_dataset needs n >= 1 rows, got {n}")
    rows = []
    with skyhub.make(env_id, **(env_kwargs or {})) as env:
        for i in range(n):
            obs, info = env.reset(seed=seed + i)
            prompt = [{"role": "system", "content": env.system_prompt}] if env.system_prompt \
                else []
            prompt.append({"role": "user", "content": obs,
                           TASK_KEY: {"task_id": str(info["task_id"]), "seed": seed + i}})
            rows.append({"prompt": prompt})
    return Dataset.from_list(rows)


def skyhub_reward(completions: list[Any], skyhub_reward: list[float],
                  skyhub_infra_error: list[bool], log_metric: Callable[[str, float], None]
                  | None = None, **kwargs: Any) -> list[float | None]:
    """TRL reward function: each episode's skyhub reward (the sum of its step rewards), or
    `None` for an infra-error episode, which TRL leaves out of the group baseline and gives
    no advantage. Logs `skyhub/infra_error_rate` through TRL's `log_metric`."""
    if log_metric is not None and skyhub_infra_error:
        log_metric("skyhub/infra_error_rate",
                   sum(map(bool, skyhub_infra_error)) / len(skyhub_infra_error))
    return [None if bad else float(r)
            for r, bad in zip(skyhub_reward, skyhub_infra_error, strict=True)]


class SkyhubRollout:
    """`GRPOTrainer(rollout_func=SkyhubRollout(env_id, ...))`: plays each prompt's task on a
    skyhub VectorEnv with the trainer's model, multi-turn (see the module docstring).

    Args:
        env_id, env_kwargs: the env, as `skyhub.make_vec` takes them; the same as the
            dataset's (`make_dataset`).
        max_turn_tokens: most tokens per model turn (default: the trainer's
            `max_completion_length`, which also bounds the whole episode).
        executor, step_timeout: as in `skyhub.VectorEnv`.
        generate: `generate(prompts_ids, max_new_tokens) -> completions_ids` to sample
            elsewhere (vLLM...); it should stop at EOS. Default: the trainer's model.
    """

    def __init__(self, env_id: str, *, env_kwargs: dict[str, Any] | None = None,
                 max_turn_tokens: int | None = None, executor: str = "threads",
                 step_timeout: float | None = None, generate: Generate | None = None) -> None:
        self.env_id = env_id
        self.env_kwargs = dict(env_kwargs or {})
        self.max_turn_tokens = max_turn_tokens
        self.executor = executor
        self.step_timeout = step_timeout
        self.generate = generate
        self._venv: Any = None
        self.__name__ = "skyhub_rollout"  # TRL names functions in its logs and warnings

    # ---------------------------------------------------------------------------- lifecycle
    def _vector_env(self, n: int) -> Any:
        if self._venv is None or self._venv.num_envs != n:
            import skyhub

            self.close()
            self._venv = skyhub.make_vec(self.env_id, n, executor=self.executor,
                                         autoreset_mode="disabled",
                                         step_timeout=self.step_timeout, **self.env_kwargs)
        return self._venv

    def close(self) -> None:
        """Close the envs (also done when the rollout is garbage-collected)."""
        if self._venv is not None:
            self._venv.close()
            self._venv = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit nobody is left to tell
            self.close()

    # ------------------------------------------------------------------------------ rollout
    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        tasks = [_task_of(p) for p in prompts]
        tok = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
        n = len(prompts)
        venv = self._vector_env(n)
        budget = int(trainer.max_completion_length)
        per_turn = min(self.max_turn_tokens or budget, budget)
        stops = tuple(venv.get_attr("stop_strings", env_ids=[0])[0] or ())
        fmt = _Turns(tok)

        obs, infos = venv.reset(seed=[t["seed"] for t in tasks],
                                options=[{"task_id": t["task_id"]} for t in tasks])
        systems = venv.get_attr("system_prompt")
        prompt_ids = [fmt.prompt_ids(systems[i], obs[i]) for i in range(n)]
        completion: list[list[int]] = [[] for _ in range(n)]
        env_mask: list[list[int]] = [[] for _ in range(n)]
        reward = [0.0] * n
        infra = [bool(info.get("infra_error")) for info in infos]
        outcome = [str(info.get("outcome", "running")) for info in infos]
        turns = [0] * n
        active = [i for i in range(n) if not infra[i]]
        generate = self.generate or (lambda ids, k: _hf_generate(trainer, ids, k, stops))

        while active:
            room = {i: budget - len(completion[i]) for i in active}
            active = [i for i in active if room[i] > 0]
            if not active:
                break
            max_new = min(per_turn, max(room.values()))
            sampled = generate([prompt_ids[i] + completion[i] for i in active], max_new)
            actions = []
            for i, ids in zip(active, sampled, strict=True):
                ids = fmt.cut(list(ids)[:room[i]], stops)
                completion[i] += ids
                env_mask[i] += [1] * len(ids)
                turns[i] += 1
                actions.append(fmt.decode(ids))
            venv.send(actions, active)
            results: dict[int, tuple[str, float, bool, bool, dict[str, Any]]] = {}
            while len(results) < len(active):
                ids_, o, r, te, tr, inf = venv.recv(min_ready=len(active) - len(results))
                for k, i in enumerate(ids_):
                    results[int(i)] = (o[k], float(r[k]), bool(te[k]), bool(tr[k]), inf[k])
            still = []
            for i in active:
                o, r, te, tr, info = results[i]
                reward[i] += r
                outcome[i] = str(info.get("outcome", outcome[i]))
                if info.get("infra_error"):
                    infra[i] = True
                if te or tr or infra[i]:
                    continue
                obs_ids = fmt.observation_ids(o, ended_turn=fmt.ends_turn(completion[i]))
                obs_ids = obs_ids[:max(0, budget - len(completion[i]))]
                completion[i] += obs_ids
                env_mask[i] += [0] * len(obs_ids)
                still.append(i)
            active = still

        for i in range(n):  # close the last assistant turn, as the chat template would
            if completion[i] and not fmt.ends_turn(completion[i]) and fmt.eos_id is not None \
                    and len(completion[i]) < budget:
                completion[i].append(fmt.eos_id)
                env_mask[i].append(0)
            if not completion[i]:  # an episode that failed at reset: one masked EOS
                completion[i] = [fmt.eos_id if fmt.eos_id is not None else 0]
                env_mask[i] = [0]
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": None,
                "env_mask": env_mask, "skyhub_reward": reward, "skyhub_infra_error": infra,
                "skyhub_outcome": outcome, "skyhub_turns": turns}


def _task_of(prompt: Any) -> dict[str, Any]:
    """The task a prompt row stands for (its user message's `skyhub_task`)."""
    if isinstance(prompt, list):
        for message in prompt:
            task = message.get(TASK_KEY) if isinstance(message, dict) else None
            if task:
                return task
    raise UsageError("SkyhubRollout got a prompt with no skyhub task in it: build the "
                     "trainer's dataset with skyhub.adapters.trl.make_dataset(env_id, n), "
                     "whose user messages carry the task id and seed to reset to")


def _hf_generate(trainer: Any, prompts: list[list[int]], max_new_tokens: int,
                 stops: Sequence[str]) -> list[list[int]]:
    """Sample with the trainer's model and generation config, as TRL does without vLLM."""
    import torch
    from trl.models import unwrap_model_for_generation

    if getattr(trainer, "use_vllm", False):
        raise UsageError("SkyhubRollout generates with the trainer's transformers model; with "
                         "use_vllm=True pass generate=... (token-id prompts -> sampled ids)")
    tok = getattr(trainer.processing_class, "tokenizer", trainer.processing_class)
    pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
    width = max(len(p) for p in prompts)
    device = trainer.accelerator.device
    input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=device)
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts],
                             device=device)
    config = copy.deepcopy(trainer.generation_config)
    config.max_new_tokens = max_new_tokens
    extra: dict[str, Any] = {}
    if stops:
        config.stop_strings = list(stops)
        extra["tokenizer"] = tok
    with (unwrap_model_for_generation(trainer.model_wrapped, trainer.accelerator,
                                      generation_kwargs=trainer.generation_kwargs) as model,
          torch.no_grad()):
        out = model.generate(input_ids=input_ids, attention_mask=attention,
                             generation_config=config, **extra)
    return [row[width:].tolist() for row in out.cpu()]


class _Turns:
    """Token ids of a conversation's pieces for one tokenizer and its chat template: the
    prompt, and an observation as the tokens between one assistant turn and the next.

    The text the template puts around an observation is learned once from a probe
    conversation, so the observation is tokenized on its own and appended, never the whole
    conversation re-tokenized (which can merge tokens across a turn boundary)."""

    _A, _U = "\x00ASSISTANT\x00", "\x00USER\x00"

    def __init__(self, tok: Any) -> None:
        self.tok = tok
        self.eos_id: int | None = tok.eos_token_id
        probe = self._render([{"role": "user", "content": "u"},
                              {"role": "assistant", "content": self._A},
                              {"role": "user", "content": self._U}], True)
        after_agent = probe[probe.index(self._A) + len(self._A):]
        self.before, _, self.after = after_agent.partition(self._U)
        self.eos_text = tok.convert_ids_to_tokens(self.eos_id) if self.eos_id is not None \
            else None

    def _render(self, messages: list[dict[str, str]], generation_prompt: bool) -> str:
        return self.tok.apply_chat_template(messages, tokenize=False,
                                            add_generation_prompt=generation_prompt)

    def encode(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False)

    def decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=True)

    def prompt_ids(self, system: str | None, observation: str) -> list[int]:
        messages = ([{"role": "system", "content": system}] if system else []) + [
            {"role": "user", "content": observation}]
        return self.encode(self._render(messages, True))

    def ends_turn(self, ids: list[int]) -> bool:
        return bool(ids) and ids[-1] == self.eos_id

    def observation_ids(self, observation: str, *, ended_turn: bool) -> list[int]:
        before = self.before
        if ended_turn and self.eos_text and before.startswith(self.eos_text):
            before = before[len(self.eos_text):]  # the model already sampled the turn's end
        return self.encode(before + observation + self.after)

    def cut(self, ids: list[int], stops: Sequence[str]) -> list[int]:
        """`ids` up to and including the first EOS or the token that completes a stop string
        (batched generation pads a finished row; what follows is not the model's)."""
        for j, t in enumerate(ids):
            if t == self.eos_id:
                return ids[:j + 1]
            if stops and any(s in self.tok.decode(ids[:j + 1]) for s in stops):
                return ids[:j + 1]
        return ids
