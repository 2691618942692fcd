"""Pool: warm sandboxes handed out clean, broken and expired ones replaced, nothing leaked."""

from __future__ import annotations

import pytest

from skyhub.errors import SkyhubError
from skyhub.sandbox import Pool


@pytest.fixture
def local_pool_kwargs(bwrap: str) -> dict[str, object]:
    return {"backend": "local", "memory_mb": 512}


def test_returned_sandbox_is_reused_clean(local_pool_kwargs: dict[str, object]) -> None:
    with Pool(size=1, **local_pool_kwargs) as pool:
        assert pool.wait_ready(timeout=60) == 1
        with pool.lease() as sb:
            first = sb.id
            sb.write_file("secret.txt", "from the last user")
            sb.exec("mkdir -p build && touch build/out.o")
            sb.exec("sleep 300 >/dev/null 2>&1 &")
        pool.wait_ready(timeout=60)
        with pool.lease() as sb:
            assert sb.id == first, "the pool should have reused the cleaned sandbox"
            assert sb.exec("ls -A").stdout.strip() == ""
            assert sb.exec("pgrep -x sleep || true").stdout.strip() == ""
        assert pool.stats.restored >= 1


def test_broken_sandbox_is_replaced_not_reused(local_pool_kwargs: dict[str, object]) -> None:
    with Pool(size=1, **local_pool_kwargs) as pool:
        pool.wait_ready(timeout=60)
        with pool.lease() as sb:
            broken = sb.id
            sb.close()  # as if its container died
        pool.wait_ready(timeout=60)
        with pool.lease() as sb:
            assert sb.id != broken and sb.exec("echo ok").stdout == "ok\n"
        assert pool.stats.replaced >= 1


def test_expired_sandboxes_are_replaced(local_pool_kwargs: dict[str, object]) -> None:
    with Pool(size=1, ttl_s=0.0, **local_pool_kwargs) as pool:
        seen = set()
        for _ in range(3):
            with pool.lease() as sb:
                seen.add(sb.id)
        assert len(seen) == 3


def test_lease_with_nothing_ready_creates_one(local_pool_kwargs: dict[str, object]) -> None:
    with Pool(size=1, **local_pool_kwargs) as pool, pool.lease() as a, pool.lease() as b:
        assert a.id != b.id
        assert a.exec("echo a").stdout == "a\n" and b.exec("echo b").stdout == "b\n"


def test_close_removes_every_sandbox_including_leased(
        local_pool_kwargs: dict[str, object]) -> None:
    from skyhub.sandbox import local

    pool = Pool(size=2, **local_pool_kwargs)
    pool.wait_ready(timeout=60)
    cm = pool.lease()
    leased = cm.__enter__()
    pool.close()
    assert leased.closed
    assert not [s for s in local.list_sandboxes() if s.get("pool") == pool.name]
    with pytest.raises(SkyhubError, match="closed"), pool.lease():
        pass
    cm.__exit__(None, None, None)  # returning after close is harmless
    pool.close()


def test_pool_size_must_be_positive() -> None:
    with pytest.raises(ValueError, match="size"):
        Pool(size=0, backend="local")


@pytest.mark.docker
def test_docker_pool_hands_out_clean_containers(docker_daemon: None) -> None:
    with Pool(size=1, backend="docker", memory_mb=256) as pool:
        pool.wait_ready(timeout=120)
        with pool.lease() as sb:
            sb.write_file("left.txt", "x")
            first = sb.id
        pool.wait_ready(timeout=120)
        with pool.lease() as sb:
            assert sb.id == first
            assert sb.exec("ls -A").stdout.strip() == ""
