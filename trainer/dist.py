"""The learner's ranks: starting them, and what rank 0 and the others say to each other.

`skyhub train ... dist.learner_ranks=N` starts N processes itself with PyTorch's elastic
launcher (the machinery behind `torchrun`): one per GPU with NCCL on a GPU machine, gloo
processes on a CPU machine. For more than one machine, run the same command on each with
`dist.nnodes`, `dist.node_rank` and `dist.master_addr`/`master_port` (torchrun's static
rendezvous: node 0 holds rank 0; `dist.learner_ranks` is the total over the nodes).

`launch(entrypoint, args, ...)` runs the function it is handed in every rank (the training
loop hands it `loop.rank_main`), so this module imports nothing of the trainer above it.
Rank 0 runs the training loop: envs, rollout engine, evaluation, logging, checkpoints' small
files. Every rank holds a shard of the learner (`Learner(shard=True)`). Rank 0 drives the
others through `ShardedLearner`: each call (`train_step(episodes, ...)`, `full_state_dict()`,
`save(path)`, `load(path)`) is broadcast to every rank, then run on all of them together;
the others wait in `serve` for the next one. The broadcast carries the whole batch, so every
rank computes the same advantages and takes its own share of each mini-batch.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import uuid
from collections.abc import Iterator
from typing import Any

import torch

_STOP = "skyhub-stop"


# ------------------------------------------------------------------------------ the group
def active() -> bool:
    """Inside a process group of more than one rank."""
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def world_and_rank() -> tuple[int, int]:
    import torch.distributed as dist

    return dist.get_world_size(), dist.get_rank()


def device() -> torch.device:
    """This rank's device: its GPU (by local rank) on a GPU machine, else the CPU."""
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def init(timeout_s: float) -> None:
    """Join the process group the launcher described in the environment (RANK, WORLD_SIZE,
    MASTER_ADDR, ...): NCCL on GPUs, gloo on CPUs. `timeout_s` bounds how long a rank waits in
    a collective, e.g. for rank 0's rollout to finish."""
    import torch.distributed as dist

    global _stopped
    _stopped = False
    if torch.cuda.is_available():
        torch.cuda.set_device(device())
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo",
                            timeout=datetime.timedelta(seconds=timeout_s))


def all_max(n: int) -> int:
    import torch.distributed as dist

    t = torch.tensor([n], device=device())
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def all_gather(obj: Any) -> list[Any]:
    """Every rank's `obj`, in rank order (small Python objects: metrics, logprob dicts)."""
    import torch.distributed as dist

    out: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(out, obj)
    return out


def split(lengths: list[int], world: int) -> list[list[int]]:
    """Indices of `lengths` for each rank, balanced by tokens: longest first, each to the rank
    with the fewest tokens so far (ties to the lower rank), in their original order within a
    rank. The same on every rank, since every rank has the same batch."""
    load = [0] * world
    parts: list[list[int]] = [[] for _ in range(world)]
    for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        parts[r].append(i)
        load[r] += lengths[i]
    return [sorted(p) for p in parts]


# ------------------------------------------------------------------------------ messages
def send(obj: Any) -> None:
    """Rank 0: give every other rank `obj` (they take it with `receive`)."""
    import torch.distributed as dist

    dist.broadcast_object_list([obj], src=0)


def receive() -> Any:
    import torch.distributed as dist

    box: list[Any] = [None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


_stopped = False


def stop_workers() -> None:
    """Rank 0: release the ranks waiting in `receive` (they return from `serve`); once."""
    global _stopped
    if not _stopped:
        _stopped = True
        send(_STOP)


def is_stop(msg: Any) -> bool:
    return isinstance(msg, str) and msg == _STOP


class ShardedLearner:
    """Rank 0's handle on a sharded learner: the methods that need every rank are broadcast
    first, then run here; everything else (`steps`, `lr()`, `world`, ...) is the local
    learner's."""

    def __init__(self, learner: Any) -> None:
        self.learner = learner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.learner, name)

    def _everywhere(self, method: str, *args: Any) -> Any:
        send((method, args))
        return getattr(self.learner, method)(*args)

    def train_step(self, episodes: list[Any], group_size: int) -> dict[str, float]:
        return self._everywhere("train_step", episodes, group_size)

    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return self._everywhere("full_state_dict")

    def save(self, path: Any) -> None:
        self._everywhere("save", path)

    def load(self, path: Any) -> None:
        self._everywhere("load", path)

    def empty_cache(self) -> None:
        """Every rank hands its allocator's cached blocks back to the GPU (colocated engines
        wake into that memory)."""
        send((_EMPTY_CACHE, ()))
        empty_cache()


_EMPTY_CACHE = "skyhub-empty-cache"


def empty_cache() -> None:
    """Return the memory PyTorch's caching allocator holds but no tensor uses to the GPU, so
    another process (a vLLM engine waking up on this GPU) can have it; nothing on a CPU."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def serve(learner: Any) -> None:
    """Ranks other than 0: run rank 0's calls on this rank's shard until it says stop."""
    while not is_stop(msg := receive()):
        method, args = msg
        if method == _EMPTY_CACHE:
            empty_cache()
            continue
        getattr(learner, method)(*args)


@contextlib.contextmanager
def outside_the_group() -> Iterator[None]:
    """Without the launcher's variables (RANK, WORLD_SIZE, MASTER_PORT, ...) in the
    environment, for starting what must not take itself for a rank of this group: a vLLM
    engine started on rank 0 sets up its own process group from them otherwise."""
    names = [k for k in os.environ if k in _LAUNCHER_VARS or k.startswith("TORCHELASTIC_")]
    saved = {k: os.environ.pop(k) for k in names}
    try:
        yield
    finally:
        os.environ.update(saved)


_LAUNCHER_VARS = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                  "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                  "MASTER_ADDR", "MASTER_PORT"}


# ------------------------------------------------------------------------------ launching
def launch(entrypoint: Any, args: tuple[Any, ...], *, ranks: int, nnodes: int = 1,
           node_rank: int = 0, master_addr: str = "127.0.0.1", master_port: int = 29500
           ) -> Any:
    """Run `entrypoint(*args)` in `ranks // nnodes` new processes on this machine, joined with
    the other nodes' into one group of `ranks`; returns what global rank 0 returned (None on
    a node without it). A rank that fails takes the others down, and the launcher raises
    with the failing rank's traceback."""
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    if nnodes == 1:  # a private rendezvous on a free port
        rdzv = {"rdzv_backend": "c10d", "rdzv_endpoint": "127.0.0.1:0",
                "run_id": f"skyhub-{uuid.uuid4().hex[:8]}"}
    else:
        rdzv = {"rdzv_backend": "static", "rdzv_endpoint": f"{master_addr}:{master_port}",
                "rdzv_configs": {"rank": node_rank}, "run_id": "skyhub"}
    config = LaunchConfig(min_nodes=nnodes, max_nodes=nnodes, nproc_per_node=ranks // nnodes,
                          max_restarts=0, monitor_interval=0.1, **rdzv)
    results = elastic_launch(config, entrypoint)(*args)
    if nnodes > 1 and node_rank != 0:
        return None
    return results.get(0)


__all__ = ["ShardedLearner", "active", "all_gather", "all_max", "device", "empty_cache", "init",
           "launch", "outside_the_group", "receive", "send", "serve", "split", "stop_workers",
           "world_and_rank"]
