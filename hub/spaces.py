"""A gymnasium `Text` space wide enough for real text.

gymnasium's `Text` checks membership character by character against a finite charset, and
its default charset is alphanumeric. LLM actions and env observations are arbitrary Unicode
(SQL with quotes and newlines, tracebacks, CJK questions), so `UnicodeText` accepts any
`str` within the length bounds (lone surrogates excepted: they cannot be encoded and would
break tokenizers and JSON logs). Sampling still draws from a finite alphabet (printable ASCII
plus a few non-ASCII characters) so `space.sample()` gives the garbage an env must survive.
"""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from gymnasium.spaces import Text

#: Characters `sample()` draws from: printable ASCII plus some multi-byte characters, so that
#: random actions exercise quoting, whitespace and non-ASCII handling.
SAMPLE_CHARSET = string.printable + "éüß中文ñ→✓"

#: Longest text (in characters) either space admits. Envs cap their observations far below.
MAX_TEXT_LENGTH = 1_000_000

#: Default upper bound on the length of `sample()` without a length mask (uniform lengths up
#: to a million characters would make random-action checks slow without testing more).
SAMPLE_MAX_LENGTH = 256


class UnicodeText(Text):
    """`gymnasium.spaces.Text` that contains any encodable `str` of admissible length."""

    def __init__(self, max_length: int = MAX_TEXT_LENGTH, *, min_length: int = 0,
                 seed: int | np.random.Generator | None = None) -> None:
        super().__init__(max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)

    def contains(self, x: Any) -> bool:
        if not isinstance(x, str) or not (self.min_length <= len(x) <= self.max_length):
            return False
        try:
            x.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        if mask is None and probability is None:
            hi = min(self.max_length, max(self.min_length, SAMPLE_MAX_LENGTH))
            length = int(self.np_random.integers(self.min_length, hi + 1))
            return super().sample(mask=(length, None))
        return super().sample(mask=mask, probability=probability)

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"
