"""Fixtures for the SQL family: the bundled Spider subset, and a real PostgreSQL server.

`bash scripts/services.sh` starts PostgreSQL on 127.0.0.1:55432 (user postgres, trust auth);
SKYHUB_POSTGRES_DSN overrides where it is. Without a server, postgres tests skip with the
reason; CI sets SKYHUB_REQUIRE_POSTGRES=1 so that a missing server fails instead.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

DEFAULT_DSN = "host=127.0.0.1 port=55432 user=postgres dbname=postgres"


@pytest.fixture(scope="session")
def postgres_dsn() -> str:
    dsn = os.environ.get("SKYHUB_POSTGRES_DSN", DEFAULT_DSN)
    try:
        import psycopg

        with psycopg.connect(dsn, connect_timeout=3) as con:
            con.execute("SELECT 1")
    except Exception as e:
        if os.environ.get("SKYHUB_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"PostgreSQL is required here but {dsn!r} does not answer: {e}")
        pytest.skip(f"no PostgreSQL at {dsn!r} ({e}); bash scripts/services.sh starts one")
    return dsn


@pytest.fixture
def admin(postgres_dsn: str) -> Iterator[Any]:
    """A superuser connection (autocommit) to the server, to look at what an engine left."""
    import psycopg

    with psycopg.connect(postgres_dsn, autocommit=True) as con:
        yield con
