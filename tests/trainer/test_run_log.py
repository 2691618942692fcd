"""What a training run logs: TensorBoard tags in groups, sample episodes as text, curves of
the figures people look for."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from skyhub.trainer.run_log import PANELS, RunLog, metric_tag, plot_metrics

ROW = {"step": 1, "reward_mean": 0.5, "success_rate": 0.25, "turns_mean": 2.0, "loss": 0.01,
       "kl": 0.002, "entropy": 1.3, "clip_frac": 0.1, "grad_norm": 0.9, "step_s": 2.5,
       "eval_reward_mean": 0.75, "eval_success_rate": 0.5, "response_tokens_mean": 30.0}


def test_tags_are_grouped() -> None:
    assert metric_tag("loss") == "train/loss" and metric_tag("entropy") == "train/entropy"
    assert metric_tag("reward_mean") == "rollout/reward_mean"
    assert metric_tag("success_rate") == "rollout/success_rate"
    assert metric_tag("eval_reward_mean") == "eval/reward_mean"
    assert metric_tag("step_s") == "time/step_s" and metric_tag("generate_s") == "time/generate_s"


def test_tensorboard_holds_grouped_scalars_and_episode_text(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    episodes = [{"task_id": "t1", "outcome": "success", "reward": 1.0, "turns": 1,
                 "messages": [{"role": "user", "content": "q?"},
                              {"role": "assistant", "content": "<answer>a</answer>"}]}]
    with RunLog(tmp_path, 2, live=False, tensorboard=True) as log:
        log.log(ROW)
        log.log({**ROW, "step": 2, "reward_mean": 0.6})
        log.log_episodes("eval/episodes", 2, episodes)
    acc = EventAccumulator(str(tmp_path / "tensorboard"),
                           size_guidance={"scalars": 0, "tensors": 0}).Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"rollout/reward_mean", "train/loss", "train/kl", "train/entropy",
            "eval/reward_mean", "time/step_s"} <= tags
    assert not any("/" not in t for t in tags)
    assert [e.value for e in acc.Scalars("rollout/reward_mean")] == pytest.approx([0.5, 0.6])
    text = acc.Tensors("eval/episodes/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "t1" in text and "<answer>a</answer>" in text


def test_curves_have_a_panel_per_figure_logged(tmp_path: Path) -> None:
    import matplotlib.image

    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({**ROW, "step": s}) + "\n" for s in range(1, 6)))
    png = plot_metrics(path, tmp_path / "curves.png")
    assert png is not None
    wide = matplotlib.image.imread(png)
    less = tmp_path / "less.jsonl"  # no KL, entropy or clip fraction logged: fewer panels
    less.write_text("".join(json.dumps({"step": s, "reward_mean": 0.1 * s}) + "\n"
                            for s in range(1, 6)))
    narrow = matplotlib.image.imread(plot_metrics(less, tmp_path / "less.png"))
    assert wide.shape[1] > 2 * narrow.shape[1]
    assert len(PANELS) >= 9 and any("entropy" in keys for _, keys in PANELS)


def test_the_new_statistics_land_in_their_groups():
    assert metric_tag("logp_gap_mean") == "train/logp_gap_mean"
    assert metric_tag("zero_variance_groups") == "rollout/zero_variance_groups"
    assert metric_tag("response_tokens_max") == "rollout/response_tokens_max"
    assert metric_tag("gen_tokens_per_s") == "time/gen_tokens_per_s"
