"""Where local infrastructure keeps its data, and the `infra.json` record of what runs.

The record is what makes `up` idempotent across processes: it pins the ports (so a
restarted server comes back where clients expect it) and the pids (so `down` stops only
what we started). Servers given through environment variables are never recorded.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

STATE_DIR_ENV = "PACER_STATE_DIR"
KAFKA_ENV = "PACER_KAFKA_BOOTSTRAP_SERVERS"
DATABASE_ENV = "PACER_DATABASE_URL"

STATE_FILE = "infra.json"
LOCK_FILE = ".lock"
FORMAT_VERSION = 1


class InfraError(RuntimeError):
    """Local infrastructure could not be brought to the requested state."""


@dataclass
class KafkaRecord:
    """A KRaft broker+controller we started; ports and cluster id are fixed at creation."""

    port: int
    controller_port: int
    cluster_id: str
    pid: int | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"


@dataclass
class PostgresRecord:
    """A Postgres server we initialised; the port is fixed at creation."""

    port: int
    pid: int | None = None

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"


@dataclass
class InfraState:
    """Contents of `infra.json`: the servers this state dir owns (None = not ours)."""

    kafka: KafkaRecord | None = None
    postgres: PostgresRecord | None = None


def resolve_state_dir(state_dir: Path | None = None) -> Path:
    """The state dir: explicit argument, else `$PACER_STATE_DIR`, else `./.pacer`.

    The default is relative to the working directory because the Makefile and the test
    suite run from the repository root; it is made absolute so records stay valid.
    """
    if state_dir is None:
        env = os.environ.get(STATE_DIR_ENV)
        state_dir = Path(env) if env else Path.cwd() / ".pacer"
    return state_dir.expanduser().resolve()


def state_file(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def lock_file(state_dir: Path) -> Path:
    return state_dir / LOCK_FILE


def owned_files(state_dir: Path) -> tuple[Path, ...]:
    """The files this package keeps at the top of a state dir (for `destroy`)."""
    return state_file(state_dir), _tmp_file(state_dir), lock_file(state_dir)


def _tmp_file(state_dir: Path) -> Path:
    return state_dir / f"{STATE_FILE}.tmp"


def load_state(state_dir: Path) -> InfraState:
    """Read `infra.json`; a missing file means nothing has been started here yet."""
    path = state_file(state_dir)
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return InfraState()
    except (OSError, ValueError) as exc:
        raise InfraError(f"unreadable state file {path}: {exc}") from exc
    if raw.get("version") != FORMAT_VERSION:
        raise InfraError(
            f"{path} has format {raw.get('version')!r}, expected {FORMAT_VERSION}; "
            "run `pacer-infra destroy` to start over"
        )
    kafka = raw.get("kafka")
    postgres = raw.get("postgres")
    try:
        return InfraState(
            kafka=_kafka_from_json(kafka) if kafka else None,
            postgres=_postgres_from_json(postgres) if postgres else None,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise InfraError(f"malformed state file {path}: {exc!r}") from exc


def save_state(state_dir: Path, state: InfraState) -> None:
    """Write `infra.json` atomically, so a lock-free reader never sees half a file.

    Callers hold the state dir's lock, so the fixed temporary name is never shared.

    Derived URLs are written too, for humans and shell scripts; they are ignored on read.
    """
    state_dir.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"version": FORMAT_VERSION, "kafka": None, "postgres": None}
    if state.kafka is not None:
        doc["kafka"] = {**asdict(state.kafka), "bootstrap": state.kafka.bootstrap}
    if state.postgres is not None:
        doc["postgres"] = {**asdict(state.postgres), "url": state.postgres.url}
    tmp = _tmp_file(state_dir)
    tmp.write_text(json.dumps(doc, indent=2) + "\n")
    os.replace(tmp, state_file(state_dir))


def _kafka_from_json(raw: dict[str, Any]) -> KafkaRecord:
    return KafkaRecord(
        port=int(raw["port"]),
        controller_port=int(raw["controller_port"]),
        cluster_id=str(raw["cluster_id"]),
        pid=raw.get("pid"),
    )


def _postgres_from_json(raw: dict[str, Any]) -> PostgresRecord:
    return PostgresRecord(port=int(raw["port"]), pid=raw.get("pid"))
