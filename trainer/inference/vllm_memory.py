"""The "memory" weight-transfer backend of the vLLM engine (`weight_sync="memory"`): buckets
of tensors in anonymous shared-memory files (`memfd`) that vLLM's workers map and load, no
disk. vLLM's own backends ("nccl", "ipc") need CUDA; this one works on vLLM's CPU build.

It plugs into vLLM's weight-transfer API (`vllm.distributed.weight_transfer`) as a pair: the
worker side (`MemoryReceiver`, a `WeightTransferEngine`) and the trainer side
(`MemorySender`, a `TrainerWeightTransferEngine`), registered in vLLM's two factories under
`BACKEND` when this module is imported (`register()` at the bottom). The engine's module
(`skyhub.trainer.inference.vllm`) imports it, and vLLM's worker imports that module to find
the engine's worker extension, so the backend is registered in the worker before the worker
asks the factory for it.
"""

from __future__ import annotations

import contextlib
import mmap
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, ClassVar

import torch
from torch import Tensor
from vllm.distributed.weight_transfer import (
    TrainerWeightTransferEngine,
    WeightSource,
    WeightTransferEngine,
    WeightTransferEngineFactory,
    WeightTransferTrainerFactory,
)
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

from skyhub.errors import UsageError

#: This backend's key in vLLM's weight-transfer factories.
BACKEND = "skyhub_memory"


@dataclass
class MemoryInitInfo(WeightTransferInitInfo):
    """Nothing to rendezvous: each bucket's update info names the shared file."""


@dataclass
class MemoryTrainerInitInfo(TrainerInitInfo):
    backend: ClassVar[str] = BACKEND
    bucket_bytes: int = 256 << 20


@dataclass
class MemoryUpdateInfo(WeightTransferUpdateInfo):
    """One bucket: tensors laid out back to back in one of the trainer's memfds, read through
    /proc/<trainer pid>/fd/<fd> (a same-host child process may open it; nothing on disk)."""

    path: str
    size: int
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    offsets: list[int]


class MemoryReceiver(WeightTransferEngine[MemoryInitInfo, MemoryUpdateInfo]):
    """Worker side of "memory": the layerwise reload lifecycle of vLLM's own IPC backend
    (`initialize_layerwise_reload` at start, `model.load_weights` per bucket,
    `finalize_layerwise_reload` at the end, which redoes the CPU backend's weight repacking).

    The tensors handed to `load_weights` are views of the shared pages, not copies: the
    layerwise loader keeps them until their layer is complete (maybe in a later bucket) or,
    for attention layers, until the finish, which is safe because every bucket of a sync has
    its own memfd (`MemorySender`), rewritten only by the next sync."""

    init_info_cls = MemoryInitInfo
    update_info_cls = MemoryUpdateInfo
    supports_draft_weight_update = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._maps: dict[str, mmap.mmap] = {}

    def init_transfer_engine(self, init_info: MemoryInitInfo) -> None:
        pass

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        initialize_layerwise_reload(self.model)

    def finish_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)

    def update_weights(self, update_info: dict[str, Any]) -> None:
        # The base class ends with torch.accelerator.synchronize(), which raises on a CPU
        # machine; loading from host memory is synchronous there anyway.
        self.receive_weights(self.parse_update_info(update_info))
        if torch.accelerator.is_available():
            torch.accelerator.synchronize()

    def _buffer(self, path: str, size: int) -> mmap.mmap:
        cached = self._maps.get(path)
        if cached is None or len(cached) != size:
            # A resized bucket (another layout): the old map goes once no view uses it.
            fd = os.open(path, os.O_RDWR)
            try:
                cached = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | mmap.MAP_POPULATE)
            finally:
                os.close(fd)
            self._maps[path] = cached
        return cached

    def receive_weights(self, update_info: MemoryUpdateInfo) -> None:
        from vllm.model_executor.model_loader.mtp_validation import (
            disable_mtp_completeness_check,
        )

        buf = torch.frombuffer(self._buffer(update_info.path, update_info.size),
                               dtype=torch.uint8)
        weights = []
        for name, dtype_name, shape, offset in zip(
                update_info.names, update_info.dtype_names, update_info.shapes,
                update_info.offsets, strict=True):
            dtype = getattr(torch, dtype_name)
            nbytes = _numel(shape) * dtype.itemsize
            weights.append((name, buf[offset:offset + nbytes].view(dtype).view(shape)))
        with disable_mtp_completeness_check():
            self.model.load_weights(weights)

    def shutdown(self) -> None:
        for m in self._maps.values():
            with contextlib.suppress(BufferError):  # a view still alive: freed with it
                m.close()
        self._maps.clear()


class MemorySender(TrainerWeightTransferEngine[MemoryTrainerInitInfo]):
    """Trainer side of "memory": packs the source into buckets of `bucket_bytes` (a tensor
    larger than that goes alone), bucket i in memfd i. The memfds stay from one sync to the
    next (pages allocated once; host memory: about the model's size, as the page cache of the
    file path), and one bucket is in flight at a time (`update_weights` returns once the
    worker has taken it)."""

    init_info_cls = MemoryTrainerInitInfo

    def __init__(self, *, client: Any, source: WeightSource, bucket_bytes: int) -> None:
        super().__init__(client=client, source=source)
        self.bucket_bytes = bucket_bytes
        self._bufs: list[tuple[int, mmap.mmap | None]] = []  # (fd, map) per bucket index
        self.buckets_sent = 0

    @classmethod
    def trainer_init(cls, init_info: MemoryTrainerInitInfo, *, client: Any,
                     source: WeightSource | None = None) -> MemorySender:
        if source is None:
            raise UsageError("the memory weight sync needs a WeightSource")
        engine = cls(client=client, source=source, bucket_bytes=init_info.bucket_bytes)
        client.init_weight_transfer_engine({})
        return engine

    def _buffer(self, index: int, size: int) -> tuple[int, mmap.mmap]:
        if index == len(self._bufs):
            self._bufs.append((os.memfd_create(f"skyhub-weights-{index}"), None))
        fd, m = self._bufs[index]
        if m is None or len(m) != size:
            if m is not None:
                m.close()
            os.ftruncate(fd, size)
            m = mmap.mmap(fd, size)
            self._bufs[index] = (fd, m)
        return fd, m

    def send_weights(self) -> None:
        assert self.source is not None
        self.client.start_weight_update()
        bucket: list[tuple[str, Tensor]] = []
        used = index = 0
        for name, tensor in self.source:
            nbytes = tensor.numel() * tensor.element_size()
            if bucket and used + nbytes > self.bucket_bytes:
                self._send(index, bucket)
                bucket, used, index = [], 0, index + 1
            bucket.append((name, tensor))
            used += nbytes
        if bucket:
            self._send(index, bucket)
        self.client.finish_weight_update()

    def _send(self, index: int, bucket: list[tuple[str, Tensor]]) -> None:
        total = sum(t.numel() * t.element_size() for _, t in bucket)
        fd, m = self._buffer(index, max(total, 1))
        buf = torch.frombuffer(m, dtype=torch.uint8)
        offsets, off = [], 0
        for _, t in bucket:
            n = t.numel() * t.element_size()
            flat = t.detach().contiguous().reshape(-1).view(torch.uint8)
            buf[off:off + n].copy_(flat)  # GPU tensors are copied to host here
            offsets.append(off)
            off += n
        del buf  # the map may be resized by a later sync: no view may outlive this call
        info = MemoryUpdateInfo(
            path=f"/proc/{os.getpid()}/fd/{fd}", size=len(m),
            names=[n for n, _ in bucket], dtype_names=[str(t.dtype).removeprefix("torch.")
                                                      for _, t in bucket],
            shapes=[list(t.shape) for _, t in bucket], offsets=offsets)
        self.client.update_weights(asdict(info))
        self.buckets_sent += 1

    def shutdown(self) -> None:
        for fd, m in self._bufs:
            if m is not None:
                m.close()
            os.close(fd)
        self._bufs = []


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def register() -> None:
    for factory, cls in ((WeightTransferEngineFactory, MemoryReceiver),
                         (WeightTransferTrainerFactory, MemorySender)):
        with contextlib.suppress(ValueError):  # already registered: imported again
            factory.register_engine(BACKEND, cls)


register()

__all__ = ["BACKEND", "MemoryInitInfo", "MemoryReceiver", "MemorySender", "MemoryTrainerInitInfo",
           "MemoryUpdateInfo", "register"]
