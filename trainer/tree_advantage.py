"""Advantages for tree-structured rollouts: each segment of a forked episode against its siblings.

A tree rollout forks an episode at a turn (a branch point) into n children, each of which may
be forked again. A *segment* is the run of agent turns from a branch point (or the episode's
start) to the next branch point (or the episode's end); a shared prefix is one segment and its
tokens are trained once. Segments are given as ``Segment(id, parent, reward)``: a leaf (a
segment no other segment names as its parent) ends an episode and carries that episode's
return; an inner segment carries none.

The formulas, for a segment s with leaves L(s) under it (a leaf is its own only leaf):

* value: V(s) = (1 / |L(s)|) * sum_{l in L(s)} r_l, every leaf weighted equally;
* advantage: with S the siblings of s (the children of its parent, s included; the roots of
  the forest are one sibling set, as a GRPO group of independent episodes of one prompt),
  A(s) = (V(s) - mean_{t in S} V(t)) / (std_{t in S} V(t) + eps)     (normalize="std"),
  A(s) =  V(s) - mean_{t in S} V(t)                                  (normalize=None).

``std`` is the std of ``trainer/algorithms.py``'s ``grpo_advantages``, with Bessel's
correction (divide by k - 1), and ``eps`` (1e-6) is added to it as there, so a forest of roots
that are leaves gets exactly ``grpo_advantages`` of their rewards (``normalize=None``:
``dr_grpo_advantages``). A segment without siblings (an only child, or a lone root) gets 0:
there is no other continuation of the same state to compare it with, as a GRPO group of one
sample gets 0. Siblings whose values are all equal get 0 too.

Where this comes from:

* TreeRPO (Yang et al., 2025, "TreeRPO: Tree Relative Policy Optimization", arXiv 2506.05183)
  values a node by the expectation of the rewards below it, computed bottom up, and applies
  GRPO's group-relative normalisation to the "step-level groups" of the sampled tree, the
  children of one node. Ours is that advantage, with two differences: V here is the mean over
  leaves, while a bottom-up expectation weighs each child equally (the two agree when sibling
  subtrees have as many leaves each, e.g. a full n-ary tree), and the std is Bessel's, as our
  GRPO's.
* TreeRL (Hou et al., 2025, "TreeRL: LLM Reinforcement Learning with On-Policy Tree Search",
  arXiv 2506.11902, ACL 2025) uses the same V(s) (the share of correct leaves under s) and
  credits a node with a local advantage V(s) - V(parent(s)) plus a global one V(s) - V(root).
  Our ``normalize=None`` is its local term with the parent's baseline taken as the plain mean
  of its children's values rather than the leaf-weighted one (equal when siblings have as many
  leaves each); we add no global term (the roots' own sibling set plays that part across the
  forest) and no per-node re-weighting.

How the trainer uses it: :func:`tree_advantages` gives each segment's advantage, which every
sampled token of that segment trains on; :func:`leaf_paths` gives each episode (leaf) its chain
of segments from the root, to lay its turns' advantages out along the episode.

Pure Python, no torch: the trees are small (tens of segments), and the numbers are exact enough
to compare with hand-worked ones.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from skyhub.errors import UsageError

Normalize = Literal["std"] | None


@dataclass(frozen=True)
class Segment:
    """One segment of a tree rollout: ``parent`` is the segment it continues (None for a root);
    ``reward`` is the episode's return, set on leaves only."""

    id: str
    parent: str | None
    reward: float | None = None


@dataclass(frozen=True)
class _Forest:
    """A validated forest: segments by id in the order given, children in the order given."""

    segments: dict[str, Segment]
    children: dict[str, list[str]]
    roots: list[str]

    def is_leaf(self, sid: str) -> bool:
        return not self.children[sid]


def _forest(segments: Iterable[Segment]) -> _Forest:
    """Check that ``segments`` form a forest whose leaves, and only those, carry a reward."""
    by_id: dict[str, Segment] = {}
    for seg in segments:
        if seg.id in by_id:
            raise UsageError(
                f"two segments have id {seg.id!r}; give each segment of the forest its own id "
                "(e.g. the branch point's id plus the child's index)"
            )
        by_id[seg.id] = seg
    children: dict[str, list[str]] = {sid: [] for sid in by_id}
    roots: list[str] = []
    for seg in by_id.values():
        if seg.parent is None:
            roots.append(seg.id)
        elif seg.parent not in by_id:
            raise UsageError(
                f"segment {seg.id!r} names parent {seg.parent!r}, which is not among the "
                f"{len(by_id)} segments given; pass every segment of the tree (its root "
                "included), or parent=None for a root"
            )
        else:
            children[seg.parent].append(seg.id)
    # Every segment must reach a root by its parents; one that does not sits on a cycle (or
    # hangs below one). Known-good segments are remembered, so each is walked once.
    rooted: set[str] = set()
    for start in by_id:
        chain: list[str] = []
        sid: str | None = start
        while sid is not None and sid not in rooted:
            if sid in chain:
                loop = [*chain[chain.index(sid):], sid]
                raise UsageError(
                    "segments form a cycle: " + " -> ".join(repr(s) for s in loop)
                    + " (each names the next as its parent); a branch point's children must "
                    "name it as parent, and a tree's first segment must have parent=None"
                )
            chain.append(sid)
            sid = by_id[sid].parent
        rooted.update(chain)
    for seg in by_id.values():
        kids = children[seg.id]
        if not kids and seg.reward is None:
            raise UsageError(
                f"segment {seg.id!r} is a leaf (no segment names it as parent) but has no "
                "reward; set reward= to its episode's return, or pass the segments that "
                "continue it"
            )
        if kids and seg.reward is not None:
            raise UsageError(
                f"segment {seg.id!r} has children ({', '.join(map(repr, kids))}) and "
                f"reward={seg.reward!r}; only a leaf (an episode's end) carries a reward: put "
                f"it on the leaves under {seg.id!r} and leave reward=None here"
            )
        if seg.reward is not None and not math.isfinite(seg.reward):
            raise UsageError(
                f"segment {seg.id!r} has reward={seg.reward!r}; a reward must be a finite "
                "number (one NaN would turn its siblings' baseline into NaN): score the "
                "episode, or leave it out of the tree"
            )
    return _Forest(by_id, children, roots)


def _values(forest: _Forest) -> dict[str, float]:
    rewards: dict[str, list[float]] = {sid: [] for sid in forest.segments}
    for seg in forest.segments.values():
        if seg.reward is None:  # an inner segment (only leaves carry a reward, as checked)
            continue
        up: str | None = seg.id
        while up is not None:
            rewards[up].append(float(seg.reward))
            up = forest.segments[up].parent
    return {sid: math.fsum(rs) / len(rs) for sid, rs in rewards.items()}


def segment_values(segments: Iterable[Segment]) -> dict[str, float]:
    """V(s): the mean of the rewards of the leaves under each segment, each leaf counted once
    (a leaf's value is its reward). Keys follow the order of ``segments``.

    Raises UsageError for an unknown parent, a repeated id, a cycle, a leaf without a reward
    or an inner segment with one.
    """
    return _values(_forest(segments))


def tree_advantages(
    segments: Iterable[Segment], *, normalize: Normalize = "std", eps: float = 1e-6
) -> dict[str, float]:
    """Each segment's advantage against its siblings (the module docstring has the formula).

    ``normalize="std"`` divides by the siblings' std (Bessel's, as ``grpo_advantages``) plus
    ``eps``; ``normalize=None`` only subtracts the siblings' mean (Dr. GRPO's choice). A segment
    with no sibling gets 0: nothing else was sampled from the same state, so there is no
    baseline to compare it with. Keys follow the order of ``segments``.
    """
    if normalize not in ("std", None):
        raise UsageError(
            f"normalize={normalize!r} is not one of 'std' (GRPO) or None (mean only, Dr. GRPO)"
        )
    forest = _forest(segments)
    value = _values(forest)
    advantage: dict[str, float] = {}
    for group in [forest.roots, *forest.children.values()]:
        k = len(group)
        if k == 0:
            continue
        if k == 1:
            advantage[group[0]] = 0.0
            continue
        vs = [value[sid] for sid in group]
        mean = math.fsum(vs) / k
        scale = 1.0
        if normalize == "std":
            scale = math.sqrt(math.fsum((v - mean) ** 2 for v in vs) / (k - 1)) + eps
        for sid, v in zip(group, vs, strict=True):
            advantage[sid] = (v - mean) / scale
    return {sid: advantage[sid] for sid in forest.segments}


def leaf_paths(segments: Iterable[Segment]) -> dict[str, list[str]]:
    """Each leaf's chain of segment ids from its root down to the leaf itself, in the order
    the leaves come in ``segments``: one episode's segments, in the order its turns were played.
    """
    forest = _forest(segments)
    paths: dict[str, list[str]] = {}
    for sid in forest.segments:
        if forest.is_leaf(sid):
            chain: list[str] = []
            up: str | None = sid
            while up is not None:
                chain.append(up)
                up = forest.segments[up].parent
            paths[sid] = chain[::-1]
    return paths
