"""Creating many sandboxes: a Pool fills with several creations in flight,
and a process-wide limiter spaces and caps Docker container creations. No wall-clock
assertions: a fake clock for the token bucket, barriers and events for what is in flight."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import skyhub.sandbox
from skyhub.errors import UsageError
from skyhub.sandbox import Pool, ratelimit
from skyhub.sandbox.ratelimit import CreationLimiter, TokenBucket

sys.path.insert(0, str(Path(__file__).parents[2] / "support"))
from polling import eventually


class FakeClock:
    """A clock that moves only when something sleeps on it."""

    def __init__(self) -> None:
        self.now, self.sleeps = 0.0, []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_the_token_bucket_lets_a_burst_through_then_spaces_creations() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=4.0, burst=3, clock=clock, sleep=clock.sleep)
    assert [bucket.take() for _ in range(3)] == [0.0, 0.0, 0.0]  # the burst: no wait
    assert clock.sleeps == []
    for _ in range(4):
        bucket.take()
    assert clock.sleeps == pytest.approx([0.25] * 4)  # then one every 1/rate seconds
    clock.now += 10  # idle: tokens come back, but never more than the burst
    for _ in range(3):
        bucket.take()
    assert len(clock.sleeps) == 4
    bucket.take()
    assert len(clock.sleeps) == 5


def test_a_rate_of_zero_means_no_rate_limit_and_bad_settings_say_so() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=0, burst=1, clock=clock, sleep=clock.sleep)
    for _ in range(100):
        bucket.take()
    assert clock.sleeps == []
    with pytest.raises(UsageError, match="burst >= 1"):
        TokenBucket(rate=1, burst=0)
    with pytest.raises(UsageError, match="concurrency"):
        CreationLimiter(concurrency=0)


def test_the_limiter_caps_creations_in_flight() -> None:
    limiter = CreationLimiter(rate=0, burst=1, concurrency=2)
    release = threading.Event()
    entered: list[int] = []

    def create(i: int) -> None:
        with limiter.slot():
            entered.append(i)
            release.wait(60)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    assert eventually(lambda: len(entered) == 2)
    assert limiter.stats.in_flight == 2  # the other three wait for a slot
    release.set()
    for t in threads:
        t.join(60)
    assert sorted(entered) == list(range(5))
    assert limiter.stats.max_in_flight == 2 and limiter.stats.started == 5
    assert limiter.stats.in_flight == 0


@pytest.fixture
def gated_create(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[int], None]]:
    """Make the pool's creations wait at a barrier of `parties`: it only opens when that many
    are in flight at once, so a pool creating one at a time breaks it (BrokenBarrierError)."""
    real = skyhub.sandbox.create

    def gate(parties: int) -> None:
        barrier = threading.Barrier(parties, timeout=120)
        calls = [0]
        lock = threading.Lock()

        def create(**kwargs: Any) -> skyhub.sandbox.Sandbox:
            with lock:
                calls[0] += 1
                first = calls[0] <= parties
            if first:
                barrier.wait()
            return real(**kwargs)

        monkeypatch.setattr(skyhub.sandbox, "create", create)

    yield gate


def test_a_pool_creates_in_parallel_and_hands_out_distinct_sandboxes(
        bwrap: str, gated_create: Callable[[int], None]) -> None:
    gated_create(3)  # the first three creations meet at a barrier: all in flight together
    with Pool(size=6, create_parallel=3, backend="local", memory_mb=256) as pool:
        assert pool.wait_ready(timeout=120) == 6
        assert pool.stats.create_errors == 0, pool.stats.last_error
        with contextlib.ExitStack() as stack:
            leased = [stack.enter_context(pool.lease()) for _ in range(6)]
            assert len({sb.id for sb in leased}) == 6
            assert [sb.exec("echo ok").stdout for sb in leased] == ["ok\n"] * 6
    assert all(sb.closed for sb in leased)


def test_create_parallel_must_be_positive() -> None:
    with pytest.raises(ValueError, match="create_parallel"):
        Pool(size=2, create_parallel=0, backend="local")


@pytest.mark.docker
def test_docker_creations_in_parallel_go_through_the_process_limiter(
        docker_daemon: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import docker

    limiter = ratelimit.configure(rate=50, burst=2, concurrency=2)
    monkeypatch.setattr(ratelimit, "_limiter", limiter)  # the old one back afterwards
    with Pool(size=6, create_parallel=4, backend="docker") as pool:
        assert pool.wait_ready(timeout=300) == 6, pool.stats.last_error
        ids = {e.sandbox.id for e in pool._ready}
        names = {e.sandbox.name for e in pool._ready}
    assert len(ids) == 6
    assert limiter.stats.started >= 6  # every container creation asked the limiter
    assert limiter.stats.max_in_flight <= 2  # never more in flight than it allows
    client = docker.from_env()
    left = [c.name for c in client.containers.list(all=True, ignore_removed=True, filters={
        "label": f"skyhub.pool={pool.name}"})]
    assert not left and not names & set(left)
