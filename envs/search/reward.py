"""How an answer is scored: SQuAD's normalisation, exact match and token F1 (pure functions).

The normalisation is SQuAD v1.1's `normalize_answer` (Rajpurkar et al., 2016), which
Search-R1 uses for its EM reward: lowercase, drop punctuation, drop the articles a/an/the,
collapse whitespace. Both scores take the best over all golden answers.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Iterable

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = str.maketrans("", "", string.punctuation)


def normalize(text: str) -> str:
    """SQuAD normalisation: `"The  Beatles!"` -> `"beatles"`."""
    text = str(text).lower().translate(_PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _golden(golden: str | Iterable[str]) -> list[str]:
    return [golden] if isinstance(golden, str) else [str(g) for g in golden]


def exact_match(prediction: str, golden: str | Iterable[str]) -> float:
    """1.0 when the normalised prediction equals any normalised golden answer, else 0.0."""
    pred = normalize(prediction)
    return float(any(pred == normalize(g) for g in _golden(golden)))


def _f1(pred_tokens: list[str], gold_tokens: list[str]) -> float:
    if not pred_tokens or not gold_tokens:
        return float(pred_tokens == gold_tokens)
    common = Counter(pred_tokens) & Counter(gold_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred_tokens), same / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def f1(prediction: str, golden: str | Iterable[str]) -> float:
    """SQuAD token F1 of the prediction, the best over the golden answers (0.0 if none)."""
    pred = normalize(prediction).split()
    return max((_f1(pred, normalize(g).split()) for g in _golden(golden)), default=0.0)


__all__ = ["exact_match", "f1", "normalize"]
