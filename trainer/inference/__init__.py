"""The LLM inference engines of the rollout: what turns token ids into sampled continuations.

    engine.py       the contract (`Engine`, `SamplingParams`, `Completion`) and `submitter`
    hf.py           transformers with a KV cache, continuously batched; CPU and GPU
    vllm.py         vLLM's AsyncLLM, live weight sync and in-flight updates
    vllm_memory.py  vLLM's "memory" weight-transfer backend (shared-memory buckets)
    pool.py         several engines behind the one `Engine` interface
    startup.py      starting the engines a `RolloutPlan` places (this process tree, or Ray)

`make_engine("hf" | "vllm", ...)` builds one; importing this package imports nothing heavy
(torch, transformers and vLLM load in `hf.py` and `vllm.py`).
"""

from __future__ import annotations

from typing import Any

from skyhub.errors import MissingDependency, UsageError
from skyhub.trainer.inference.engine import (
    BatchSubmitter,
    Completion,
    Engine,
    SamplingParams,
    Submit,
    submitter,
)


def make_engine(kind: str, model: Any, tokenizer: Any, *, copy_weights: bool = False,
                seed: int = 0, **kwargs: Any) -> Engine:
    """`kind` "hf" or "vllm"; heavy imports happen here, not at package import.

    `copy_weights`: the engine must not share the learner's module (asynchronous training).
    vLLM always holds its own copy, so it ignores this."""
    if kind == "hf":
        from skyhub.trainer.inference.hf import HFEngine

        return HFEngine(model, tokenizer, copy_weights=copy_weights, seed=seed, **kwargs)
    if kind == "vllm":
        try:
            from skyhub.trainer.inference.vllm import VLLMEngine
        except ImportError as e:
            raise MissingDependency(f"rollout.engine=vllm needs vLLM ({e}); on a CPU machine "
                                    "run in the virtualenv `bash scripts/vllm-venv.sh` makes, "
                                    "on a GPU machine pip install vllm (the version in that "
                                    "script)") from None
        return VLLMEngine(model, tokenizer, seed=seed, **kwargs)
    raise UsageError(f"rollout.engine must be 'hf' or 'vllm', not {kind!r}")


__all__ = ["BatchSubmitter", "Completion", "Engine", "SamplingParams", "Submit", "make_engine",
           "submitter"]
