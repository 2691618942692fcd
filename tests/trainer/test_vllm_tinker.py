"""The Tinker server's `--engine vllm`: samples from a client's LoRA adapter, merged into the
weights vLLM holds, agree with the `hf` engine's samples of the same adapter.

Runs where vLLM is installed (`bash scripts/vllm-venv.sh`; CI runs it in .venv-vllm); the
main venv skips it at import. The model host is driven directly: the HTTP side is the same
for both engines and is tested in test_tinker_server.py.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

pytest.importorskip("vllm")
pytest.importorskip("peft")

import numpy as np

from skyhub.trainer.inference import SamplingParams
from skyhub.trainer.tinker.exceptions import Unsupported
from skyhub.trainer.tinker.models import (
    ATTN,
    MLP,
    UNEMBED,
    LoraSpec,
    ModelHost,
    SampleItem,
    tiny_base_model,
)
from skyhub.trainer.tinker.wire import WireDatum

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

SEQ = [20, 40, 60, 80, 100, 120, 140, 160, 180, 200]


def test_vllm_samples_the_adapter_the_hf_engine_samples(tmp_path) -> None:
    base = tiny_base_model(tmp_path / "base", tie_embeddings=False)  # a LoRA on lm_head too
    hf, vl = ModelHost(base), ModelHost(base, engine="vllm")
    try:
        for host in (hf, vl):
            model = host.create("m", LoraSpec(8, ATTN + MLP + UNEMBED, 0))
            for _ in range(25):  # memorize SEQ
                host.forward_backward(model, [WireDatum(SEQ[:-1],
                                                        {"target_tokens": np.array(SEQ[1:])})],
                                      "cross_entropy", {}, backward=True)
                host.optim_step(model, 1e-2, 0.9, 0.95, 1e-8, 0.0, 1.0)
        greedy = SamplingParams(max_tokens=7, temperature=0.0)
        item = [SampleItem(SEQ[:3], 1, 0, False)]
        want = hf.sample(hf.models["m"], item, greedy)[0][0][0]
        got = vl.sample(vl.models["m"], item, greedy)[0][0][0]
        assert want[0] == SEQ[3:]  # the adapter memorized it
        assert got[0] == want[0]
        np.testing.assert_allclose(got[1], want[1], atol=1e-3)
        # the base model (adapter merged out again) agrees too
        base_hf = hf.sample(None, item, greedy)[0][0][0]
        base_vl = vl.sample(None, item, greedy)[0][0][0]
        assert base_vl[0] == base_hf[0] != want[0]
        np.testing.assert_allclose(base_vl[1], base_hf[1], atol=1e-3)
        # snapshot vs newer weights: vLLM reloads when the source changes
        snap = vl.snapshot(vl.models["m"])
        assert vl.sample(snap, item, greedy)[0][0][0][0] == want[0]
        with pytest.raises(Unsupported, match="token-id stops"):
            vl.sample(None, item, SamplingParams(max_tokens=3, stop=("x",)))
    finally:
        vl.close()
