"""Real local Kafka and Postgres for development, demos and tests, without Docker.

`up()` is idempotent and safe to call from parallel processes: it reuses servers that
are alive, restarts dead ones on their recorded ports and data, and creates missing
ones. `PACER_KAFKA_BOOTSTRAP_SERVERS` / `PACER_DATABASE_URL` point at existing servers
instead, which are then never started, stopped or restarted from here. The stop/start
and restart functions keep ports and data so chaos tests can take a server away and
bring it back where clients expect it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pacer_dev.infra import kafka, postgres, process
from pacer_dev.infra.state import (
    DATABASE_ENV,
    KAFKA_ENV,
    InfraError,
    InfraState,
    KafkaRecord,
    PostgresRecord,
    load_state,
    lock_file,
    owned_files,
    resolve_state_dir,
    save_state,
    state_file,
)

__all__ = [
    "ComponentStatus",
    "Infra",
    "InfraError",
    "current",
    "destroy",
    "down",
    "prune_kafka",
    "restart_kafka",
    "restart_postgres",
    "start_kafka",
    "start_postgres",
    "status",
    "stop_kafka",
    "stop_postgres",
    "up",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Infra:
    """Where the running servers are."""

    kafka_bootstrap: str
    database_url: str
    state_dir: Path

    def env(self) -> dict[str, str]:
        """The environment variables that point Pacer's services at these servers."""
        return {KAFKA_ENV: self.kafka_bootstrap, DATABASE_ENV: self.database_url}


@dataclass(frozen=True)
class ComponentStatus:
    """One server as `status` sees it; `address` is a bootstrap string or database URL."""

    name: Literal["kafka", "postgres"]
    state: Literal["running", "stopped", "external", "absent"]
    address: str | None
    pid: int | None


def up(state_dir: Path | None = None) -> Infra:
    """Ensure Kafka and Postgres run (reusing, restarting or creating them) and return them."""
    directory = resolve_state_dir(state_dir)
    return Infra(kafka_bootstrap=up_kafka(directory), database_url=up_postgres(directory), state_dir=directory)


def up_kafka(state_dir: Path | None = None) -> str:
    """Ensure the broker alone runs (reused, restarted or created); its bootstrap servers."""
    directory = resolve_state_dir(state_dir)
    with _locked(directory, create=True) as state:
        return os.environ.get(KAFKA_ENV) or _ensure_kafka(directory, state)


def up_postgres(state_dir: Path | None = None) -> str:
    """Ensure Postgres alone runs (reused, restarted or created); its URL. A server of its own
    next to a shared broker: a test worker's, say, which must not share the server's
    transaction horizon with another worker's tests."""
    directory = resolve_state_dir(state_dir)
    with _locked(directory, create=True) as state:
        return os.environ.get(DATABASE_ENV) or _ensure_postgres(directory, state)


def down(state_dir: Path | None = None) -> None:
    """Stop the servers this state dir started (never external ones); data is kept."""
    directory = resolve_state_dir(state_dir)
    if not state_file(directory).exists():
        return
    with _locked(directory) as state:
        if state.kafka is not None:
            kafka.stop(directory, state.kafka)
        if state.postgres is not None:
            postgres.stop(directory, state.postgres)


def destroy(state_dir: Path | None = None) -> None:
    """Stop the servers and delete their data, logs and record.

    Only what this module creates is deleted, and the directory itself only if that
    leaves it empty: another state dir may be nested inside (`.pacer/<name>`).
    """
    directory = resolve_state_dir(state_dir)
    if not directory.exists():
        return
    if not state_file(directory).exists():
        if any(directory.iterdir()):
            raise InfraError(f"refusing to delete from {directory}: it has no infra.json, so it is not a state dir")
        directory.rmdir()
        return
    down(directory)
    for path in (kafka.home_dir(directory), postgres.home_dir(directory), *owned_files(directory)):
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        directory.rmdir()
    log.info("deleted local Kafka and Postgres data in %s", directory)


def prune_kafka(state_dir: Path | None = None, max_partitions: int = 2000) -> bool:
    """Empty the local broker when it holds more than ``max_partitions`` partitions: stop it,
    delete its data (every topic), start it afresh on the same ports. For state that is
    disposable between runs, such as a test session's: its topics would otherwise pile up
    run after run (twelve thousand partitions after a few dozen, until the broker's heap
    gave out mid-run). A no-op for an external cluster or a state dir with no broker yet.
    True if it emptied the broker."""
    if os.environ.get(KAFKA_ENV):
        return False
    directory = resolve_state_dir(state_dir)
    data = kafka.home_dir(directory) / "data"
    if not state_file(directory).exists() or not data.is_dir():
        return False
    partitions = sum(1 for p in data.iterdir() if p.is_dir() and not p.name.startswith("__"))
    if partitions <= max_partitions:
        return False
    with _locked(directory) as state:
        if state.kafka is None:
            return False
        kafka.stop(directory, state.kafka)
        shutil.rmtree(data)
        _ensure_kafka(directory, state)
    log.info("emptied the local Kafka in %s (it held %d partitions)", directory, partitions)
    return True


def stop_kafka(state_dir: Path | None = None) -> None:
    """Stop the local broker (clean shutdown) but keep its ports and data for `start_kafka`."""
    with _component(state_dir, "kafka") as (directory, state):
        assert state.kafka is not None
        kafka.stop(directory, state.kafka)


def start_kafka(state_dir: Path | None = None) -> None:
    """Start the local broker again on its recorded ports; a no-op if it is running."""
    with _component(state_dir, "kafka") as (directory, state):
        _ensure_kafka(directory, state)


def restart_kafka(state_dir: Path | None = None) -> None:
    """Stop and start the local broker: same ports, same data, same cluster id."""
    with _component(state_dir, "kafka") as (directory, state):
        assert state.kafka is not None
        kafka.stop(directory, state.kafka)
        kafka.start(directory, state.kafka)


def stop_postgres(state_dir: Path | None = None) -> None:
    """Stop the local Postgres (fast shutdown) but keep its port and data for `start_postgres`."""
    with _component(state_dir, "postgres") as (directory, state):
        assert state.postgres is not None
        postgres.stop(directory, state.postgres)


def start_postgres(state_dir: Path | None = None) -> None:
    """Start the local Postgres again on its recorded port; a no-op if it is running."""
    with _component(state_dir, "postgres") as (directory, state):
        _ensure_postgres(directory, state)


def restart_postgres(state_dir: Path | None = None) -> None:
    """Stop and start the local Postgres: same port, same data."""
    with _component(state_dir, "postgres") as (directory, state):
        assert state.postgres is not None
        postgres.stop(directory, state.postgres)
        postgres.start(directory, state.postgres)


def status(state_dir: Path | None = None) -> list[ComponentStatus]:
    """What runs where, from the state file and cheap liveness checks (no locking)."""
    directory = resolve_state_dir(state_dir)
    state = load_state(directory)
    return [_kafka_status(directory, state.kafka), _postgres_status(directory, state.postgres)]


def current(state_dir: Path | None = None) -> Infra | None:
    """The running setup, or None if any server is not up (nothing is started)."""
    found = {item.name: item for item in status(state_dir)}
    kafka_status, postgres_status = found["kafka"], found["postgres"]
    if kafka_status.state not in ("running", "external") or postgres_status.state not in ("running", "external"):
        return None
    assert kafka_status.address is not None and postgres_status.address is not None
    return Infra(
        kafka_bootstrap=kafka_status.address,
        database_url=postgres_status.address,
        state_dir=resolve_state_dir(state_dir),
    )


def _ensure_kafka(directory: Path, state: InfraState) -> str:
    if state.kafka is None:
        state.kafka = kafka.create(directory)
        save_state(directory, state)  # record the ports before anything can fail
    record = state.kafka
    if kafka.is_running(directory, record):
        kafka.wait_ready(directory, record, timeout=kafka.START_TIMEOUT_S)
        log.info("reusing Kafka (pid %d) on %s", record.pid, record.bootstrap)
    else:
        kafka.start(directory, record)
        save_state(directory, state)
    return record.bootstrap


def _ensure_postgres(directory: Path, state: InfraState) -> str:
    if state.postgres is None:
        state.postgres = postgres.create(directory)
        save_state(directory, state)
    record = state.postgres
    if postgres.is_running(directory, record):
        postgres.wait_ready(record, timeout=postgres.START_TIMEOUT_S)
        record.pid = postgres.postmaster_pid(directory)
        log.info("reusing Postgres (pid %s) on 127.0.0.1:%d", record.pid, record.port)
    else:
        postgres.start(directory, record)
        save_state(directory, state)
    return record.url


def _kafka_status(directory: Path, record: KafkaRecord | None) -> ComponentStatus:
    if external := os.environ.get(KAFKA_ENV):
        return ComponentStatus("kafka", "external", external, None)
    if record is None:
        return ComponentStatus("kafka", "absent", None, None)
    if kafka.is_running(directory, record) and process.tcp_accepts(record.port):
        return ComponentStatus("kafka", "running", record.bootstrap, record.pid)
    return ComponentStatus("kafka", "stopped", record.bootstrap, None)


def _postgres_status(directory: Path, record: PostgresRecord | None) -> ComponentStatus:
    if external := os.environ.get(DATABASE_ENV):
        return ComponentStatus("postgres", "external", external, None)
    if record is None:
        return ComponentStatus("postgres", "absent", None, None)
    if postgres.is_running(directory, record) and process.tcp_accepts(record.port):
        return ComponentStatus("postgres", "running", record.url, postgres.postmaster_pid(directory))
    return ComponentStatus("postgres", "stopped", record.url, None)


@contextlib.contextmanager
def _locked(directory: Path, *, create: bool = False) -> Iterator[InfraState]:
    """Hold the state dir's lock, yield its state, and save it however the block ends.

    Saving on failure too matters: a server started before the failure must stay
    recorded, or a later `down` could not stop it.
    """
    if create:
        directory.mkdir(parents=True, exist_ok=True)
    with process.file_lock(lock_file(directory)):
        if create and not state_file(directory).exists():
            save_state(directory, InfraState())  # marks the dir as ours, see destroy()
        state = load_state(directory)
        try:
            yield state
        finally:
            save_state(directory, state)


@contextlib.contextmanager
def _component(state_dir: Path | None, name: Literal["kafka", "postgres"]) -> Iterator[tuple[Path, InfraState]]:
    """Lock the state of a server we own, refusing external or never-created ones."""
    env = KAFKA_ENV if name == "kafka" else DATABASE_ENV
    if os.environ.get(env):
        raise InfraError(f"{name} is external ({env} is set); it is not managed by pacer-infra")
    directory = resolve_state_dir(state_dir)
    if not state_file(directory).exists():
        raise InfraError(f"no local infrastructure in {directory}; run `pacer-infra up` first")
    with _locked(directory) as state:
        if getattr(state, name) is None:
            raise InfraError(f"{name} was never started in {directory}; run `pacer-infra up` first")
        yield directory, state
