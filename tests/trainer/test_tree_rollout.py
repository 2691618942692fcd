"""Tree rollouts (rollout.branch_at / branch_n): roots forked at a turn into children that
share the root's tokens, prefix and child samples grouped so that the learner's GRPO gives
each segment its tree advantage (skyhub.trainer.tree_advantage)."""

from __future__ import annotations

import pytest
import torch

import skyhub
from skyhub.errors import UsageError
from skyhub.eval.replay import IDENTICAL, replay_record
from skyhub.trainer.config import AlgoConfig, OptimConfig
from skyhub.trainer.inference.hf import HFEngine
from skyhub.trainer.learner import Learner
from skyhub.trainer.rollout import Rollout, RolloutConfig
from skyhub.trainer.stats import episode_metrics
from skyhub.trainer.tree_advantage import Segment, tree_advantages
from skyhub.trainer.tree_rollout import TreeRollout

STOP = ("</lookup>", "</answer>")


@pytest.fixture
def tree(model, tokenizer, chat):
    """Two tasks, two roots each, forked at turn 1 into three children: the samples, and the
    rollout's VectorEnv."""
    venv = skyhub.make_vec("toy-lookup", 2, autoreset_mode="disabled", max_turns=4)
    probe = skyhub.make("toy-lookup")
    task_ids = [t.id for t in probe.tasks][:2]
    probe.close()
    rollout = TreeRollout(venv, HFEngine(model, tokenizer), chat,
                          RolloutConfig(max_tokens_per_turn=12, stop=STOP, branch_at=1,
                                        branch_n=3))
    try:
        samples = rollout.run(task_ids, group_size=2, seed=1)
        yield samples, rollout
    finally:
        rollout.close()
        venv.close()


def test_children_share_their_roots_prefix_and_play_on(tree) -> None:
    samples, rollout = tree
    prefixes = [s for s in samples if s.tree == "prefix"]
    children = [s for s in samples if s.tree == "child"]
    # random text is malformed, so no root ends at turn 1: every root forks
    assert len(prefixes) == 4 and len(children) == 12 and len(samples) == 16
    assert rollout.stats["forks"] == 4
    # the forked slots are gone again: the rollout's own envs are one per root
    assert rollout._own.num_envs == 4
    for k, root in enumerate(prefixes):
        family = samples[samples.index(root) + 1:samples.index(root) + 4]
        assert root.turns == 1 and root.agent_tokens > 0 and root.group == k // 2
        assert len({c.group for c in family}) == 1 and family[0].group >= 2
        assert root.reward == pytest.approx(sum(c.reward for c in family) / 3)
        n = len(root.token_ids)
        for c in family:
            assert c.token_ids[:n] == root.token_ids and c.task_id == root.task_id
            assert c.loss_mask[:n] == [0] * n and c.agent_tokens > 0  # prefix trained once
            assert c.turns > 1 and c.episode.actions[0] == root.episode.actions[0]
        # each child samples with its own seed: the continuations differ
        assert len({tuple(c.token_ids[n:]) for c in family}) > 1
    assert len({c.group for c in children}) == 4
    # the step's metrics count episodes (the children), not prefixes
    assert episode_metrics(samples, 0)["episodes"] == 12.0


def test_a_child_replays_from_a_fresh_reset(tree) -> None:
    """A child's record (the root's turns, then its own) is a whole episode: replayed from
    its reset seed on a fresh env, it is identical."""
    samples, _ = tree
    env = skyhub.make("toy-lookup", max_turns=4)
    try:
        for k, child in enumerate(s for s in samples if s.tree == "child"):
            record = child.to_record(k, env_id="toy-lookup", env_kwargs={"max_turns": 4},
                                     agent="policy")
            assert record["meta"]["tree"] == "child"
            result = replay_record(env, record)
            assert result.status == IDENTICAL, result.detail
    finally:
        env.close()


def test_the_learners_advantages_are_the_tree_advantages(tree, model) -> None:
    samples, _ = tree
    prefixes = [s for s in samples if s.tree == "prefix"]
    # rewards by hand (random text earns none), the prefixes' from their children
    for k, s in enumerate(s for s in samples if s.tree == "child"):
        s.reward = float((k * 7) % 5) / 4
    for root in prefixes:
        family = samples[samples.index(root) + 1:samples.index(root) + 4]
        root.reward = sum(c.reward for c in family) / 3
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=512))
    got = learner._episode_advantages(samples, 2)
    for task in (0, 1):  # each prompt's roots are one tree's siblings
        roots = [r for r in prefixes if r.group == task]
        segments = [Segment(f"r{id(r)}", None) for r in roots]
        for r in roots:
            family = samples[samples.index(r) + 1:samples.index(r) + 4]
            segments += [Segment(f"c{id(c)}", f"r{id(r)}", c.reward) for c in family]
        want = tree_advantages(segments)
        for s in [*roots, *(samples[samples.index(r) + 1:samples.index(r) + 4]
                            for r in roots)]:
            members = s if isinstance(s, list) else [s]
            for m in members:
                key = f"{'r' if m.tree == 'prefix' else 'c'}{id(m)}"
                assert float(got[id(m)]) == pytest.approx(want[key], abs=1e-5)
    assert any(abs(float(a)) > 0.1 for a in got.values())
    assert torch.isfinite(torch.stack(list(got.values()))).all()


def test_branch_settings_are_checked(model, tokenizer, chat) -> None:
    venv = skyhub.make_vec("toy-lookup", 2, autoreset_mode="disabled", max_turns=4)
    try:
        for bad in ({"branch_at": 0}, {"branch_at": 1, "branch_n": 1}):
            with pytest.raises(UsageError, match="branch"):
                TreeRollout(venv, HFEngine(model, tokenizer), chat,
                            RolloutConfig(stop=STOP, **bad))
        # the plain loop does not ignore it
        with pytest.raises(UsageError, match="make_rollout"):
            Rollout(venv, HFEngine(model, tokenizer), chat,
                    RolloutConfig(stop=STOP, branch_at=1))
        rollout = TreeRollout(venv, HFEngine(model, tokenizer), chat,
                              RolloutConfig(stop=STOP, branch_at=1, max_in_flight=2))
        with pytest.raises(UsageError, match="max_in_flight"):
            rollout.run(["lookup-0-0"], group_size=3)
    finally:
        venv.close()


def test_two_levels_fork_every_child_again_and_value_each_node_by_its_children(
        model, tokenizer, chat) -> None:
    """branch_depth=2: the roots fork at turn 1, each child again at turn 2; a middle node
    is a prefix worth its children's mean, and the learner's advantages are the tree's."""
    venv = skyhub.make_vec("toy-lookup", 2, autoreset_mode="disabled", max_turns=5)
    probe = skyhub.make("toy-lookup")
    task_id = probe.tasks[0].id
    probe.close()
    rollout = TreeRollout(venv, HFEngine(model, tokenizer), chat,
                          RolloutConfig(max_tokens_per_turn=12, stop=STOP, branch_at=1,
                                        branch_n=2, branch_depth=2))
    try:
        samples = rollout.run([task_id], group_size=2, seed=3)
        assert rollout._own is None or rollout._own.num_envs == 2  # forked slots removed
    finally:
        rollout.close()
        venv.close()
    roots = [s for s in samples if s.group == 0]
    middles = [s for s in samples if s.tree == "prefix" and s not in roots]
    leaves = [s for s in samples if s.tree == "child"]
    # random text never ends an episode before turn 2: 2 roots, 4 middles, 8 leaves
    assert (len(roots), len(middles), len(leaves)) == (2, 4, 8)
    assert rollout.stats["forks"] == 6
    assert episode_metrics(samples, 0)["episodes"] == 8.0
    def kids(node):  # the samples after a node in its subtree's order, in one group
        after = samples[samples.index(node) + 1:]
        return [s for s in after if s.group == after[0].group]

    assert {len(set(map(id, kids(n)))) for n in (*roots, *middles)} == {2}
    for node in (*roots, *middles):
        n = len(node.token_ids)
        for k in kids(node):
            assert k.token_ids[:n] == node.token_ids and k.loss_mask[:n] == [0] * n
            assert k.turns > node.turns
    for m in middles:  # one turn of its own, trained; the root's turn is context
        assert m.turns == 2 and sum(m.loss_mask) > 0
    # values by hand on the leaves, then bottom-up as the rollout does
    for k, leaf in enumerate(leaves):
        leaf.reward = float(k % 3) / 2
    for node in (*middles, *roots):
        node.reward = sum(k.reward for k in kids(node)) / 2
    learner = Learner(model, AlgoConfig(), OptimConfig(micro_batch_tokens=512))
    got = learner._episode_advantages(samples, 2)
    parent = {id(k): id(node) for node in (*roots, *middles) for k in kids(node)}
    segments = [Segment(str(id(s)), None if s in roots else str(parent[id(s)]),
                        s.reward if s.tree == "child" else None) for s in samples]
    want = tree_advantages(segments)
    for s in samples:
        assert float(got[id(s)]) == pytest.approx(want[str(id(s))], abs=1e-5)
