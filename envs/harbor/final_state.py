"""Saving a Harbor episode's final state for `skyhub harbor reverify` (reverify.py).

With `HarborEnv(save_final_state=DIR)`, right before an episode's (last) verifier runs, the
agent's container is paused (its processes resume after) and the data roots the agent changed
(the training verifier's roots: the workdir, /logs/agent, /logs/artifacts, the task's
artifacts, `verifier_paths=`; a root Docker's diff names no change under is not saved, the
image holds it) are read through Docker's archive API with the training verifier's filter
(verifier.py: regular files, directories, links as data, nothing below a link, no setuid bit,
`MAX_STATE_BYTES` in all) into `DIR/<task>/<id>/roots/<n>.tar`, never extracted on the host.
After the verdict, `state.json` beside them records the task (id, folder, digest), the image
user, the isolation and reward settings, the roots and the verdict; the episode's info names
the folder (`final_state`), so it is in episodes.jsonl. What is outside the roots (packages
the agent installed in /usr, a running server) is not saved: a task whose tests need more
names it with `verifier_paths=`.
"""

from __future__ import annotations

import contextlib
import json
import secrets
from pathlib import Path
from typing import Any

from . import verifier

STATE_FILE = "state.json"
MAX_STATE_BYTES = 512 << 20


def task_slug(task_id: str) -> str:
    """A task id as one folder name (its saved state's here, its logs' and image's in env.py):
    letters, digits and `-._` kept, anything else `_`, at most 100 characters."""
    return "".join(c if c.isalnum() or c in "-._" else "_" for c in task_id)[:100] or "task"


def save_roots(env: Any, where: Path) -> dict[str, Any]:
    """The agent's changed data roots of `env`'s container saved into a new folder under
    `where` (module docstring); returns what `finish` completes ({"error": ...} when they
    could not be saved: the episode's verdict stands either way)."""
    sb, task = env._sandbox, env.task
    dest = where / task_slug(task.id) / secrets.token_hex(6)
    paused = False
    try:
        roots = env._data_roots()
        sb.container.reload()
        if sb.container.status == "running":  # one moment's files, whatever still runs
            verifier.freeze(sb.container)
            paused = True
        changed = verifier.changed_roots(sb.container.diff() or [], roots)
        (dest / "roots").mkdir(parents=True)
        budget, saved = [MAX_STATE_BYTES], {}
        for i, root in enumerate(changed):
            rel = f"roots/{i}.tar"
            saved[root] = rel if verifier.save_data(sb, root, dest / rel, budget=budget) \
                else None
    except Exception as e:  # the state is for later; the episode goes on
        return {"dir": str(dest), "error": f"the final state could not be saved: {e}"}
    finally:
        if paused:  # a container that cannot resume fails its verifier, which says so
            with contextlib.suppress(Exception):
                sb.container.unpause()
    return {"dir": str(dest), "roots": saved, "data_roots": roots}


def finish(env: Any, pending: dict[str, Any], reward: float, info: dict[str, Any]) -> None:
    """state.json written beside the saved roots, with the episode's verdict; the folder
    named in `info["final_state"]` (or why nothing was saved in `final_state_error`)."""
    from .registry import task_digest

    if "error" in pending:
        info["final_state_error"] = pending["error"]
        return
    task = env.task
    path = Path(task.meta["path"])
    state = {
        "task_id": task.id, "task_path": str(path), "task_digest": task_digest(path),
        "image_user": str(env._image_user), "isolation": env.isolation,
        "reward_key": env.reward_key, "reward_rule": env.reward_rule,
        "verifier_paths": env.verifier_paths, "steps": len(env._steps()),
        "roots": pending["roots"], "data_roots": pending["data_roots"],
        "verdict": {"reward": None if info.get("infra_error") else reward,
                    "outcome": info.get("outcome"), "infra_error": bool(info.get("infra_error")),
                    "rewards": info.get("rewards")}}
    (Path(pending["dir"]) / STATE_FILE).write_text(json.dumps(state, indent=1))
    info["final_state"] = pending["dir"]


__all__ = ["MAX_STATE_BYTES", "STATE_FILE", "finish", "save_roots", "task_slug"]
