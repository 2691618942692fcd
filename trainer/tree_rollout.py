"""Tree rollouts (`rollout.branch_at: T`, `rollout.branch_n: n`): episodes forked mid-way, so
that several continuations share one prefix and are compared with each other.

1. `group_size` root episodes per prompt play to turn T, each on its own env (`Rollout.play`
   with `branch_cut`: the episode is cut after turn T's observation, its env kept).
2. Each root still running forks: `VectorEnv.fork` copies its env's state into n-1 new slots
   (a state copy, or a replay: `skyhub.fork`), the root's own env going on as the first child.
   Every child carries a copy of the root's tokens and transcript and its own sampling seed,
   and plays on to its end: one ordinary engine request per turn.
3. The samples the learner gets (each prefix token trained once):
   - a root that forked: its prefix (its tokens up to the fork, loss on its T turns), with
     reward V(root), the mean of its children's rewards (infra errors left out), in the
     prompt's group beside the other roots (`tree = "prefix"`);
   - each child: the whole sequence with the prefix's loss mask cleared (context only), its
     own reward, in a group of its siblings (`tree = "child"`);
   - a root that ended before turn T: as it is, in the prompt's group.

The learner's group estimator then gives every segment its tree advantage: under GRPO,
(V - mean of the siblings' V) / (std + eps) per sibling set, which is
`skyhub.trainer.tree_advantage.tree_advantages` on the tree (its module cites the
tree-structured GRPO variants this follows; tests/trainer/test_tree_rollout.py checks the
two agree on a real rollout). The forked slots are removed from the VectorEnv at the end.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from skyhub.chat import Episode
from skyhub.errors import ForkUnavailable, UsageError
from skyhub.trainer.rollout import Rollout, Trajectory, plan_episodes

if TYPE_CHECKING:
    from skyhub.trainer.config import RolloutConfig
    from skyhub.trainer.inference import Engine
    from skyhub.trainer.token_layout import ChatFormat

log = logging.getLogger(__name__)

#: sampling seeds of children: far above any episode seed (`plan_episodes`), one per child
CHILD_SEED_BASE = 2**31


class TreeRollout(Rollout):
    """`Rollout` whose `run` plays tree rollouts (`rollout.branch_at`, `rollout.branch_n`);
    `make_rollout` makes it when `branch_at` is set."""

    branches = True

    def __init__(self, venv: Any, engine: Engine, chat: ChatFormat,
                 cfg: RolloutConfig) -> None:
        if cfg.branch_at is None or cfg.branch_at < 1 or cfg.branch_n < 2:
            raise UsageError(f"rollout.branch_at must be >= 1 and rollout.branch_n >= 2 (got "
                             f"{cfg.branch_at} and {cfg.branch_n}): the roots fork after "
                             "their first turns into at least two children")
        super().__init__(venv, engine, chat, cfg)

    def run(self, task_ids: Sequence[str], group_size: int, *, seed: int = 0
            ) -> list[Trajectory]:
        return run_tree(self, task_ids, group_size, seed=seed)


def run_tree(rollout: Rollout, task_ids: Sequence[str], group_size: int, *,
             seed: int = 0) -> list[Trajectory]:
    """The tree rollout of `task_ids` (module docstring): prefix, child and unforked root
    samples, grouped for the learner's estimator."""
    cfg = rollout.cfg
    assert cfg.branch_at is not None
    roots = plan_episodes(task_ids, group_size, seed)
    if not roots:
        rollout.stats = {"rollout_s": 0.0, "generate_s": 0.0, "env_wait_s": 0.0}
        return roots
    if cfg.max_in_flight is not None and cfg.max_in_flight < len(roots):
        raise UsageError(f"a tree rollout keeps each root's env for its fork: "
                         f"rollout.max_in_flight ({cfg.max_in_flight}) must be null or at "
                         f"least the roots of a step ({len(roots)})")
    venv = rollout._envs(len(roots))
    base = venv.num_envs
    for t in roots:
        t.episode = Episode(t.task_id, None, "", seed=t.seed, task_index=t.group)
    rollout.branch_cut = cfg.branch_at
    try:
        first = rollout.play(venv, roots, in_flight=len(roots))
    finally:
        rollout.branch_cut = None
    running: dict[int, Trajectory] = {}
    families: list[tuple[Trajectory, list[Trajectory]]] = []
    groups = max(t.group for t in roots) + 1
    try:
        for r, root in enumerate(roots):
            if root.episode is None or root.episode.cut != "branch" or root.slot is None:
                continue
            try:
                slots = [root.slot, *venv.fork(root.slot, cfg.branch_n - 1)]
            except ForkUnavailable as e:
                log.warning("tree rollout: root %d (task %s) could not fork (%s); it is left "
                            "out of this step", r, root.task_id, e)
                root.infra_error = True
                root.info = {**root.info, "error": f"fork failed: {e}"}
                continue
            children = [_child(root, j, groups + r) for j in range(len(slots))]
            running.update(zip(slots, children, strict=True))
            families.append((root, children))
        second = rollout.play(venv, [], in_flight=venv.num_envs, running=running) \
            if running else {}
    finally:
        if venv.num_envs > base:
            venv.shrink(base)
    samples: list[Trajectory] = []
    for root in roots:
        family = next((c for p, c in families if p is root), None)
        if family is None:
            samples.append(root)
            continue
        scored = [c.reward for c in family if not c.infra_error]
        root.reward = sum(scored) / len(scored) if scored else 0.0
        root.infra_error = root.infra_error or not scored
        root.tree = "prefix"
        samples += [root, *family]
    rollout.stats = {k: first.get(k, 0.0) + second.get(k, 0.0)
                     for k in ("rollout_s", "generate_s", "env_wait_s", "requests")}
    rollout.stats.update(peak_in_flight=max(first.get("peak_in_flight", 0.0),
                                            second.get("peak_in_flight", 0.0)),
                         envs=float(base), forks=float(len(families)))
    return samples


def _child(root: Trajectory, j: int, group: int) -> Trajectory:
    """Child `j` of `root`: a copy of its tokens and transcript up to the fork, the prefix
    masked out of the loss, its own sampling seed and its siblings' group."""
    child = copy.deepcopy(root)
    child.group, child.tree, child.slot, child.parts = group, "child", None, []
    child.sample_seed = CHILD_SEED_BASE + root.seed * 64 + j
    child.loss_mask = [0] * len(child.loss_mask)
    child.reward, child.truncated, child.outcome = 0.0, False, "running"
    assert child.episode is not None
    child.episode.cut, child.episode.truncated = None, False
    return child


__all__ = ["CHILD_SEED_BASE", "TreeRollout", "run_tree"]
