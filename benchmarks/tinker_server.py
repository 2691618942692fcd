"""`skyhub tinker serve`: what batching samples buys, and what the protocol costs a step.

    python -m benchmarks.tinker_server [--prompts 16] [--samples 4] [--max-tokens 24]

Both drive `skyhub tinker serve` (its own process, as users run it) with the official
`tinker` SDK, on the tiny random base model (CPU, one torch thread), as an RL loop does:

1. Sampling: a round of `--prompts` sample requests (`num_samples=--samples` each) sent at
   once, then awaited. Ours: the worker runs the queued requests of one sampler as one
   batched generation. Baseline: the same server with batching off (`max_batch=1`), one
   generation per request. Goal: >= 3x the samples per second.
2. A training step (`forward_backward` of 8 short datums, then `optim_step`) through the
   SDK and the server, against the same two calls made in this process on the same model
   (no HTTP, no futures). Goal: the protocol adds < 20 ms per step.
"""

from __future__ import annotations

import argparse
import contextlib
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from benchmarks._common import result, write


@contextlib.contextmanager
def served(base: str, state: Path, max_batch: int = 64) -> Iterator[str]:
    """`skyhub tinker serve` in a child process; yields its URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    skyhub = Path(sys.executable).parent / "skyhub"
    proc = subprocess.Popen([str(skyhub), "tinker", "serve", "--base-model", base, "--port",
                             str(port), "--state-dir", str(state), "--threads", "1",
                             "--max-batch", str(max_batch), "--log-level", "warning"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(url + "/api/v1/healthz", timeout=1)
                break
            except OSError:
                if proc.poll() is not None:
                    raise SystemExit("skyhub tinker serve exited") from None
                time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def sample_round(base: str, state: Path, max_batch: int, prompts: list[list[int]], n: int,
                 max_tokens: int, rounds: int) -> float:
    """Seconds per round of sampling, median of `rounds` (after one warm-up round)."""
    import tinker
    from tinker import types

    with served(base, state, max_batch) as url:
        sc = tinker.ServiceClient(base_url=url, api_key="tml-bench")
        tc = sc.create_lora_training_client(base_model=base, rank=8, seed=0).result()
        sampler = tc.save_weights_and_get_sampling_client().result()
        params = types.SamplingParams(max_tokens=max_tokens, temperature=1.0, stop=[])
        times = []
        for r in range(rounds + 1):
            t0 = time.perf_counter()
            futures = [sampler.sample(prompt=types.ModelInput.from_ints(p), num_samples=n,
                                      sampling_params=params.model_copy(update={"seed": r}))
                       for p in prompts]
            got = [f.result() for f in futures]
            times.append(time.perf_counter() - t0)
            assert all(len(s.tokens) == max_tokens for g in got for s in g.sequences)
        sc.close("success").result()
    return sorted(times[1:])[len(times[1:]) // 2]


def step_overhead(base: str, state: Path, steps: int) -> tuple[float, float]:
    """(ms per step through the SDK, ms per step in-process), medians."""
    import numpy as np
    import tinker
    import torch
    from tinker import types

    from skyhub.trainer.tinker.models import ATTN, MLP, UNEMBED, LoraSpec, ModelHost
    from skyhub.trainer.tinker.wire import WireDatum

    rows = [list(range(10 + i, 40 + i)) for i in range(8)]
    data = [types.Datum(model_input=types.ModelInput.from_ints(r[:-1]),
                        loss_fn_inputs={"target_tokens": r[1:]}) for r in rows]
    adam = types.AdamParams(learning_rate=1e-4)
    with served(base, state) as url:
        sc = tinker.ServiceClient(base_url=url, api_key="tml-bench")
        tc = sc.create_lora_training_client(base_model=base, rank=8, seed=0).result()
        sdk = []
        for _ in range(steps + 2):
            t0 = time.perf_counter()
            fb, opt = tc.forward_backward(data, "cross_entropy"), tc.optim_step(adam)
            fb.result(), opt.result()
            sdk.append(time.perf_counter() - t0)
        sc.close("success").result()
    torch.set_num_threads(1)  # as the server runs
    host = ModelHost(base)
    model = host.create("direct", LoraSpec(8, ATTN + MLP + UNEMBED, 0))
    wire = [WireDatum(r[:-1], {"target_tokens": np.array(r[1:])}) for r in rows]
    direct = []
    for _ in range(steps + 2):
        t0 = time.perf_counter()
        host.forward_backward(model, wire, "cross_entropy", {}, backward=True)
        host.optim_step(model, 1e-4, 0.9, 0.95, 1e-12, 0.0, 0.0)
        direct.append(time.perf_counter() - t0)

    def median_ms(xs: list[float]) -> float:
        xs = sorted(xs[2:])
        return xs[len(xs) // 2] * 1e3

    return median_ms(sdk), median_ms(direct)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--prompts", type=int, default=16)
    ap.add_argument("--samples", type=int, default=4, help="num_samples per request")
    ap.add_argument("--max-tokens", type=int, default=24)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    args = ap.parse_args(argv)
    from skyhub.trainer.tinker import tiny_base_model

    with tempfile.TemporaryDirectory() as tmp:
        base = tiny_base_model(Path(tmp) / "base")
        prompts = [list(range(10 + i, 18 + i)) for i in range(args.prompts)]
        rows = (prompts, args.samples, args.max_tokens, args.rounds)
        batched = sample_round(base, Path(tmp) / "a", 64, *rows)
        single = sample_round(base, Path(tmp) / "b", 1, *rows)
        sdk_ms, direct_ms = step_overhead(base, Path(tmp) / "c", args.steps)
    total = args.prompts * args.samples
    overhead = sdk_ms - direct_ms
    write("tinker_server", [
        result("samples/s, one round of requests", total / batched,
               "one generation per request", total / single, ">= 3x",
               met=single / batched >= 3, unit="samples/s",
               note=f"{args.prompts} requests x {args.samples} samples x {args.max_tokens} "
                    "tokens, tiny model, 1 CPU thread"),
        result("protocol cost per training step", overhead, "in-process step", direct_ms,
               "< 20 ms", ratio=sdk_ms / direct_ms, met=overhead < 20, unit="ms",
               note=f"forward_backward (8 x 29 tokens) + optim_step; through the SDK "
                    f"{sdk_ms:.1f} ms, in-process {direct_ms:.1f} ms"),
    ])


if __name__ == "__main__":
    main()
