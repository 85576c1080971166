"""Shared set-up for the benchmarks: real Kafka and Postgres, seeded jobs, measurement."""

from __future__ import annotations

import json
import os
import time
import urllib.request
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.ids import Guid, IdemKey, ItemId, JobId, ToId, new_item_ids
from pacer_common.kafka import make_producer, produce_all
from pacer_dev import infra
from pacer_dev.infra import Infra
from pacer_dev.stack import Stack, create_database, drop_database, prepare
from pacer_reconciler.domain.retention import PERIOD_SET

CORES = os.cpu_count() or 1


def env_int(name: str, default: int) -> int:
    return int(os.environ.get(name, default))


def state_dir() -> Path:
    """The benchmarks' own Kafka and Postgres, and their stacks' logs (``<state>/runs``)."""
    return Path(os.environ.get("PACER_STATE_DIR", ".pacer")) / "bench"


class PostgresLog:
    """The deadlocks Postgres broke during each scenario, from the lines its log gained
    meanwhile (the benchmarks' own server; none is read where ``PACER_DATABASE_URL`` names
    another). A deadlock costs a unit of work run again and says two paths took rows in
    opposite orders: the chaos scenarios fail on one, and the benchmarks print them."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = self._size()
        self.found: dict[str, int] = {}

    def _size(self) -> int:
        return self.path.stat().st_size if self.path.exists() else 0

    def note(self, scenario: str) -> None:
        """Count the deadlocks logged since the last note, for ``scenario``."""
        if not self.path.exists():
            return
        with self.path.open("rb") as f:
            f.seek(min(self.offset, self._size()))
            grown = f.read()
        self.offset += len(grown)
        if n := grown.count(b"ERROR:  deadlock detected"):
            self.found[scenario] = self.found.get(scenario, 0) + n

    def summary(self) -> str:
        if os.environ.get("PACER_DATABASE_URL") or not self.path.exists():
            return "bench postgres: deadlocks=n/a (a configured server: see its own log)"
        where = ",".join(f"{k}:{v}" for k, v in self.found.items()) or "none"
        return f"bench postgres: deadlocks={sum(self.found.values())} in={where} log={self.path}"


def real_infra() -> Infra:
    return infra.up(state_dir())


def fresh_db(inf: Infra, label: str) -> str:
    """A migrated database with the time partitions a running installation has: the days its
    retention keeps (``BENCH_PARTITION_DAYS``, 8: the items' 7 days and today) as well as the
    days ahead, so that every query by guid pays for as many partitions as in production."""
    url = create_database(inf.database_url, f"bench_{label}")
    days = env_int("BENCH_PARTITION_DAYS", 8)
    with psycopg.connect(url, autocommit=True) as conn:
        if period := os.environ.get("BENCH_PARTITION_PERIOD_DAYS"):
            _repartition(conn, int(period))
        conn.execute("SELECT pacer_ensure_partitions(now() - make_interval(days => %s), %s)", (days, days))
    return url


def _repartition(conn: psycopg.Connection[Any], period_days: int) -> None:
    """Cut ``items`` and ``item_events`` of a new (empty) database by ``period_days`` over the
    whole retention, as an installation that has run with
    ``PACER_RECONCILER_PARTITION_PERIOD_DAYS`` for a while has them: their partitions
    dropped, the period changed, the partitions made again from yesterday to 3 days ahead as
    ``migrate()`` makes them (docs/performance.md, "Daily partitions, measured again")."""
    for table in reversed(PERIOD_SET):
        for (leaf,) in conn.execute("SELECT relid::regclass::text FROM pg_partition_tree(%s) WHERE isleaf"
                                    " AND relid <> %s::regclass", (table, f"{table}_default")).fetchall():
            conn.execute(f"DROP TABLE {leaf}")
    conn.execute("UPDATE partitioned_tables SET period_days = %s WHERE parent = ANY(%s)", (period_days, list(PERIOD_SET)))
    conn.execute("SELECT pacer_ensure_partitions(now(), 3)")


drop_db = drop_database


def analyze_as_autovacuum(conn: psycopg.Connection[Any], *tables: str, vacuum: bool = True) -> None:
    """(VACUUM) ANALYZE ``tables`` as autovacuum leaves them in production: each partition of
    a partitioned table, never the partitioned table itself, which autovacuum gives no
    statistics of its own. A plain table is analyzed itself."""
    for table in tables:
        leaves = conn.execute("SELECT relid::regclass::text FROM pg_partition_tree(%s) WHERE isleaf",
                              (table,)).fetchall()  # none for a plain table
        for (leaf,) in leaves or [(table,)]:
            conn.execute(f"{'VACUUM ANALYZE' if vacuum else 'ANALYZE'} {leaf}")


def teardown(st: Stack) -> None:
    """Stop a benchmark's stack, delete its topics and drop its database."""
    st.dispose()
    drop_db(st.infra.database_url)


def stack(inf: Infra, label: str, env: dict[str, str]) -> Stack:
    url = fresh_db(inf, label)
    state = state_dir() / "runs" / label
    st = Stack(state, Infra(inf.kafka_bootstrap, url, state), topic_prefix=f"b{uuid.uuid4().hex[:10]}", env_extra=env)
    prepare(url, {"bootstrap.servers": inf.kafka_bootstrap}, st.topic_prefix)
    return st


@dataclass(frozen=True)
class Seeded:
    job_id: str
    commands: list[ItemCommand]


def seed_items(url: str, guids: int, per_guid: int, priority: int = 3, kind: str = "campaign",
               job_id: str | None = None, not_before: datetime | None = None,
               expire_at: datetime | None = None) -> Seeded:
    """A job with ``per_guid`` pending items on each of ``guids`` guids, written by COPY, all
    with one text, stored once on the job as the planner stores a text every target shares."""
    job_id = job_id or str(uuid.uuid4())
    commands = []
    with psycopg.connect(url) as conn:
        conn.execute(
            "INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version,"
            " target_mode, total, request, dispatched_at, item_content) VALUES (%s, %s, %s, %s, 'bench', %s, 1,"
            " 'snapshot', %s, '{}', now(), 'hello')",
            (job_id, f"bench-{job_id}", kind, priority, json.dumps({"type": "text", "content": "hello"}), guids * per_guid))
        shard_ids = {}
        for g in range(guids):
            guid = f"bg{g:05d}"
            sid = conn.execute("INSERT INTO shards (job_id, guid, total) VALUES (%s, %s, %s) RETURNING shard_id",
                               (job_id, guid, per_guid)).fetchone()[0]
            shard_ids[guid] = sid
            conn.execute("INSERT INTO shard_status_counts VALUES (%s, 'pending', %s)", (sid, per_guid))
        ids = iter(new_item_ids(guids * per_guid, datetime.now(UTC)))  # in today's partition, as planned
        with conn.cursor().copy("COPY items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority,"
                                " kind, not_before, expire_at) FROM STDIN") as copy:
            for n in range(per_guid):
                for g in range(guids):
                    guid = f"bg{g:05d}"
                    item_id = next(ids)
                    key = f"bench:{job_id}:{guid}:{n}"
                    copy.write_row((item_id, job_id, shard_ids[guid], guid, f"room-{n}", None, key, priority, kind,
                                    not_before, expire_at))
                    commands.append(ItemCommand.model_construct(
                        schema_version=1, item_id=ItemId(item_id), job_id=JobId(job_id), shard_id=shard_ids[guid],
                        guid=Guid(guid), to_id=ToId(f"room-{n}"), content="hello", idem_key=IdemKey(key), priority=priority, kind=kind,
                        expire_at=expire_at, not_before=not_before))
    return Seeded(job_id, commands)


def publish_commands(bootstrap: str, topic: str, commands: list[ItemCommand]) -> None:
    produce_all(make_producer({"bootstrap.servers": bootstrap}),
                ((topic, c.guid.encode(), c.model_dump_json().encode(), None) for c in commands))


def count(url: str, sql: str, *args: Any) -> int:
    with psycopg.connect(url) as conn:
        return int(conn.execute(sql, args).fetchone()[0])


def wait_until(pred: Any, timeout_s: float, poll_s: float = 0.25) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(poll_s)
    return False


def gateway(url: str, path: str) -> Any:
    with urllib.request.urlopen(f"{url}{path}", timeout=30) as resp:
        return json.loads(resp.read())


class SendsTail:
    """The gateway's sends, read on from where the last read ended.

    The gateway records sends in acceptance order, so each read fetches only the sends made
    since the one before: a poll costs the gateway, on the cores a scenario times, what is
    new rather than every send so far."""

    PAGE = 20_000

    def __init__(self, gw: str, offset: int = 0) -> None:
        self.gw = gw
        self.offset = offset

    @classmethod
    def from_now(cls, gw: str) -> SendsTail:
        """A tail that will read only the sends made after this call."""
        return cls(gw, gateway(gw, "/_admin/sends?limit=0")["total"])

    def read(self) -> list[dict[str, Any]]:
        """The sends made since the last read (since the tail's start, the first time)."""
        new: list[dict[str, Any]] = []
        while page := gateway(self.gw, f"/_admin/sends?limit={self.PAGE}&offset={self.offset}")["sends"]:
            new += page
            self.offset += len(page)
            if len(page) < self.PAGE:
                break
        return new


def wait_planner_consuming(st: Stack, timeout_s: float = 120) -> None:
    """Publish one auto-reply to a guid of its own and wait until the gateway has it: the
    planner has joined its group and been given its partitions. A request published before
    that waits in Kafka for the join, which is start-up, not what a scenario times."""
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    produce_all(make_producer({"bootstrap.servers": st.infra.kafka_bootstrap}), [(
        f"{st.topic_prefix}.job-requests", probe.encode(), json.dumps({
            "request_id": probe, "kind": "auto_reply", "created_by": "bench", "source_msg_uid": probe,
            "message": {"type": "text", "content": "probe"},
            "targets": {"mode": "snapshot", "items": [{"guid": "probe-guid", "to_id": probe}]}}).encode(), None)])
    if not wait_until(lambda: any(s["toId"] == probe for s in gateway(st.gateway_url or "",
                                                                     "/_admin/sends?limit=1000000")["sends"]),
                      timeout_s):
        raise RuntimeError(f"the probe auto-reply was not sent within {timeout_s:.0f} s")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_busy_s() -> float:
    """CPU seconds every process on this machine has spent so far, all cores together
    (/proc/stat: user, nice, system, irq, softirq and steal time)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:9]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


# Which part of the machine a process is, by its command: the first rule that matches.
_ROLES = (("postgres", lambda comm, cmd: comm in ("postgres", "postmaster")),
          ("kafka", lambda comm, cmd: comm == "java" and b"kafka" in cmd),
          ("gateway", lambda comm, cmd: b"pacer_dev.fakegateway" in cmd),
          ("sender", lambda comm, cmd: b"pacer_sender" in cmd),
          ("reconciler", lambda comm, cmd: b"pacer_reconciler" in cmd),
          ("planner", lambda comm, cmd: b"pacer_planner" in cmd))


# Postgres' own processes by their titles; any other postgres process is a client's backend.
_POSTGRES_PARTS = (b"autovacuum", b"walwriter", b"checkpointer", b"background writer", b"walsummarizer",
                   b"logical replication", b"io worker")


def _postgres_part(cmd: bytes) -> str:
    """Which of Postgres' processes this is, by the title it sets: ``backend`` (a client's
    connection), ``autovacuum``, ``walwriter``, ``checkpointer``, … or ``postmaster``."""
    if not cmd.startswith(b"postgres: "):
        return "postmaster"
    title = cmd[len(b"postgres: "):]
    part = next((p for p in _POSTGRES_PARTS if title.startswith(p)), None)
    return part.decode().replace(" ", "_") if part else "backend"


def _processes() -> dict[tuple[int, int], tuple[str, float]]:
    """Every process now: (pid, start tick) → (role, CPU seconds of it and of its reaped
    children). The bench's own process is ``driver``; one no rule names is ``other``;
    Postgres' processes are ``postgres:<part>`` (``_postgres_part``)."""
    tick = os.sysconf("SC_CLK_TCK")
    out: dict[tuple[int, int], tuple[str, float]] = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            head, rest = (d / "stat").read_text().rsplit(")", 1)
            cmd = (d / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        comm, f = head.split("(", 1)[1], rest.split()
        pid = int(d.name)
        role = "driver" if pid == os.getpid() else next(
            (name for name, match in _ROLES if match(comm, cmd)), "other")
        if role == "postgres":
            role = f"postgres:{_postgres_part(cmd)}"
        out[(pid, int(f[19]))] = (role, sum(int(x) for x in f[11:15]) / tick)
    return out


class CpuByRole:
    """CPU seconds each part of the machine spent between ``start()`` and ``split()``: a
    process that began meanwhile counts from zero; one that ended counts in its parent
    once reaped (Postgres' backends in the postmaster), else not at all."""

    def start(self) -> CpuByRole:
        self._before = _processes()
        return self

    def split(self) -> dict[str, float]:
        """CPU seconds by role; Postgres' also by part, as ``postgres:<part>`` beside the
        ``postgres`` total."""
        spent: dict[str, float] = {}
        for key, (role, cpu) in _processes().items():
            was = self._before.get(key)
            used = cpu - (was[1] if was else 0.0)
            spent[role] = spent.get(role, 0.0) + used
            if role.startswith("postgres:"):
                spent["postgres"] = spent.get("postgres", 0.0) + used
        return spent


def per_unit(spent: dict[str, float], units: int, scale: float, prefix: str) -> str:
    """``spent`` as ``<prefix>_<role>=<CPU per unit × scale>`` fields, for each role that ran,
    and Postgres' share by part as one ``<prefix>_postgres_parts=backend:…/autovacuum:…``
    field (the parts above a thousandth)."""
    roles = " ".join(f"{prefix}_{role}={spent.get(role, 0.0) * scale / units:.3f}" for role in
                     (*(name for name, _ in _ROLES), "driver", "other") if role in spent)
    parts = sorted(((k.split(":", 1)[1], v * scale / units) for k, v in spent.items() if k.startswith("postgres:")),
                   key=lambda kv: -kv[1])
    shown = "/".join(f"{k}:{v:.3f}" for k, v in parts if v >= 0.001)
    return f"{roles} {prefix}_postgres_parts={shown}" if shown else roles


def cpu_bound_per_s(units: int, busy_s: float) -> float:
    """Units per second the machine's cores allow at the CPU per unit measured: ``CORES``
    over (``busy_s`` / ``units``), every process's CPU counted, the service's and Postgres',
    Kafka's and the gateway's alike. A run at this rate would keep every core busy."""
    return CORES * units / busy_s if busy_s > 0 else float("inf")


def rss_mib(pid: int) -> float:
    """Peak resident memory of a process (VmHWM), MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")
