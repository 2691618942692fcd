"""`Spares`: warm sandboxes, each with a clean snapshot and a shell already started, kept ready
for one env's forks (`skyhub.shell.fork`).

A fork's cost should be what it copies, not the start of a sandbox and a shell (tens of
milliseconds on bwrap, about a second on Docker). So an env that forks keeps as many spares
ready as its largest fork asked for (at most `MAX_SPARES`), refilled by a background thread
after each take: the forks of a tree rollout find theirs made while the prefix played. A
take with none ready makes one on the spot (a cold fork: still no replay of the prefix).
The env closes its spares when it closes; spares are never shared between envs.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .session import ShellSession

log = logging.getLogger(__name__)

MAX_SPARES = 16
_LIVE: weakref.WeakSet[Spares] = weakref.WeakSet()  # closed at exit, if their env was not
RETRY_S = 2.0  # after a spare could not be made in the background


@dataclass
class Spare:
    """A sandbox (`clean`: its snapshot before any use) and a shell started in its workdir."""

    sandbox: Any
    clean: Any
    shell: ShellSession

    def close(self) -> None:
        self.shell.close()
        self.sandbox.close()


class Spares:
    """Spares made by `make()`, kept ready in the background (see the module docstring)."""

    def __init__(self, make: Callable[[], Spare], key: Any = None) -> None:
        self._make, self.key = make, key
        self._ready: deque[Spare] = deque()
        self._want = 0
        self._cond = threading.Condition()
        self._closed = False
        self._thread: threading.Thread | None = None
        #: the state of a spare's fresh shell (`skyhub.shell.fork.ShellState`), read once:
        #: what a fork's script is the difference from
        self.fresh: Any = None
        #: what a family learns once of a spare (all spares are alike), for its own checks
        self.facts: dict[str, Any] = {}
        _LIVE.add(self)

    def take(self, want: int = 1) -> Spare:
        """A ready spare, or one made now; from now on `want` (at most `MAX_SPARES`) are
        kept ready."""
        with self._cond:
            self._want = max(self._want, min(want, MAX_SPARES))
            spare = self._ready.popleft() if self._ready else None
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._fill, daemon=True,
                                                name="skyhub-fork-spares")
                self._thread.start()
            self._cond.notify_all()
        return spare if spare is not None else self._make()

    def give_back(self, spare: Spare) -> None:
        """A spare taken but not used (untouched), ready again."""
        with self._cond:
            if not self._closed:
                self._ready.appendleft(spare)
                self._cond.notify_all()
                return
        spare.close()

    def wait_ready(self, timeout: float = 60.0) -> int:
        """Block until as many spares as wanted are ready (or `timeout` s); how many are.
        For benchmarks that time warm forks."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._ready) < self._want and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(min(left, 0.5))
            return len(self._ready)

    def close(self) -> None:
        """Close every ready spare and stop refilling (idempotent)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            thread, ready = self._thread, list(self._ready)
            self._ready.clear()
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=120)
        for spare in ready:
            spare.close()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready)

    def _fill(self) -> None:
        while True:
            with self._cond:
                while not self._closed and len(self._ready) >= self._want:
                    self._cond.wait(1.0)
                if self._closed:
                    return
            try:
                spare = self._make()
            except Exception as e:  # e.g. Docker busy: a take makes its own meanwhile
                log.warning("could not make a spare sandbox for forks: %s", e)
                time.sleep(RETRY_S)
                continue
            with self._cond:
                if not self._closed:
                    self._ready.append(spare)
                    self._cond.notify_all()
                    spare = None
            if spare is not None:
                with contextlib.suppress(Exception):
                    spare.close()


@atexit.register
def _close_all() -> None:
    """Spares of envs never closed: their sandboxes go with the process, not after it."""
    for spares in list(_LIVE):
        with contextlib.suppress(Exception):
            spares.close()


__all__ = ["MAX_SPARES", "Spare", "Spares"]
