"""SQuAD normalisation, exact match and token F1, as Search-R1 scores answers."""

from __future__ import annotations

import pytest

from skyhub.envs.search.reward import exact_match, f1, normalize


@pytest.mark.parametrize(("text", "expected"), [
    ("The Beatles", "beatles"),
    ("  the   BEATLES!! ", "beatles"),
    ("An apple a day", "apple day"),
    ("U.S.A.", "usa"),
    ("Theatre", "theatre"),  # 'the' is only removed as a word
])
def test_normalize_follows_squad(text: str, expected: str) -> None:
    assert normalize(text) == expected


def test_articles_case_and_punctuation_do_not_change_exact_match() -> None:
    assert exact_match("The Beatles", ["beatles"]) == 1.0
    assert exact_match("beatles.", "The Beatles") == 1.0
    assert exact_match("The Rolling Stones", ["beatles"]) == 0.0


def test_exact_match_accepts_any_golden_answer() -> None:
    gold = ["Paris", "City of Light"]
    assert exact_match("the city of light", gold) == 1.0
    assert exact_match("Lyon", gold) == 0.0


def test_f1_gives_partial_credit_and_takes_the_best_golden_answer() -> None:
    assert f1("Ptolem", ["Ptolem Orholsson"]) == pytest.approx(2 / 3)
    assert f1("Ptolem Orholsson", ["Ptolem Orholsson"]) == 1.0
    assert f1("Orholsson", ["xyz", "Orholsson"]) == 1.0
    assert f1("nothing shared", ["Ptolem"]) == 0.0
    assert f1("", []) == 0.0
