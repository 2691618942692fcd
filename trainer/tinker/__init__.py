"""A Tinker-compatible training server (`skyhub tinker serve`): Tinker scripts, written
against the official `tinker` SDK, train and sample on this machine's models.

- `server.py`: running it (`serve`, `TinkerServerThread`);
- `service.py`: `TinkerService`, the state (sessions, samplers, checkpoints) and operations;
- `routes.py`: `create_app`, the HTTP routes, the API key check and the body limit;
- `cli.py`: `skyhub tinker serve` (found by core's CLI through the `skyhub.cli` entry point);
- `jobs.py`: requests as futures, run by one worker, fairly across clients;
- `models.py`: the base model, a peft adapter per LoRA client, sampling via `HFEngine`;
- `losses.py`: cross_entropy, importance_sampling, ppo;
- `wire.py`: the SDK's protobuf bodies and results.
"""

from __future__ import annotations

from typing import Any

__all__ = ["TinkerServerThread", "TinkerService", "create_app", "serve", "tiny_base_model"]


#: each public name -> the module that defines it
_HOMES = {"TinkerServerThread": "server", "serve": "server", "TinkerService": "service",
          "create_app": "routes", "tiny_base_model": "models"}


def __getattr__(name: str) -> Any:  # lazily: the server needs torch, fastapi and tinker
    if name in _HOMES:
        import importlib

        return getattr(importlib.import_module(f"skyhub.trainer.tinker.{_HOMES[name]}"), name)
    raise AttributeError(name)
