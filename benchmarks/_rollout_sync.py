"""Weight sync: in memory against through a file, for a 0.5B-shaped model on CPU.

A part of `benchmarks.rollout`, which merges these figures into its results; the leading
underscore keeps the benchmark runner from running it a second time on its own.

    python -m benchmarks._rollout_sync [--repeats 3] [--no-engine]

The model is Qwen2-0.5B's shape (24 layers, 896 wide, 151,936 tokens, tied embeddings: 494M
parameters) with random bfloat16 weights (nothing downloaded); bfloat16 is what a GPU engine
runs and what a learner sends it. Two measurements, each path timed `--repeats` times,
alternating (the same machine load for both), best kept:

(a) end to end: `VLLMEngine.update_weights` of the whole state dict on a running vLLM engine
    (the pinned CPU build, model runner in the engine-core process), with
    `weight_sync="memory"` (buckets through shared memory, vLLM's weight-transfer API) against
    `weight_sync="file"` (safetensors written to a temp dir, then `reload_weights(
    weights_path=)`). Both include the pause, vLLM's layerwise load and resume; each sync is
    followed by the canary (`weight_sync.check_sync`), so a fast sync that did not land
    would fail the run.
(b) (in the details; the result row only with --no-engine) the part each path adds,
    without vLLM's layerwise load and repacking (which both share): the file path's
    serialising + writing + reading back every tensor (safetensors' `get_tensor`, what vLLM's
    loader does) into a preallocated copy of the model, against the memory path's copy into
    the shared buffers and from there into the same copy (our `MemorySender` /
    `MemoryReceiver`, with the RPC replaced by a direct call).

What (b) shows on this machine: the two are close, either ahead from one run to the next on a
shared 2-core machine. With the file read back at once from the page cache, both are two
copies through kernel-managed memory. (a) is the figure that counts, the whole sync as the
trainer sees it; its gap was not broken down further. Caveat, in the file path's favour:
nothing here waits for the disk; a slower disk, a cold cache or a model larger than the free
page cache only make the file path slower (~36 s has been seen for a 7B model's 15 GB).

vLLM lives in its own virtualenv (.venv-vllm). `run_weight_sync()` runs there: in this
interpreter when vLLM imports, otherwise in `.venv-vllm/bin/python` as a subprocess (so
`benchmarks/rollout.py` can merge it from the main venv, into results/rollout.json; run on its
own, this prints the figures and writes no file).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")

ROOT = Path(__file__).resolve().parents[1]
GOAL = "> 1x (in memory faster than the file)"


def qwen2_05b_shaped() -> Any:
    """A random model of Qwen2-0.5B's shape, in bfloat16 (built in place, ~1 GB)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    cfg = Qwen2Config(vocab_size=151_936, hidden_size=896, intermediate_size=4864,
                      num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                      head_dim=64, max_position_embeddings=4096, tie_word_embeddings=True,
                      rope_theta=1_000_000.0)
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    try:
        model = Qwen2ForCausalLM(cfg)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def transport_only(model: Any, repeats: int) -> dict[str, float]:
    """(b): seconds each path adds, up to the tensors being copied into the model's own
    (a preallocated copy of each tensor stands for vLLM's parameters: both paths end there)."""
    import torch
    from safetensors import safe_open

    from skyhub.trainer.inference.vllm import VLLMEngine
    from skyhub.trainer.inference.vllm_memory import MemoryReceiver, MemorySender

    state = model.state_dict()
    params = {name: torch.empty_like(t) for name, t in state.items()}
    tmp = Path(tempfile.mkdtemp(prefix="skyhub-bench-sync-"))

    def file_path() -> None:
        path = VLLMEngine._write_weights(SimpleNamespace(_tmp=tmp), state.items())
        with safe_open(str(Path(path) / "model.safetensors"), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 (safe_open has keys(), no iteration)
                params[name].copy_(f.get_tensor(name))

    def load(weights: list[tuple[str, Any]]) -> None:
        for name, t in weights:
            params[name].copy_(t)

    receiver = MemoryReceiver.__new__(MemoryReceiver)  # the worker side, minus vLLM's
    receiver._maps = {}                                    # config and model
    receiver.model = SimpleNamespace(load_weights=load)

    class Client:  # collective_rpc replaced by a direct call
        def init_weight_transfer_engine(self, info: Any) -> None: ...
        def start_weight_update(self) -> None: ...
        def finish_weight_update(self) -> None: ...

        def update_weights(self, info: dict[str, Any]) -> None:
            receiver.receive_weights(receiver.parse_update_info(info))

    class Source:
        def __iter__(self) -> Any:
            return iter(state.items())

    sender = MemorySender(client=Client(), source=Source(), bucket_bytes=256 << 20)
    file_s, memory_s = [], []
    try:
        for _ in range(repeats):  # alternating, so both see the same machine load
            for fn, times in ((file_path, file_s), (sender.send_weights, memory_s)):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
    finally:
        sender.shutdown()
        receiver.shutdown()
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return {"file_s": min(file_s), "memory_s": min(memory_s),
            "file_all_s": file_s, "memory_all_s": memory_s,
            "buckets": sender.buckets_sent / repeats}


def end_to_end(model: Any, repeats: int) -> dict[str, float]:
    """(a): `update_weights` on a running engine, memory then file, alternating."""
    from skyhub.trainer.inference.vllm import VLLMEngine
    from skyhub.trainer.weight_sync import check_sync

    t0 = time.perf_counter()
    engine = VLLMEngine(model, None, max_model_len=256, dtype="bfloat16", enforce_eager=True)
    start_s = time.perf_counter() - t0
    memory, file = [], []
    canary: list[float] = []
    try:
        state = model.state_dict()
        sync = engine._sync
        version = 0
        for _ in range(repeats):
            for kind, times in (("memory", memory), ("file", file)):
                engine._sync = sync if kind == "memory" else None  # None: the file path
                version += 1
                t0 = time.perf_counter()
                engine.update_weights(state, version)
                times.append(time.perf_counter() - t0)
                canary.append(check_sync(engine, model))
        engine._sync = sync
    finally:
        engine.close()
    return {"memory_s": min(memory), "file_s": min(file), "memory_all_s": memory,
            "file_all_s": file, "engine_start_s": start_s,
            "canary_max_mean_abs_diff": max(canary)}


def measure(repeats: int = 3, engine: bool = True) -> dict[str, Any]:
    """Both measurements in this interpreter (vLLM must import)."""
    import torch

    model = qwen2_05b_shaped()
    n_params = sum(p.numel() for p in model.parameters())
    n_bytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    from benchmarks._common import result

    rows = []
    out: dict[str, Any] = {"model": {"shape": "Qwen2-0.5B", "params": n_params,
                                     "dtype": "bfloat16", "state_dict_bytes": n_bytes},
                           "torch_threads": torch.get_num_threads(), "repeats": repeats}
    if engine:
        e2e = end_to_end(model, repeats)
        out["end_to_end"] = e2e
        rows.append(result(
            "weight_sync_s (0.5B, vLLM update_weights end to end)", e2e["memory_s"],
            "file (safetensors + reload_weights)", e2e["file_s"], GOAL,
            ratio=e2e["file_s"] / e2e["memory_s"], met=e2e["memory_s"] < e2e["file_s"],
            unit="s", note="ratio = file / in memory (speed-up); both followed by the canary"))
    tr = transport_only(model, repeats)
    out["transport"] = tr
    if not engine:  # (a) is the figure; (b) stands in only where (a) was not run
        rows.append(result(
            "weight_sync_transport_s (0.5B, what each path adds)", tr["memory_s"],
            "file (serialise + write + read back)", tr["file_s"], GOAL,
            ratio=tr["file_s"] / tr["memory_s"], met=tr["memory_s"] < tr["file_s"],
            unit="s", note="ratio = file / in memory; the file is read back from the page "
                           "cache; without vLLM's load"))
    out["results"] = rows
    return out


def run_weight_sync(repeats: int = 3, engine: bool = True) -> dict[str, Any]:
    """The weight-sync figures as a dict: `results` (rows in the house format) and the
    details. Runs in .venv-vllm's interpreter when this one has no vLLM."""
    try:
        import vllm  # noqa: F401
    except ImportError:
        python = ROOT / ".venv-vllm" / "bin" / "python"
        if not python.exists():
            raise RuntimeError("the weight-sync benchmark needs vLLM: make its virtualenv "
                               "with `bash scripts/vllm-venv.sh`, then rerun") from None
        with tempfile.TemporaryDirectory() as d:
            dest = Path(d) / "sync.json"
            cmd = [str(python), "-m", "benchmarks._rollout_sync", "--repeats", str(repeats),
                   "--json", str(dest)] + ([] if engine else ["--no-engine"])
            subprocess.run(cmd, cwd=ROOT, check=True)
            return json.loads(dest.read_text())
    return measure(repeats, engine)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--no-engine", action="store_true",
                    help="skip (a), the end-to-end sync on a running vLLM engine")
    ap.add_argument("--json", help="also write the dict to this file (how run_weight_sync "
                                   "reads it from another venv)")
    args = ap.parse_args(argv)
    out = run_weight_sync(args.repeats, not args.no_engine)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
        return
    # No results file of its own: benchmarks/rollout.py merges these rows into rollout.json.
    import datetime as dt

    from benchmarks._common import machine, print_table

    print_table({"benchmark": "rollout_sync", "machine": machine(), "results": out["results"],
                 "when": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
    print(json.dumps({k: v for k, v in out.items() if k != "results"}, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
