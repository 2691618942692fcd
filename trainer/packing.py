"""Packing: how a batch of episodes of very different lengths (a one-line answer, a six-turn
SQL repair) is laid out for forward passes.

Several episodes share a row, with position ids restarting at each one; transformers turns
restarting position ids into a block-diagonal causal mask, so an episode never attends to its
neighbour. Rows are no wider than the micro-batch's longest episode: with a dense-masked
attention kernel a row costs width² whatever it holds, so narrow rows matter as much as full
ones.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from skyhub.trainer.rollout import Trajectory


@dataclass
class MicroBatch:
    """Episodes laid out for one forward pass: rows of token ids (packed: several episodes
    per row, each row as long as the longest episode; padded: one episode per row) and, per
    episode, where its tokens sit."""

    episodes: list[Trajectory]
    input_ids: Tensor  # [R, L]
    position_ids: Tensor  # [R, L]
    attention_mask: Tensor | None  # [R, L] when padded; None when packed
    spans: list[tuple[int, int, int]]  # (row, start, length) per episode


def plan_micro_batches(episodes: list[Trajectory], max_tokens: int, pack: bool = True,
                       pad_id: int = 0) -> list[MicroBatch]:
    """Lay a mini-batch's episodes out for forward passes of about `max_tokens` tokens.

    Packed: several episodes per row (position ids restart at each), rows no wider than the
    micro-batch's longest episode, `max_tokens // width` rows. Padded (the baseline):
    consecutive episodes, one per row, while rows x longest stays within `max_tokens`.
    """
    if not episodes:
        return []
    if not pack:
        groups: list[list[Trajectory]] = []
        for ep in episodes:
            cur = groups[-1] if groups else None
            if cur is not None and (len(cur) + 1) * max(len(e.token_ids) for e in
                                                         [*cur, ep]) <= max_tokens:
                cur.append(ep)
            else:
                groups.append([ep])
        return [_padded(g, pad_id) for g in groups]
    # Longest first: each micro-batch is as wide as its longest episode, and the shorter
    # ones fill its rows (first fit), so attention, which a packed row pays for its whole
    # width, is spent on wide rows only where long episodes need them.
    todo = sorted(episodes, key=lambda e: -len(e.token_ids))
    out = []
    while todo:
        width = len(todo[0].token_ids)
        n_rows = max(1, max_tokens // width)
        rows: list[list[Trajectory]] = [[] for _ in range(n_rows)]
        fill = [0] * n_rows
        rest = []
        for ep in todo:
            n = len(ep.token_ids)
            r = next((r for r in range(n_rows) if fill[r] + n <= width), None)
            if r is None:
                rest.append(ep)
            else:
                rows[r].append(ep)
                fill[r] += n
        out.append(_packed([r for r in rows if r], width, pad_id))
        todo = rest
    return out


def _packed(rows: list[list[Trajectory]], width: int, pad_id: int) -> MicroBatch:
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    # Padding at a row's end continues the last episode's positions: nothing attends to it
    # (it comes last) and its outputs are never read.
    pos = torch.zeros((len(rows), width), dtype=torch.long)
    eps: list[Trajectory] = []
    spans: list[tuple[int, int, int]] = []
    for r, members in enumerate(rows):
        start = 0
        for e in members:
            n = len(e.token_ids)
            ids[r, start:start + n] = torch.tensor(e.token_ids)
            pos[r, start:start + n] = torch.arange(n)
            eps.append(e)
            spans.append((r, start, n))
            start += n
        if start < width:
            last = int(pos[r, start - 1])
            pos[r, start:] = torch.arange(last + 1, last + 1 + width - start)
    return MicroBatch(eps, ids, pos, None, spans)


def _padded(eps: list[Trajectory], pad_id: int) -> MicroBatch:
    width = max(len(e.token_ids) for e in eps)
    ids = torch.full((len(eps), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(eps), width), dtype=torch.long)
    for r, e in enumerate(eps):
        ids[r, :len(e.token_ids)] = torch.tensor(e.token_ids)
        mask[r, :len(e.token_ids)] = 1
    pos = torch.arange(width).expand(len(eps), width)
    return MicroBatch(eps, ids, pos, mask, [(r, 0, len(e.token_ids)) for r, e in
                                            enumerate(eps)])
