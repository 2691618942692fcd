"""Process-wide limits on how fast sandbox containers are created, so a burst cannot swamp
the Docker daemon.

A Pool of 500 filling with several threads, or a VectorEnv resetting hundreds of episodes at
once, would otherwise send hundreds of create/start calls to dockerd together; each one
forks runc and a containerd shim, and on a small host the daemon's API then answers
slowly to everyone (an exec, a health check) and creations time out. Every container
creation (`DockerSandbox`, including the replacement a restore makes) goes through one
`CreationLimiter` per process, which holds two limits:

- a token bucket: at most `rate` creations a second on average, `burst` of them back to back
  (`rate=0`: no rate limit);
- a cap on creations in flight (`concurrency`): beyond it a creator waits for one to finish,
  whatever the rate, so a daemon that slows down under load is not given more at once.

Defaults: `SKYHUB_DOCKER_CREATE_RATE=20` per second, `SKYHUB_DOCKER_CREATE_BURST=8` and
`SKYHUB_DOCKER_CREATE_CONCURRENCY=8`. On the 2-core CI host one creation takes ~0.2-0.3 s
alone and is CPU-bound there (runc, the shim, the guest's start): 8 in flight created 500 at
4.8/s against 4.7/s one at a time (`benchmarks/sandbox_scale.py`), so there the limits only
keep a burst from queueing hundreds of calls in dockerd; hosts with more cores gain from
the parallelism, and the bucket bounds their bursts. Set them in the environment, or call
`configure()` before creating sandboxes. Parallel creation itself is the caller's
(`Pool(create_parallel=k)`); the limiter only spaces and caps it.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from skyhub.errors import UsageError

ENV_RATE, ENV_BURST, ENV_CONCURRENCY = ("SKYHUB_DOCKER_CREATE_RATE", "SKYHUB_DOCKER_CREATE_BURST",
                                        "SKYHUB_DOCKER_CREATE_CONCURRENCY")
DEFAULT_RATE, DEFAULT_BURST, DEFAULT_CONCURRENCY = 20.0, 8, 8


class TokenBucket:
    """`rate` tokens a second, at most `burst` saved up; `take()` blocks for one. Thread-safe;
    waiters are served in no particular order (each re-checks after its sleep)."""

    def __init__(self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if rate < 0 or burst < 1:
            raise UsageError(f"a token bucket needs rate >= 0 and burst >= 1, got rate={rate}, "
                             f"burst={burst}")
        self.rate, self.burst = float(rate), int(burst)
        self._clock, self._sleep = clock, sleep
        self._tokens, self._last = float(burst), clock()
        self._lock = threading.Lock()

    def take(self) -> float:
        """Wait for a token; returns the seconds waited."""
        if self.rate == 0:
            return 0.0
        waited = 0.0
        while True:
            with self._lock:
                now = self._clock()
                self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
                self._last = now
                if self._tokens >= 1:
                    self._tokens -= 1
                    return waited
                wait = (1 - self._tokens) / self.rate
            self._sleep(wait)
            waited += wait


@dataclass
class LimiterStats:
    started: int = 0        # creations let through
    in_flight: int = 0
    max_in_flight: int = 0
    waited_s: float = 0.0   # time spent waiting for a token or a slot, all creators together


class CreationLimiter:
    """A token bucket and a cap on creations in flight (see the module docstring)."""

    def __init__(self, rate: float = DEFAULT_RATE, burst: int = DEFAULT_BURST,
                 concurrency: int = DEFAULT_CONCURRENCY, *,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        if concurrency < 1:
            raise UsageError(f"concurrency must be >= 1, got {concurrency}")
        self.bucket = TokenBucket(rate, burst, clock=clock, sleep=sleep)
        self.concurrency = int(concurrency)
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._clock = clock
        self._lock = threading.Lock()
        self.stats = LimiterStats()

    @contextlib.contextmanager
    def slot(self) -> Iterator[None]:
        """Hold one creation's place for the `with` block: a token first, then a slot."""
        t0 = self._clock()
        self.bucket.take()
        self._slots.acquire()
        with self._lock:
            self.stats.waited_s += self._clock() - t0
            self.stats.started += 1
            self.stats.in_flight += 1
            self.stats.max_in_flight = max(self.stats.max_in_flight, self.stats.in_flight)
        try:
            yield
        finally:
            with self._lock:
                self.stats.in_flight -= 1
            self._slots.release()


_limiter: CreationLimiter | None = None
_limiter_lock = threading.Lock()


def _env_number(name: str, default: float, kind: type) -> float:
    raw = os.environ.get(name)
    if raw in (None, ""):
        return default
    try:
        return kind(raw)
    except ValueError:
        raise UsageError(f"${name} must be a number, not {raw!r}") from None


def docker_limiter() -> CreationLimiter:
    """The process's limiter for Docker container creation (made from the environment the
    first time)."""
    global _limiter
    with _limiter_lock:
        if _limiter is None:
            _limiter = CreationLimiter(_env_number(ENV_RATE, DEFAULT_RATE, float),
                                       int(_env_number(ENV_BURST, DEFAULT_BURST, int)),
                                       int(_env_number(ENV_CONCURRENCY, DEFAULT_CONCURRENCY,
                                                       int)))
        return _limiter


def configure(rate: float | None = None, burst: int | None = None,
              concurrency: int | None = None) -> CreationLimiter:
    """Replace the process's Docker creation limiter (creations already waiting keep the old
    one); unset arguments keep their current values. Returns the new limiter."""
    global _limiter
    old = docker_limiter()
    new = CreationLimiter(old.bucket.rate if rate is None else rate,
                          old.bucket.burst if burst is None else burst,
                          old.concurrency if concurrency is None else concurrency)
    with _limiter_lock:
        _limiter = new
    return new


def container_creation() -> contextlib.AbstractContextManager[None]:
    """`with container_creation(): ...create and start a container...`"""
    return docker_limiter().slot()


__all__ = ["CreationLimiter", "LimiterStats", "TokenBucket", "configure", "container_creation",
           "docker_limiter"]
