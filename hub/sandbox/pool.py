"""`Pool`: warm sandboxes handed out clean, so an episode's reset costs a queue pop.

    with skyhub.sandbox.Pool(size=8, backend="docker") as pool:
        with pool.lease() as sb:        # a clean sandbox
            sb.exec("make test")
        # returned: restored to its clean snapshot in the background, then reused

A background thread keeps `size` sandboxes ready: it creates them (taking a clean snapshot
of each), restores returned ones to that snapshot (every process of the last user killed,
every place it could write put back: see `Sandbox.restore`), and replaces sandboxes that are
broken, fail to restore, or are older than `ttl_s`. `lease()`
never waits for cleaning: with nothing ready it creates a sandbox itself. `close()` removes
every sandbox the pool made, leased or not.

Filling: up to `create_parallel` sandboxes are created at once (default 4), each on its own
short-lived thread, while the worker goes on cleaning returned ones. Creation is mostly
waiting on the Docker daemon (runc, the shim, the guest's start), so a few in flight fill a
large pool several times faster than one at a time; how many the daemon gets at once across
the whole process is capped by `skyhub.sandbox.ratelimit` (a token bucket and a limit on
creations in flight), whatever the number of pools.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from skyhub.errors import SkyhubError, UsageError
from skyhub.sandbox.base import Sandbox, Snapshot, new_id


@dataclass
class _Entry:
    sandbox: Sandbox
    clean: Snapshot
    born: float = field(default_factory=time.monotonic)
    leases: int = 0


@dataclass
class PoolStats:
    created: int = 0
    leased: int = 0
    restored: int = 0
    replaced: int = 0  # broken, failed to restore, or expired
    create_errors: int = 0
    last_error: str = ""


class Pool:
    """`size` warm sandboxes made with `create(**create_kwargs)`; see the module docstring."""

    def __init__(self, size: int = 8, ttl_s: float = 3600, *, name: str | None = None,
                 create_parallel: int = 4, **create_kwargs: Any) -> None:
        if size < 1:
            raise UsageError(f"Pool size must be >= 1, got {size}")
        if create_parallel < 1:
            raise UsageError(f"create_parallel must be >= 1, got {create_parallel}")
        self.size, self.ttl_s = size, ttl_s
        self.create_parallel = min(int(create_parallel), size)
        self.name = name or new_id("pool")
        self.create_kwargs = {**create_kwargs, "pool": self.name}
        self.stats = PoolStats()
        self._ready: deque[_Entry] = deque()
        self._dirty: deque[_Entry] = deque()
        self._leased: dict[int, _Entry] = {}
        self._creating = 0
        self._creators: set[threading.Thread] = set()
        self._backoff = 0.0  # no creation before this (monotonic) after a failure
        self._cond = threading.Condition()
        self._closed = False
        self._worker = threading.Thread(target=self._maintain, daemon=True,
                                        name=f"skyhub-{self.name}")
        self._worker.start()

    # ------------------------------------------------------------------ public
    @contextlib.contextmanager
    def lease(self) -> Iterator[Sandbox]:
        """A clean sandbox for the duration of the `with` block. An exception inside the
        block that leaves the sandbox unusable gets it replaced, not reused."""
        entry = self._take()
        self.stats.leased += 1
        try:
            yield entry.sandbox
        finally:
            self._give_back(entry)

    def wait_ready(self, timeout: float = 300.0) -> int:
        """Block until `size` sandboxes are ready (or timeout); returns how many are. Useful
        before a benchmark or a training run's first step."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self._ready) < self.size and not self._closed:
                left = deadline - time.monotonic()
                if left <= 0 or (self.stats.create_errors and not self._creating
                                 and not self._dirty and len(self._ready) == 0):
                    break
                self._cond.wait(min(left, 0.5))
            return len(self._ready)

    def close(self) -> None:
        """Remove every sandbox the pool made (ready, being cleaned, and leased)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            entries = [*self._ready, *self._dirty, *self._leased.values()]
            self._ready.clear()
            self._dirty.clear()
            self._leased.clear()
            self._cond.notify_all()
            creators = list(self._creators)
        self._worker.join(timeout=60)
        for t in creators:  # each closes what it made once it sees the pool closed
            t.join(timeout=600)
        if self.create_parallel > 1 and len(entries) > 1:  # removal waits on dockerd too
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(self.create_parallel, "skyhub-pool-close") as ex:
                list(ex.map(lambda e: e.sandbox.close(), entries))
        else:
            for e in entries:
                e.sandbox.close()

    def __enter__(self) -> Pool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __len__(self) -> int:
        with self._cond:
            return len(self._ready) + len(self._dirty) + len(self._leased) + self._creating

    def __repr__(self) -> str:
        return (f"<Pool {self.name} size={self.size} ready={len(self._ready)} "
                f"leased={len(self._leased)}>")

    # ------------------------------------------------------------------ internals
    def _new_entry(self) -> _Entry:
        from skyhub.sandbox.backends import create

        sb = create(**self.create_kwargs)
        try:
            return _Entry(sb, sb.snapshot())
        except BaseException:
            sb.close()
            raise

    def _expired(self, e: _Entry) -> bool:
        return time.monotonic() - e.born > self.ttl_s

    def _take(self) -> _Entry:
        with self._cond:
            if self._closed:
                raise SkyhubError(f"pool {self.name} is closed")
            while self._ready:
                e = self._ready.popleft()
                if e.sandbox.closed or self._expired(e):
                    self._discard_later(e)
                    continue
                self._leased[id(e)] = e
                e.leases += 1
                self._cond.notify_all()  # the worker refills behind us
                return e
        e = self._new_entry()  # nothing ready: make one now rather than wait for cleaning
        with self._cond:
            self.stats.created += 1
            if self._closed:
                e.sandbox.close()
                raise SkyhubError(f"pool {self.name} is closed")
            self._leased[id(e)] = e
            e.leases += 1
        return e

    def _give_back(self, e: _Entry) -> None:
        with self._cond:
            if self._leased.pop(id(e), None) is None or self._closed:
                return  # the pool was closed meanwhile: close() took care of it
            self._dirty.append(e)
            self._cond.notify_all()

    def _discard_later(self, e: _Entry) -> None:
        self.stats.replaced += 1
        threading.Thread(target=e.sandbox.close, daemon=True).start()

    def _may_create(self) -> bool:
        """Whether the worker should start another creation now (under `_cond`)."""
        return (len(self) < self.size and self._creating < self.create_parallel
                and self._backoff <= time.monotonic())

    def _maintain(self) -> None:
        """The background worker: clean returned sandboxes, keep `size` ready (creating up
        to `create_parallel` at once, each on its own thread)."""
        while True:
            with self._cond:
                while not self._closed and not self._dirty and not self._may_create():
                    self._cond.wait(0.5)
                if self._closed:
                    return
                job = self._dirty.popleft() if self._dirty else None
                if job is None:
                    self._creating += 1
                    if self.create_parallel > 1:
                        t = threading.Thread(target=self._create_one, daemon=True,
                                             name=f"skyhub-{self.name}-create")
                        self._creators.add(t)
                        t.start()
                        continue
            if job is not None:
                self._clean(job)
            else:
                self._create_one()

    def _create_one(self) -> None:
        """Make one ready sandbox (`_creating` was counted for it by the worker)."""
        try:
            e = self._new_entry()
        except Exception as err:  # e.g. Docker went away: retry later, lease() reports
            with self._cond:
                self._creating -= 1
                self.stats.create_errors += 1
                self.stats.last_error = f"{type(err).__name__}: {err}"
                self._backoff = time.monotonic() + 2.0
                self._creators.discard(threading.current_thread())
                self._cond.notify_all()
            return
        with self._cond:
            self._creating -= 1
            self._creators.discard(threading.current_thread())
            self._backoff = 0.0
            self.stats.created += 1
            closed = self._closed
            if not closed:
                self._ready.append(e)
            self._cond.notify_all()
        if closed:
            e.sandbox.close()

    def _clean(self, e: _Entry) -> None:
        ok = not e.sandbox.closed and not self._expired(e)
        if ok:
            try:
                e.sandbox.restore(e.clean, kill_processes=True)
                ok = e.sandbox.alive()
            except Exception:
                ok = False
        with self._cond:
            if ok and not self._closed and len(self._ready) < self.size:
                self.stats.restored += 1
                self._ready.append(e)
                self._cond.notify_all()
                return
        if not ok:
            self.stats.replaced += 1
        e.sandbox.close()
