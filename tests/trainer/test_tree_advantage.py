"""Advantages of tree rollouts' segments, against numbers worked out by hand (the arithmetic is in
the comments), against the trainer's own GRPO on a flat tree, and the errors a caller can act on.
"""

from __future__ import annotations

import math

import pytest
import torch

from skyhub.errors import UsageError
from skyhub.trainer.algorithms import dr_grpo_advantages, grpo_advantages
from skyhub.trainer.tree_advantage import (
    Segment,
    leaf_paths,
    segment_values,
    tree_advantages,
)

#: R forks into A and B; A into two episodes (one won, one lost), B into three (all won).
TREE = [
    Segment("R", None),
    Segment("A", "R"),
    Segment("B", "R"),
    Segment("A1", "A", 1.0),
    Segment("A2", "A", 0.0),
    Segment("B1", "B", 1.0),
    Segment("B2", "B", 1.0),
    Segment("B3", "B", 1.0),
]


def test_a_segment_is_worth_the_mean_of_the_episodes_below_it():
    v = segment_values(TREE)
    # R: (1 + 0 + 1 + 1 + 1) / 5 = 0.8, each leaf counted once (the mean of A and B, 0.75,
    # would weigh A's two episodes as much as B's three)
    assert v == pytest.approx(
        {"R": 0.8, "A": 0.5, "B": 1.0, "A1": 1.0, "A2": 0.0, "B1": 1.0, "B2": 1.0, "B3": 1.0})
    assert list(v) == [s.id for s in TREE]


def test_each_segment_is_compared_with_its_siblings():
    adv = tree_advantages(TREE)
    # A vs B: values 0.5, 1.0; mean 0.75; Bessel std sqrt((0.25^2 + 0.25^2) / 1) = sqrt(0.125)
    ab = 0.25 / (math.sqrt(0.125) + 1e-6)
    # A1 vs A2: rewards 1, 0; mean 0.5; std sqrt((0.5^2 + 0.5^2) / 1) = sqrt(0.5)
    a12 = 0.5 / (math.sqrt(0.5) + 1e-6)
    assert adv == pytest.approx({
        "R": 0.0,  # a lone root: nothing to compare it with
        "A": -ab, "B": ab,
        "A1": a12, "A2": -a12,
        "B1": 0.0, "B2": 0.0, "B3": 0.0,  # three equal rewards: no signal among them
    }, abs=1e-12)
    assert adv["A"] < 0 < adv["B"] and adv["A1"] == -adv["A2"]
    assert ab == pytest.approx(0.7071, abs=1e-4)


def test_without_normalization_the_advantage_is_the_value_less_the_siblings_mean():
    adv = tree_advantages(TREE, normalize=None)
    # A, B: 0.5 - 0.75, 1.0 - 0.75; A1, A2: 1 - 0.5, 0 - 0.5
    assert adv == pytest.approx({"R": 0.0, "A": -0.25, "B": 0.25, "A1": 0.5, "A2": -0.5,
                                 "B1": 0.0, "B2": 0.0, "B3": 0.0}, abs=1e-12)


def test_an_only_child_gets_no_advantage_whatever_its_value():
    # R -> M (M is R's only continuation) -> two episodes; M's value 0.5 is its parent's too
    tree = [Segment("R", None), Segment("M", "R"),
            Segment("M1", "M", 3.0), Segment("M2", "M", -2.0)]
    adv = tree_advantages(tree)
    assert adv["M"] == 0.0 and adv["R"] == 0.0
    # M1, M2: mean 0.5; std sqrt((2.5^2 + 2.5^2) / 1) = 2.5 * sqrt(2)
    expected = 2.5 / (2.5 * math.sqrt(2) + 1e-6)
    assert adv["M1"] == pytest.approx(expected, abs=1e-12)
    assert adv["M2"] == pytest.approx(-expected, abs=1e-12)
    assert tree_advantages(tree, normalize=None)["M"] == 0.0


def test_several_roots_are_one_group_like_grpo_samples_of_one_prompt():
    # X forks into two episodes (0 and 1, so V(X) = 0.5); Y and Z are unforked episodes
    tree = [Segment("X", None), Segment("X1", "X", 0.0), Segment("X2", "X", 1.0),
            Segment("Y", None, 1.0), Segment("Z", None, 0.0)]
    adv = tree_advantages(tree)
    # roots' values 0.5, 1, 0: mean 0.5; std sqrt((0 + 0.25 + 0.25) / 2) = 0.5
    assert adv["X"] == pytest.approx(0.0, abs=1e-12)
    assert adv["Y"] == pytest.approx(0.5 / (0.5 + 1e-6), abs=1e-12)
    assert adv["Z"] == pytest.approx(-0.5 / (0.5 + 1e-6), abs=1e-12)
    # X1, X2: rewards 0, 1; std sqrt(0.5)
    assert adv["X2"] == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6), abs=1e-12)
    assert adv["X1"] == -adv["X2"]


def test_a_flat_tree_is_exactly_grpo():
    rewards = [0.2, 1.0, 0.0, 0.7, 0.7, 0.1]
    flat = [Segment(f"e{i}", None, r) for i, r in enumerate(rewards)]
    expected = grpo_advantages(torch.tensor(rewards), group_size=len(rewards))
    torch.testing.assert_close(torch.tensor(list(tree_advantages(flat).values())), expected)
    expected = dr_grpo_advantages(torch.tensor(rewards), group_size=len(rewards))
    torch.testing.assert_close(
        torch.tensor(list(tree_advantages(flat, normalize=None).values())), expected)
    # and one episode alone, as GRPO's group of one
    assert tree_advantages([Segment("solo", None, 1.0)]) == {"solo": 0.0}


def test_leaf_paths_give_each_episode_its_segments_from_the_root():
    assert leaf_paths(TREE) == {
        "A1": ["R", "A", "A1"], "A2": ["R", "A", "A2"],
        "B1": ["R", "B", "B1"], "B2": ["R", "B", "B2"], "B3": ["R", "B", "B3"],
    }
    # order of the input does not matter: a leaf given before its ancestors
    assert leaf_paths(TREE[::-1])["A2"] == ["R", "A", "A2"]
    assert leaf_paths([Segment("Y", None, 1.0)]) == {"Y": ["Y"]}


@pytest.mark.parametrize(("segments", "message"), [
    ([Segment("R", None), Segment("A", "Q", 1.0)],
     r"segment 'A' names parent 'Q', which is not among the 2 segments given; pass every "
     r"segment of the tree"),
    ([Segment("A", "B"), Segment("B", "A"), Segment("C", "A", 1.0)],
     r"segments form a cycle: 'A' -> 'B' -> 'A' .*must have parent=None"),
    ([Segment("R", None), Segment("A", "R"), Segment("A1", "A", 1.0), Segment("A2", "A")],
     r"segment 'A2' is a leaf \(no segment names it as parent\) but has no reward; set reward="),
    ([Segment("R", None, 0.5), Segment("A", "R", 1.0), Segment("B", "R", 0.0)],
     r"segment 'R' has children \('A', 'B'\) and reward=0.5; only a leaf .* carries a reward"),
    ([Segment("R", None), Segment("A", "R", 1.0), Segment("A", "R", 0.0)],
     r"two segments have id 'A'; give each segment of the forest its own id"),
    ([Segment("R", None), Segment("A", "R", float("nan")), Segment("B", "R", 0.0)],
     r"segment 'A' has reward=nan; a reward must be a finite number"),
])
def test_a_malformed_tree_is_refused_with_the_fix(segments, message):
    for fn in (segment_values, tree_advantages, leaf_paths):
        with pytest.raises(UsageError, match=message):
            fn(segments)


def test_an_unknown_normalization_is_refused():
    with pytest.raises(UsageError, match=r"normalize='mean' is not one of 'std' .* or None"):
        tree_advantages(TREE, normalize="mean")  # type: ignore[arg-type]
