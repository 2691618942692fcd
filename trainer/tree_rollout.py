"""Tree rollouts (`rollout.branch_at: T`, `rollout.branch_n: n`, `rollout.branch_depth: D`):
episodes forked mid-way, so that several continuations share one prefix and are compared
with each other.

1. `group_size` root episodes per prompt play to turn T, each on its own env (`Rollout.play`
   with `branch_cut`: the episode is cut after turn T's observation, its env kept).
2. Each root still running forks: `VectorEnv.fork` copies its env's state into n-1 new slots
   (a state copy, or a replay: `skyhub.fork`), the root's own env going on as the first child.
   Every child carries a copy of the root's tokens and transcript and its own sampling seed,
   and plays on to its end: one ordinary engine request per turn.
   With `branch_depth` D > 1 each child still running forks again after its next turn, up
   to D levels (turns T, T+1, ..., T+D-1): n^D leaves per root.
3. The samples the learner gets (each prefix token trained once):
   - a root that forked: its prefix (its tokens up to the fork, loss on its T turns), with
     reward V(root), the mean of its children's rewards (infra errors left out), in the
     prompt's group beside the other roots (`tree = "prefix"`);
   - each child: the whole sequence with the prefix's loss mask cleared (context only), its
     own reward, in a group of its siblings (`tree = "child"`); a child that forked in turn
     is a prefix too, its one turn rewarded with its own children's mean (computed bottom
     up), and its children are a sibling group of their own;
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
        if cfg.branch_at is None or cfg.branch_at < 1 or cfg.branch_n < 2 \
                or cfg.branch_depth < 1:
            raise UsageError(f"rollout.branch_at must be >= 1, rollout.branch_n >= 2 and "
                             f"rollout.branch_depth >= 1 (got {cfg.branch_at}, "
                             f"{cfg.branch_n} and {cfg.branch_depth}): the roots fork after "
                             "their first turns into at least two children, at one level "
                             "or more")
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
    stats: list[dict[str, float]] = []
    families: list[tuple[Trajectory, list[Trajectory]]] = []  # parents before children
    level, groups = roots, max(t.group for t in roots) + 1
    try:
        for depth in range(cfg.branch_depth + 1):  # the roots' play, then each level's
            running: dict[int, Trajectory] = {}
            if depth:
                for node in level:
                    children = _fork(venv, node, cfg.branch_n, groups)
                    if children:
                        groups += 1
                        running.update(zip([c.slot for c in children], children, strict=True))
                        for c in children:
                            c.slot = None
                        families.append((node, children))
                if not running:
                    break
            # cut again after the next turn, but at the last level: play to the end
            rollout.branch_cut = cfg.branch_at + depth if depth < cfg.branch_depth else None
            try:
                stats.append(rollout.play(venv, [] if depth else roots, running=running,
                                          in_flight=len(roots) if not depth else venv.num_envs))
            finally:
                rollout.branch_cut = None
            level = list(running.values()) if depth else roots
    finally:
        if venv.num_envs > base:
            venv.shrink(base)
    # rewards bottom-up: a node forked is worth its children's mean (children come later)
    for node, children in reversed(families):
        scored = [c.reward for c in children if not c.infra_error]
        node.reward = sum(scored) / len(scored) if scored else 0.0
        node.infra_error = node.infra_error or not scored
        node.tree = "prefix"
    samples = _preorder(roots, {id(node): children for node, children in families})
    rollout.stats = {k: sum(st.get(k, 0.0) for st in stats)
                     for k in ("rollout_s", "generate_s", "env_wait_s", "requests")}
    rollout.stats.update(peak_in_flight=max(st.get("peak_in_flight", 0.0) for st in stats),
                         envs=float(base), forks=float(len(families)))
    return samples


def _preorder(nodes: list[Trajectory], children: dict[int, list[Trajectory]]
              ) -> list[Trajectory]:
    """Every node of the trees, each followed by its children's subtrees."""
    out: list[Trajectory] = []
    for node in nodes:
        out += [node, *_preorder(children.get(id(node), []), children)]
    return out


def _fork(venv: Any, node: Trajectory, n: int, group: int) -> list[Trajectory]:
    """`node`'s n children, on its own slot and n-1 forked ones (`slot` set to each), or
    none: it ended before its cut, or its env could not fork (then it is an infra error,
    left out of the step)."""
    if node.episode is None or node.episode.cut != "branch" or node.slot is None:
        return []
    try:
        slots = [node.slot, *venv.fork(node.slot, n - 1)]
    except ForkUnavailable as e:
        log.warning("tree rollout: an episode of task %s could not fork (%s); it is left "
                    "out of this step", node.task_id, e)
        node.infra_error = True
        node.info = {**node.info, "error": f"fork failed: {e}"}
        return []
    children = [_child(node, j, group) for j in range(len(slots))]
    for child, slot in zip(children, slots, strict=True):
        child.slot = slot
    return children


def _child(root: Trajectory, j: int, group: int) -> Trajectory:
    """Child `j` of `root`: a copy of its tokens and transcript up to the fork, the prefix
    masked out of the loss, its own sampling seed and its siblings' group."""
    child = copy.deepcopy(root)
    child.group, child.tree, child.slot, child.parts = group, "child", None, []
    # one seed per child: its parent's (a root's episode seed, or a child's own) times the
    # widest fork, plus its index
    parent_seed = root.seed if root.sample_seed is None else root.sample_seed
    child.sample_seed = CHILD_SEED_BASE + (parent_seed % CHILD_SEED_BASE) * 64 + j
    child.loss_mask = [0] * len(child.loss_mask)
    child.reward, child.truncated, child.outcome = 0.0, False, "running"
    assert child.episode is not None
    child.episode.cut, child.episode.truncated = None, False
    return child


__all__ = ["CHILD_SEED_BASE", "TreeRollout", "run_tree"]
