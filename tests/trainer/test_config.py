"""Training configs: recipes, overrides, and errors that name the fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from skyhub.errors import UsageError
from skyhub.trainer.config import TrainConfig, load_config, recipes, to_yaml


def test_defaults_without_a_recipe() -> None:
    cfg = load_config()
    assert cfg == TrainConfig() and cfg.algo.advantage == "grpo"


def test_sql_recipe_has_skyrl_sqls_published_hyperparameters() -> None:
    assert "sql-grpo-653" in recipes()
    cfg = load_config("sql-grpo-653")
    assert cfg.model.name_or_path == "Qwen/Qwen2.5-Coder-7B-Instruct"
    assert (cfg.algo.advantage, cfg.rollout.samples_per_prompt, cfg.optim.lr) == (
        "grpo", 5, 1e-6)
    assert (cfg.optim.train_batch_size, cfg.optim.mini_batch_size, cfg.optim.grad_clip) == (
        256, 256, 0.5)
    assert (cfg.env.kwargs["max_turns"], cfg.rollout.temperature, cfg.rollout.top_p) == (
        6, 0.6, 0.95)
    assert cfg.rollout.stop == ["</sql>", "</solution>"] and cfg.algo.kl_coef == 0.0
    assert (cfg.rollout.max_tokens_per_turn, cfg.rollout.max_input_tokens) == (3000, 29000)
    assert (cfg.loop.total_epochs, cfg.loop.eval_every, cfg.env.eval_id) == (30, 5, "sql-spider")
    assert "8 GPUs" in cfg.notes and cfg.recipe == "sql-grpo-653"


def test_overrides_are_typed_yaml_values() -> None:
    cfg = load_config("sql-grpo-653", ["optim.lr=2e-6", "rollout.stop=['</answer>']",
                                       "algo.dual_clip=3", "algo.tis_cap=null",
                                       "env.kwargs={engine: duckdb}", "loop.max_steps=7"])
    assert cfg.optim.lr == 2e-6 and isinstance(cfg.optim.lr, float)
    assert cfg.rollout.stop == ["</answer>"] and cfg.algo.dual_clip == 3.0
    assert cfg.algo.tis_cap is None and cfg.env.kwargs == {"engine": "duckdb"}
    assert cfg.loop.max_steps == 7


@pytest.mark.parametrize(("override", "message"), [
    ("optim.lrr=1", "did you mean 'optim.lr'"),
    ("optimizer.lr=1", "did you mean 'optim'"),
    ("optim.train_batch_size=many", "must be int"),
    ("rollout.stop=</sql>", "must be list"),
    ("algo.advantage=ppo2", "must be one of"),
    ("algo.dual_clip=0.5", "must be > 1"),
    ("optim.mini_batch_size=100", "multiple of"),
    ("optim=3", "is a section"),
    ("no-equals-sign", "write key=value"),
])
def test_bad_overrides_say_how_to_fix(override: str, message: str) -> None:
    with pytest.raises(UsageError, match=message):
        load_config("sql-grpo-653", [override])


def test_missing_recipe_lists_the_bundled_ones(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="sql-grpo-653"):
        load_config("no-such-recipe")
    bad = tmp_path / "bad.yaml"
    bad.write_text("optim: {lr: 1e-5, warmpu_steps: 3}\n")
    with pytest.raises(UsageError, match="warmup_steps"):
        load_config(bad)


def test_printed_config_loads_back_to_the_same_config(tmp_path: Path) -> None:
    cfg = load_config("sql-grpo-653", ["optim.lr=5e-7"])
    path = tmp_path / "resolved.yaml"
    path.write_text(to_yaml(cfg))
    assert load_config(path) == cfg


def test_dotted_overrides_reach_into_dict_values() -> None:
    cfg = load_config("tiny-cpu", ["env.kwargs.n_words=3", "rollout.engine_kwargs.a.b=0.5"])
    assert cfg.env.kwargs["n_words"] == 3 and cfg.env.kwargs["n_tasks"] == 2000
    assert cfg.rollout.engine_kwargs == {"a": {"b": 0.5}}


def test_another_env_clears_the_recipes_env_settings_and_evaluates_on_itself() -> None:
    cfg = load_config("sql-grpo-653", ["env.kwargs.hops=2"], env_id="toy-recall",
                      env_kwargs={"n_words": 4})
    assert (cfg.env.id, cfg.env.kwargs) == ("toy-recall", {"n_words": 4, "hops": 2})
    assert cfg.env.eval_id is None and cfg.env.eval_kwargs == {}  # the training env itself
    other = load_config("tiny-cpu", ["env.eval_id=toy-arith"], env_id="toy-lookup")
    assert other.env.eval_id == "toy-arith"
    same = load_config("tiny-cpu", ["env.eval_kwargs.n_tasks=5"], env_id="toy-lookup")
    assert (same.env.eval_id, same.env.eval_kwargs) == ("toy-lookup", {"n_tasks": 5})


@pytest.mark.parametrize("item", ["env.max_prompt_tokens=0", "loop.eval_batch_size=0",
                                  "loop.hf_save_every=-1"])
def test_the_sql_recipes_new_keys_refuse_values_below_one(item):
    key = item.partition("=")[0]
    with pytest.raises(UsageError, match=key.replace(".", r"\.")):
        load_config("tiny-cpu", [item])
