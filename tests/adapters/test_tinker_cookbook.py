"""skyhub envs as the Tinker cookbook's RL envs (tinker-cookbook, the real package): played by
the cookbook's own rollout code with a scripted policy, and trained by the cookbook's RL loop
(`tinker_cookbook.rl.train.main`) against `skyhub tinker serve` on a tiny random model."""

from __future__ import annotations

import asyncio
import json
import pickle
import re
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from skyhub.errors import InfraError
from skyhub.registry import register

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from skyhub_testenvs import FlakyEnv

SNIPPET = Path(__file__).parents[2] / "docs" / "snippets" / "adapter_tinker_cookbook.py"
TOKENIZER = "skyhub-tests/bytelevel"  # the name the cookbook's get_tokenizer knows it by


@pytest.fixture(scope="module")
def tc(need: Callable[[str, str, str], None]) -> Any:
    try:
        from tinker_cookbook.tokenizer_utils import register_tokenizer

        from skyhub.adapters import tinker_cookbook as adapter

        adapter.SkyhubEnv  # noqa: B018 - loads tinker-cookbook (MissingDependency)
    except ImportError as e:
        need("tinker-cookbook", "SKYHUB_REQUIRE_ADAPTERS",
             f"it is not installed ({e}): pip install 'skyhub[tinker-cookbook]'")
    tok = bytelevel_tokenizer()
    register_tokenizer(TOKENIZER, lambda: tok)
    return adapter


def bytelevel_tokenizer() -> Any:
    """A byte-level BPE (exact round trips, newlines included: the role_colon renderer's stop
    sequence is "\\n\\nUser:") trained here in well under a second; EOS `<|end|>`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<|end|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    text = ("User: What is the value stored under key k123?\n\nAssistant: <lookup>k123</lookup>"
            "\n\nUser: <result>quartz</result> (2 turns left)\n\nAssistant: <answer>quartz"
            "</answer>\n\nSystem: You are answering a question about a table.")
    tok.train_from_iterator([text] * 8, trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|end|>")





class ScriptedPolicy:
    """A cookbook `TokenCompleter` that solves toy-lookup from what it is shown: it reads the
    key in the question, then the value in the `<result>`. Its first turn ends at the env's
    stop string (as a sampler stopping at `</lookup>` would), its last at the renderer's."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok, self.stops, self.prompts = tokenizer, [], []

    async def __call__(self, model_input: Any, stop: Any, *, max_tokens: int | None = None) -> Any:
        from tinker_cookbook.completers import TokensWithLogprobs

        prompt = self.tok.decode(model_input.to_ints())
        self.prompts.append(prompt)
        self.stops.append(list(stop))
        if m := re.search(r"<result>(.*?)</result>[^\n]*\n\nAssistant:$", prompt):
            text = f" <answer>{m.group(1)}</answer>\n\nUser:"
        else:
            key = re.findall(r"key (k\d+)\?", prompt)[-1]
            text = f" <lookup>{key}</lookup>"
        tokens = self.tok.encode(text, add_special_tokens=False)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


class SaysOk:
    """A cookbook `TokenCompleter` that always answers "ok" (then the renderer's stop)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tok = tokenizer

    async def __call__(self, model_input: Any, stop: Any, *, max_tokens: int | None = None) -> Any:
        from tinker_cookbook.completers import TokensWithLogprobs

        tokens = self.tok.encode(" ok\n\nUser:", add_special_tokens=False)
        return TokensWithLogprobs(tokens=tokens, maybe_logprobs=[0.0] * len(tokens))


def builder(tc: Any, env_id: str, task_id: str, group_size: int = 2) -> Any:
    return tc.SkyhubEnvGroupBuilder(env_id, task_id=task_id, group_size=group_size,
                                    model_name_for_tokenizer=TOKENIZER,
                                    renderer_name="role_colon")


def test_cookbook_rollout_plays_toy_lookup_multi_turn(tc: Any) -> None:
    from tinker_cookbook.rl.rollouts import do_single_rollout
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    policy = ScriptedPolicy(get_tokenizer(TOKENIZER))
    env = asyncio.run(builder(tc, "toy-lookup", "lookup-0-4").make_envs())[0]
    traj = asyncio.run(do_single_rollout(policy, env))
    assert [t.reward for t in traj.transitions] == [0.0, 1.0]
    assert [t.episode_done for t in traj.transitions] == [False, True]
    final = traj.transitions[-1]
    assert final.metrics["skyhub/success"] == 1.0 and final.metrics["stop/completed"] == 1.0
    assert final.metrics["skyhub/reward/correct"] == 1.0 and final.metrics["skyhub/turns"] == 2
    assert final.logs == {"task_id": "lookup-0-4", "outcome": "success"}
    assert traj.stop_reason == "completed"
    # the system prompt passes through; the env's stop strings join the renderer's
    assert policy.prompts[0].startswith("System: You are answering a question about a table")
    assert policy.stops == [["\n\nUser:", "</lookup>", "</answer>"]] * 2
    # the first turn, cut at "</lookup>" without the renderer's end, still reached the env
    assert "<lookup>k" in policy.prompts[1] and "<result>" in policy.prompts[1]


def test_token_id_stops_join_the_env_stop_strings_as_text(tc: Any) -> None:
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    tok = get_tokenizer(TOKENIZER)
    renderer = SimpleNamespace(get_stop_sequences=lambda: [tok.eos_token_id], tokenizer=tok)
    assert tc.stop_condition(renderer, []) == [tok.eos_token_id]
    assert tc.stop_condition(renderer, ["</sql>"]) == ["<|end|>", "</sql>"]


def test_infra_errors_are_retried_or_stop_the_group_never_scored(tc: Any,
                                                                 tmp_env_id: str) -> None:
    from tinker_cookbook.rl.rollout_strategy import FailFast, RetryOnFailure
    from tinker_cookbook.rl.rollouts import do_group_rollout
    from tinker_cookbook.tokenizer_utils import get_tokenizer

    register(tmp_env_id, FlakyEnv)
    FlakyEnv.failed_once = False
    policy = SaysOk(get_tokenizer(TOKENIZER))
    group = asyncio.run(do_group_rollout(builder(tc, tmp_env_id, "t-once"), policy,
                                         strategy=RetryOnFailure(max_retries=2)))
    # the failed episode was replayed on a fresh env: two scored trajectories, one error
    assert group.get_total_rewards() == [1.0, 1.0]
    assert [e.error_type for e in group.rollout_errors] == ["InfraError"]
    assert "sandbox host went away" in group.rollout_errors[0].error_message
    with pytest.raises(InfraError, match="container died"):
        asyncio.run(do_group_rollout(builder(tc, tmp_env_id, "t-flag"), policy,
                                     strategy=FailFast()))


def test_dataset_deals_tasks_into_groups_that_pickle(tc: Any) -> None:
    ds_builder = tc.SkyhubDatasetBuilder(
        env_id="toy-arith", env_kwargs={"n_tasks": 10}, model_name_for_tokenizer=TOKENIZER,
        renderer_name="role_colon", groups_per_batch=3, group_size=2,
        test_env_kwargs={"n_tasks": 4})
    train, test = asyncio.run(ds_builder())
    assert len(train) == 3 and len(test) == 4  # 10 tasks fill 3 batches of 3
    seen = [b.task_id for i in range(len(train)) for b in train.get_batch(i)]
    assert len(set(seen)) == 9 and all(s.startswith("arith-0-") for s in seen)
    again = asyncio.run(ds_builder())[0]
    assert [b.task_id for b in again.get_batch(0)] == seen[:3]  # the seed fixes the order
    one = pickle.loads(pickle.dumps(train.get_batch(1)[0]))  # for the rollout executors
    envs = asyncio.run(one.make_envs())
    assert len(envs) == 2 and all(e.task_id == seen[3] for e in envs)
    assert one.logging_tags() == ["skyhub", "toy-arith"]
    with pytest.raises(IndexError):
        train.get_batch(3)


def test_group_cleanup_closes_episodes_cut_short(tc: Any) -> None:
    group = builder(tc, "toy-lookup", "lookup-0-4", group_size=2)
    envs = asyncio.run(group.make_envs())
    asyncio.run(envs[0].initial_observation())  # started, then abandoned (a timeout)
    live = envs[0].env
    assert live is not None and not live.closed
    asyncio.run(group.cleanup())
    assert live.closed and envs[0].env is None
    asyncio.run(group.cleanup())  # idempotent, as the cookbook asks


@pytest.mark.slow
def test_cookbook_rl_loop_trains_against_skyhub_tinker_serve(
        tc: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("peft")
    from skyhub.trainer.tinker import TinkerServerThread, tiny_base_model

    model = tiny_base_model(tmp_path / "base")
    with TinkerServerThread(base_model=model, state_dir=tmp_path / "state", port=0,
                            threads=1) as server:
        monkeypatch.setenv("SKYHUB_MODEL", model)
        monkeypatch.setenv("TINKER_BASE_URL", server.url)
        monkeypatch.setenv("TINKER_API_KEY", "tml-skyhub-test")
        monkeypatch.chdir(tmp_path)
        runpy.run_path(str(SNIPPET), run_name="__main__")
    log = tmp_path / "runs" / "skyhub-toy-recall"
    steps = [json.loads(line) for line in (log / "metrics.jsonl").read_text().splitlines()]
    trained = [s for s in steps if "env/all/total_episodes" in s]
    assert [s["step"] for s in trained] == [0, 1, 2]
    for s in trained:  # 2 groups of 4 episodes of toy-recall, scored by the env, trained on
        assert s["env/all/total_episodes"] == 8
        assert s["env/all/skyhub/turns"] == 1.0 and "env/all/skyhub/reward/correct" in s
        assert s["tokens/trained"] > 0
    summaries = (log / "iteration_000000" / "train_rollout_summaries.jsonl").read_text()
    assert '"task_id": "recall-0-' in summaries
    final = json.loads((log / "checkpoints.jsonl").read_text().splitlines()[-1])
    assert final["name"] == "final" and final["sampler_path"].startswith("tinker://")
