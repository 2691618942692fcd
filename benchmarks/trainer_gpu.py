"""Learner throughput and MFU on a GPU: skyhub's RL step against a raw transformers
forward/backward of the same batch.

    python -m benchmarks.trainer_gpu            # on a CUDA machine (H200: ~1 minute)
    python -m benchmarks.trainer_gpu --tiny     # a smoke run on CPU (no result file)

A random Qwen2-0.5B-shaped model (24 layers, hidden 896, vocab 151,936), bf16, gradient
checkpointing, a batch of 16 sequences x 1024 tokens (the last 512 of each are the agent's).
Baseline: `model(input_ids, labels=...)`, `loss.backward()`, AdamW step: what any trainer pays
at least. Ours: `Learner.train_step` (GRPO advantages, logprobs at temperature 1, clipped
policy loss with truncated importance sampling, packing into rows, grad clip, AdamW).
Goal: the RL step costs at most 15% more time than the raw forward/backward (ratio >= 0.87).
A reference measured on an H200 for the baseline: 59k tokens/s, MFU 0.24.
"""

from __future__ import annotations

import argparse
import random
import time
from typing import Any

from benchmarks._common import result, write

NEEDS = ("cuda",)  # `python -m benchmarks` skips this benchmark without it

PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12}


def model_and_batch(tiny: bool, batch: int, seq: int) -> tuple[Any, list[Any], str]:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from skyhub.trainer.loop import enable_checkpointing
    from skyhub.trainer.rollout import Episode

    if tiny:
        cfg = Qwen2Config(vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
    else:
        cfg = Qwen2Config(vocab_size=151936, hidden_size=896, intermediate_size=4864,
                          num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                          tie_word_embeddings=True, max_position_embeddings=4096)
    cfg._attn_implementation = "sdpa"
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(device=device, dtype=dtype)
    enable_checkpointing(model)
    model.config.use_cache = False
    rng = random.Random(0)
    episodes = []
    for i in range(batch):
        ep = Episode(group=i // 4, task_id=str(i), reward=float(rng.random() < 0.5))
        ep.add([rng.randrange(cfg.vocab_size) for _ in range(seq // 2)], agent=False)
        ep.add([rng.randrange(cfg.vocab_size) for _ in range(seq - seq // 2)], agent=True,
               logprobs=[-5.0] * (seq - seq // 2), versions=[0] * (seq - seq // 2))
        episodes.append(ep)
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return model, episodes, name


def flops_per_token(model: Any, seq: int) -> float:
    """Training FLOPs per token: 6 N for the matmuls (forward + backward) plus attention
    (12 x layers x hidden x seq, the causal QK^T and AV, forward + backward); gradient
    checkpointing's recomputed forward is not counted, as MFU conventionally does not."""
    c = model.config
    n = sum(p.numel() for p in model.parameters())
    return 6 * n + 12 * c.num_hidden_layers * c.hidden_size * seq / 2


def timed(fn: Any, repeats: int) -> float:
    import torch

    fn()  # warm-up (allocator, kernels)
    best = float("inf")
    for _ in range(repeats):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tiny", action="store_true", help="a tiny model: a CPU smoke run")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    import torch

    from skyhub.trainer.config import AlgoConfig, OptimConfig
    from skyhub.trainer.learner import Learner

    model, episodes, gpu = model_and_batch(args.tiny, args.batch, args.seq)
    device = next(model.parameters()).device
    ids = torch.tensor([e.token_ids for e in episodes], device=device)
    labels = ids.clone()
    labels[:, :args.seq // 2] = -100
    raw_opt = torch.optim.AdamW(model.parameters(), lr=1e-6)

    def raw_step() -> None:
        raw_opt.zero_grad(set_to_none=True)
        model(input_ids=ids, labels=labels).loss.backward()
        raw_opt.step()

    raw_s = timed(raw_step, args.repeats)
    raw_opt.state.clear()  # free its Adam moments before the learner makes its own
    learner = Learner(model, AlgoConfig(), OptimConfig(
        lr=1e-6, train_batch_size=args.batch // 4, mini_batch_size=args.batch // 4,
        micro_batch_tokens=args.batch * args.seq), pack=True)
    ours_s = timed(lambda: learner.train_step(episodes, 4), args.repeats)
    tokens = args.batch * args.seq
    fpt = flops_per_token(model, args.seq)
    peak = next((v for k, v in PEAK_BF16_FLOPS.items() if k in gpu), None)
    mfu = (lambda s: tokens * fpt / s / peak) if peak else (lambda s: float("nan"))
    print(f"{gpu}: raw {tokens / raw_s:,.0f} tokens/s (MFU {mfu(raw_s):.3f}), "
          f"RL step {tokens / ours_s:,.0f} tokens/s (MFU {mfu(ours_s):.3f}), "
          f"overhead {ours_s / raw_s - 1:+.1%}")
    if args.tiny:
        return
    write("trainer_gpu", [
        result("learner tokens/s, RL step", tokens / ours_s, "raw forward/backward + AdamW",
               tokens / raw_s, "<= 15% slower (ratio >= 0.87)",
               met=raw_s / ours_s >= 0.87, unit="tokens/s",
               note=f"{gpu}; MFU ours {mfu(ours_s):.3f}, raw {mfu(raw_s):.3f}; "
                    f"{args.batch}x{args.seq} tokens, bf16, gradient checkpointing")])


if __name__ == "__main__":
    main()
