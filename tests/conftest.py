"""Session-wide real infrastructure: one Kafka and one Postgres for the whole run.

Each test gets a fresh database cloned from a migrated template, and a topic prefix of its
own, so tests never see each other's rows or messages.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from pacer_common.db.migrate import migrate

TEMPLATE = "pacer_template"


@pytest.fixture(scope="session")
def infra_env() -> Iterator[object]:
    from pacer_dev import infra

    state = Path(os.environ.get("PACER_TEST_STATE_DIR", ".pacer/test"))
    inf = infra.up(state)
    admin = _with_db(inf.database_url, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
        conn.execute(f"CREATE DATABASE {TEMPLATE}")
    migrate(_with_db(inf.database_url, TEMPLATE))
    yield inf
    infra.down(state)


def _with_db(url: str, name: str) -> str:
    head, _, _ = url.rpartition("/")
    return f"{head}/{name}"


@pytest.fixture
def database_url(infra_env: object) -> Iterator[str]:
    """A fresh, migrated database for this test; dropped afterwards."""
    base = infra_env.database_url  # type: ignore[attr-defined]
    name = f"t_{uuid.uuid4().hex[:16]}"
    admin = _with_db(base, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    yield _with_db(base, name)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def kafka_config(infra_env: object) -> dict[str, str]:
    return {"bootstrap.servers": infra_env.kafka_bootstrap}  # type: ignore[attr-defined]


@pytest.fixture
def topic_prefix() -> str:
    return f"t{uuid.uuid4().hex[:12]}"
