"""Learner memory per 1k tokens: logprobs chunk-wise from the hidden states (ours) against the
LM head's logits over the whole sequence (the learner before, and what most trainers do).

    python -m benchmarks.learner_memory [--tokens 1024 2048]

A model with Qwen2.5's vocabulary (151,936) and a small body (2 layers, hidden 256: the
vocabulary is what the logits cost), float32 on the CPU. One forward + backward of the token
logprobs of a packed micro-batch (the policy loss is their mean), at two micro-batch sizes;
the peak of tensor memory above the weights (torch's profiler trace), and per 1k tokens the
slope between the two sizes (fixed costs cancel). Baseline, in the same process:
`model(...).logits`, then `token_logprobs` (log-softmax in chunks, but of the whole sequence's
logits, which backward keeps: the learner as it was). Goal: >= 4x less per 1k tokens.
"""

from __future__ import annotations

import argparse
from typing import Any

from benchmarks._common import result, write


def model(vocab: int = 151936) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=vocab, hidden_size=256, intermediate_size=512,
                      num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                      tie_word_embeddings=True, use_cache=False)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return Qwen2ForCausalLM(cfg)


def micro_batch(tokens: int, vocab: int, row: int = 512) -> tuple[Any, Any]:
    """(input ids, position ids): rows of `row` tokens, each two packed episodes."""
    import torch

    g = torch.Generator().manual_seed(tokens)
    ids = torch.randint(0, vocab, (tokens // row, row), generator=g)
    half = torch.arange(row // 2)
    return ids, torch.cat([half, half]).expand(tokens // row, row)


def peak_bytes(fn: Any) -> float:
    from skyhub.trainer.model_memory import measure_peak

    fn()  # warm-up
    return min(measure_peak(fn)[1] for _ in range(2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, nargs=2, default=[1024, 2048])
    args = ap.parse_args()
    import torch

    from skyhub.trainer.policy import PolicyLogprobs, token_logprobs

    torch.set_num_threads(2)
    lm = model()
    policy = PolicyLogprobs(lm)
    vocab = lm.config.vocab_size

    def ours(ids: Any, pos: Any) -> None:
        lp, _ = policy(ids, pos, None, ids.roll(-1, dims=-1))
        lp.mean().backward()
        lm.zero_grad(set_to_none=True)

    def before(ids: Any, pos: Any) -> None:
        logits = lm(input_ids=ids, position_ids=pos, use_cache=False).logits
        token_logprobs(logits, ids.roll(-1, dims=-1)).mean().backward()
        lm.zero_grad(set_to_none=True)

    lm.zero_grad(set_to_none=True)
    peaks: dict[str, list[float]] = {"ours": [], "before": []}
    for n in args.tokens:
        ids, pos = micro_batch(n, vocab)
        peaks["ours"].append(peak_bytes(lambda ids=ids, pos=pos: ours(ids, pos)))
        peaks["before"].append(peak_bytes(lambda ids=ids, pos=pos: before(ids, pos)))
    span = (args.tokens[1] - args.tokens[0]) / 1000
    per_1k = {k: (v[1] - v[0]) / span / 2**30 for k, v in peaks.items()}
    sizes = ", ".join(f"{n} tokens: ours {o / 2**30:.3f} GiB, before {b / 2**30:.3f} GiB"
                      for n, o, b in zip(args.tokens, peaks["ours"], peaks["before"],
                                         strict=True))
    note = (f"vocab {vocab}, hidden 256, 2 layers, float32 on CPU, chunks of "
            f"{policy.chunk} tokens; peak above the weights at {sizes}")
    print(f"per 1k tokens: ours {per_1k['ours']:.3f} GiB, before {per_1k['before']:.3f} GiB\n"
          f"  {note}")
    write("learner_memory", [result(
        "learner peak memory per 1k tokens (forward + backward of logprobs)", per_1k["ours"],
        "logits of the whole sequence, then log-softmax (the learner before)",
        per_1k["before"], ">= 4x less", ratio=per_1k["before"] / per_1k["ours"],
        met=per_1k["before"] >= 4 * per_1k["ours"], unit="GiB", note=note)])


if __name__ == "__main__":
    main()
