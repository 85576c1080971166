"""Session-wide real infrastructure: one Kafka for the whole run, one Postgres per worker.

Each test gets a fresh database cloned from a migrated template, and a topic prefix of its
own, so tests never see each other's rows or messages. ``make test`` runs the suite on
several pytest-xdist workers. They share the broker: the first worker to need it starts it
(under a lock, once per run) and the run's own process stops it at the end. Each worker has
a Postgres server of its own, because a server's transaction horizon is shared by all its
databases: a transaction one test holds open would keep another worker's tail reads (which
read only below the oldest running transaction) from seeing what its test just committed.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from pacer_common.db.migrate import migrate
from pacer_common.kafka import CLIENT_ERRORS, CLIENT_LOG
from pacer_common.logs import RepeatsHeldBack
from pacer_dev.infra import Infra

WORKER = os.environ.get("PYTEST_XDIST_WORKER", "main")  # set by xdist in its workers before this import
TEMPLATE = f"pacer_template_{WORKER}"  # per worker: a server given by PACER_DATABASE_URL is shared
RUN_ENV = "PACER_TEST_RUN"  # one id per `pytest` run, inherited by its xdist workers


def _state_dir() -> Path:
    return Path(os.environ.get("PACER_TEST_STATE_DIR", ".pacer/test"))


def _marker(state: Path) -> Path:
    """Names the run that last prepared the broker in ``state``."""
    return state / "test-run"


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the run's own process, not one of its workers
        os.environ[RUN_ENV] = uuid.uuid4().hex


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the broker once every worker is done, if this run started it."""
    if hasattr(session.config, "workerinput"):
        return
    from pacer_dev import infra

    state = _state_dir()
    marker = _marker(state)
    if marker.exists() and marker.read_text() == os.environ.get(RUN_ENV):
        infra.down(state)


def _shared_kafka(state: Path) -> str:
    from pacer_dev import infra
    from pacer_dev.infra.process import file_lock

    run = os.environ[RUN_ENV]
    with file_lock(state.with_name(f"{state.name}.session.lock")):
        if not (_marker(state).exists() and _marker(state).read_text() == run):
            infra.prune_kafka(state)  # the topics of earlier runs are garbage: never let them pile up
        bootstrap = infra.up_kafka(state)
        _marker(state).write_text(run)
        return bootstrap


@pytest.fixture(scope="session")
def infra_env() -> Iterator[Infra]:
    from pacer_dev import infra

    state = _state_dir()
    bootstrap = _shared_kafka(state)
    own = state / f"postgres-{WORKER}"
    url = infra.up_postgres(own)
    try:
        admin = with_db(url, "postgres")
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {TEMPLATE} WITH (FORCE)")
            conn.execute(f"CREATE DATABASE {TEMPLATE}")
        migrate(with_db(url, TEMPLATE))
        yield Infra(bootstrap, url, state)
    finally:
        infra.down(own)


def with_db(url: str, name: str) -> str:
    head, _, _ = url.rpartition("/")
    return f"{head}/{name}"


@contextlib.contextmanager
def cloned_database(infra_env: Infra, prefix: str = "t") -> Iterator[str]:
    """A fresh database cloned from the migrated template; dropped afterwards."""
    base = infra_env.database_url
    name = f"{prefix}_{uuid.uuid4().hex[:16]}"
    admin = with_db(base, "postgres")
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE {TEMPLATE}")
    try:
        yield with_db(base, name)
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@contextlib.contextmanager
def stack_on(infra_env: Any, state: Path, topic_prefix: str, env_extra: dict[str, str]) -> Iterator[Any]:
    """A ``pacer_dev.stack.Stack`` on a database of its own and the session's Kafka, topics
    made (``PACER_KAFKA_ITEM_COMMAND_PARTITIONS`` in ``env_extra`` sets the lane topics'
    partitions); the caller starts the gateway and services. Everything is stopped and
    dropped after."""
    from pacer_dev.infra import Infra
    from pacer_dev.stack import Stack, prepare

    with cloned_database(infra_env, "stack") as url:
        st = Stack(state, Infra(infra_env.kafka_bootstrap, url, state), topic_prefix=topic_prefix,
                   env_extra=env_extra)
        prepare(url, {"bootstrap.servers": infra_env.kafka_bootstrap}, topic_prefix,
                int(env_extra.get("PACER_KAFKA_ITEM_COMMAND_PARTITIONS", 16)))
        try:
            yield st
        finally:
            st.dispose()


@pytest.fixture
def database_url(infra_env: Infra) -> Iterator[str]:
    """A fresh, migrated database for this test; dropped afterwards."""
    with cloned_database(infra_env) as url:
        yield url


@pytest.fixture
def kafka_config(infra_env: Infra) -> dict[str, str]:
    return {"bootstrap.servers": infra_env.kafka_bootstrap}


@pytest.fixture
def topic_prefix(kafka_config: dict[str, str]) -> Iterator[str]:
    """A prefix of this test's own; its topics (``<prefix>.…``) are deleted afterwards."""
    from pacer_dev.stack import drop_topics_or_warn

    prefix = f"t{uuid.uuid4().hex[:12]}"
    yield prefix
    drop_topics_or_warn(kafka_config, prefix)


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """A fake gateway of the module's own, as a subprocess on a free loopback port."""
    from pacer_dev.fakegateway.process import start_fake_gateway, stop

    url, proc = start_fake_gateway()
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture(autouse=True)
def _no_log_line_held_back() -> None:
    """Each test's log lines are its own: none is held back as a repeat of another test's."""
    for logger in (CLIENT_LOG, CLIENT_ERRORS):
        for f in logger.filters:
            if isinstance(f, RepeatsHeldBack):
                f.forget()

