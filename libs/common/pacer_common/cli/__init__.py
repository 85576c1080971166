"""``pacer``: the operator's command line — migrate, create topics, publish, inspect, and read
back what the planner and the callback intake refused (:mod:`pacer_common.cli.dead_letters`).

``retry``, ``cancel`` and ``limits`` change what Pacer does: they call the Control API
(``PACER_CONTROL_URL``, ``PACER_TOKEN``), so each goes through the same role check, use case
and audit record as the API and the console. The commands run after a restore from a backup
are in :mod:`pacer_common.cli.restore`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import psycopg
from confluent_kafka import KafkaException
from psycopg.rows import dict_row
from pydantic import ValidationError

from pacer_common import logs
from pacer_common.cli.common import (
    EXIT_DENIED,
    EXIT_DONE,
    EXIT_NOT_FOUND,
    EXIT_REFUSED,
    EXIT_UNAVAILABLE,
    EXIT_USAGE,
    WRITERS,
    control_call,
    count,
    one_line,
    unless_stopped,
)
from pacer_common.cli.dead_letters import add_dead_letter_commands, refusal_of
from pacer_common.cli.restore import add_restore_commands
from pacer_common.db import operations
from pacer_common.db.migrate import migrate
from pacer_common.db.sql import query
from pacer_common.dead_letters import TopicMissing
from pacer_common.domain.limits import parse_limits
from pacer_common.domain.requests import MAX_REQUEST_BYTES, JobRequest
from pacer_common.domain.segments import EVENT_SEGMENTS_MAX, EVENT_SEGMENTS_MIN
from pacer_common.domain.tenants import MAX_CALLBACK_BYTES
from pacer_common.domain.tokens import Role
from pacer_common.domain.validation import InvalidRequest, validate_request
from pacer_common.kafka import (
    ProduceError,
    align_topic_configs,
    ensure_topics,
    make_producer,
    produce_all,
)
from pacer_common.settings import KafkaSettings, PostgresSettings

__all__ = ["EXIT_DENIED", "EXIT_DONE", "EXIT_NOT_FOUND", "EXIT_REFUSED", "EXIT_UNAVAILABLE", "EXIT_USAGE",
           "main", "topic_layout"]
T = TypeVar("T")


def topic_layout(k: KafkaSettings) -> dict[str, tuple[int, dict[str, str]]]:
    """Every topic Pacer uses: partitions and topic configs (each one's retention from ``k``)."""
    large = {"max.message.bytes": str(MAX_REQUEST_BYTES)}
    callbacks = {"max.message.bytes": str(MAX_CALLBACK_BYTES + 1_048_576)}  # the largest body, its headers
    keep = k.retention_ms
    commands = {"retention.ms": keep(k.topic_retention_commands_hours)}
    dead_letters = keep(k.topic_retention_dead_letters_hours)
    return {
        k.job_requests: (4, {**large, "retention.ms": keep(k.topic_retention_requests_hours)}),
        # A request as received plus its reason headers: room for both.
        k.job_requests_dlq: (1, {"max.message.bytes": str(MAX_REQUEST_BYTES + 1_048_576), "retention.ms": dead_letters}),
        # Both lanes have the same partition count, so a guid has the same partition in each.
        k.item_commands("online"): (k.item_command_partitions, commands),
        k.item_commands("batch"): (k.item_command_partitions, commands),
        k.item_outcomes: (8, {"retention.ms": keep(k.topic_retention_outcomes_hours)}),
        # Gateway callbacks, keyed by guid: a guid's events stay in order on one partition.
        k.callbacks: (8, {**callbacks, "retention.ms": keep(k.topic_retention_callbacks_hours)}),
        k.callbacks_dlq: (1, {**callbacks, "retention.ms": dead_letters}),
    }


def _segment_count(text: str) -> int:
    """``--event-segments``: a segment count the reconciler accepts (1 needs no index)."""
    if not text.isdigit() or not EVENT_SEGMENTS_MIN <= int(text) <= EVENT_SEGMENTS_MAX:
        raise argparse.ArgumentTypeError(f"a segment count from {EVENT_SEGMENTS_MIN} to {EVENT_SEGMENTS_MAX}"
                                         f" (PACER_RECONCILER_SEGMENTS), not {text!r}")
    return int(text)


def _migrate(args: argparse.Namespace) -> int:
    logs.configure("migrate")  # each migration, partition and online index build, as JSON lines on stderr
    applied = migrate(PostgresSettings().database_url.get_secret_value(), event_segments=args.event_segments)
    print(f"migrations applied: {', '.join(applied) or 'none (up to date)'}")
    return 0


def _rebuild_projection(args: argparse.Namespace) -> int:
    if refused := unless_stopped(args, WRITERS,
                                  "nothing may write item events while the projection is rebuilt"):
        return refused
    url = PostgresSettings().database_url.get_secret_value()
    with psycopg.connect(url) as conn:
        conn.execute(query("rebuild_projection"))
        row = conn.execute("SELECT count(DISTINCT shard_id) FROM shard_status_counts").fetchone()
        shards = row[0] if row else 0
    print(f"projection rebuilt from the items table: {shards} shards; the log cursor is at the end of the log")
    return 0


def _topics(_: argparse.Namespace) -> int:
    k = KafkaSettings()
    layout = topic_layout(k)
    ensure_topics(k.client_config(), layout)
    changed = align_topic_configs(k.client_config(), layout)
    for name, (parts, config) in layout.items():
        was = "".join(f" ({key} was {old})" for key, old in changed.get(name, {}).items())
        print(f"topic {name} partitions={parts} retention.ms={config['retention.ms']}{was}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    k = KafkaSettings()
    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    key = None
    if not args.raw:
        try:  # the planner's own validation: fail here, with its reason, before Kafka does
            req = validate_request(raw, datetime.now(UTC)).request
        except InvalidRequest as exc:
            print(f"not published: {exc}", file=sys.stderr)
            return EXIT_REFUSED
        key = req.request_id.encode()
    produce_all(make_producer(k.client_config()), [(k.job_requests, key, raw, None)])
    print(f"published to {k.job_requests}")
    return 0


def _status(args: argparse.Namespace) -> int:
    url = PostgresSettings().database_url.get_secret_value()
    with psycopg.connect(url, row_factory=dict_row) as conn:
        job = conn.execute(
            "SELECT job_id::text, request_id, kind, status, total, created_at, started_at, finished_at,"
            " target_mode, target_complete_at, target_pages, target_fetched, target_duplicates, target_invalid,"
            " target_wait_reason FROM jobs WHERE request_id = %s OR job_id::text = %s", (args.job, args.job)).fetchone()
        if job is None:
            print(f"no job with request id or job id {args.job!r}; {refusal_of(args.job)}", file=sys.stderr)
            return 1
        counts = conn.execute(
            "SELECT status::text, count(*) AS n FROM items WHERE job_id = %s GROUP BY status ORDER BY status",
            (job["job_id"],)).fetchall()
    job["items"] = {r["status"]: r["n"] for r in counts}
    print(json.dumps(job, default=str, indent=2))
    return 0


def _schema(args: argparse.Namespace) -> int:
    text = json.dumps(JobRequest.model_json_schema(), indent=2, sort_keys=True) + "\n"
    if args.out:
        Path(args.out).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


def _with_conn(fn: Callable[[psycopg.AsyncConnection[Any]], Awaitable[T]]) -> T:
    """Run ``fn`` on one autocommit connection to ``PACER_DATABASE_URL``."""
    url = PostgresSettings().database_url.get_secret_value()

    async def run() -> T:
        async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
            return await fn(conn)

    return asyncio.run(run())


def _reason(args: argparse.Namespace) -> dict[str, Any]:
    return {"reason": args.reason} if args.reason else {}


def _retry(args: argparse.Namespace) -> int:
    body = {**_reason(args), **({"priority": args.priority} if args.priority is not None else {})}
    return control_call("POST", f"/items/{args.item}/retry", json=body)


def _cancel(args: argparse.Namespace) -> int:
    return control_call("POST", f"/items/{args.item}/cancel", json=_reason(args))


def _locks(args: argparse.Namespace) -> int:
    view = _with_conn(lambda c: operations.lock_view(c, args.limit))
    if args.json:
        print(json.dumps(view, default=str, indent=2))
        return 0
    print("guid leases")
    print(_table(view["guid_leases"], ["guid", "owner", "epoch", "since", "lease_until", "renew_count",
                                       "takeovers", "last_send_at", "expired", "forced_releases",
                                       "released_by", "released_at", "evicted_owner", "evicted_until"]))
    print("\nitem leases")
    print(_table(view["item_leases"], ["item_id", "guid", "status", "lease_owner", "lease_epoch",
                                       "lease_until", "expired"]))
    print()
    for name, n in view["counts"].items():
        print(f"{name.replace('_', ' ')}: {n}")
    return 0


def _table(rows: Sequence[Mapping[str, Any]], cols: list[str]) -> str:
    """A plain fixed-width table; ``(none)`` when empty."""
    if not rows:
        return "  (none)"
    cells = [[_cell(r[c]) for c in cols] for r in rows]
    widths = [max(len(c), *(len(row[i]) for row in cells)) for i, c in enumerate(cols)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join("  " + line.rstrip() for line in lines)


def _cell(v: Any) -> str:
    if v is None:
        return "-"
    if isinstance(v, datetime):
        return v.isoformat(timespec="seconds")
    if isinstance(v, bool):
        return "yes" if v else "no"
    return str(v)


def _limits(args: argparse.Namespace) -> int:
    """Hot-adjust a guid's pacing limits; senders apply them within about a second."""
    overrides: dict[str, object] = {}
    for pair in args.set:
        key, _, raw = pair.partition("=")
        try:
            overrides[key] = json.loads(raw)
        except json.JSONDecodeError:
            overrides[key] = raw
    try:
        overrides = parse_limits(overrides, args.guid)  # say what is wrong before calling anyone
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return EXIT_USAGE
    return control_call("PUT", f"/guids/{quote(args.guid, safe='')}/limits", json=overrides,
                    params=_reason(args))


def _token_create(args: argparse.Namespace) -> int:
    """Make an API token for the Control API; the secret is printed once, only its hash is kept."""
    tenants = sorted(set(args.tenants)) if args.tenants else None
    try:
        made = _with_conn(lambda c: operations.create_token(c, args.name, Role(args.role), "cli", args.reason,
                                                            tenants=tenants))
    except operations.UnknownTenants as exc:
        print(str(exc), file=sys.stderr)
        return EXIT_REFUSED
    except psycopg.errors.UniqueViolation:
        print(f"a token named {args.name!r} already exists (names are never reused, even after revocation)",
              file=sys.stderr)
        return EXIT_REFUSED
    scope = f", tenants {', '.join(tenants)}" if tenants else ""
    print(f"token {made.name!r} (role {made.role.value}{scope}) created; it is shown only this once:",
          file=sys.stderr)
    print(made.token)
    return 0


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="pacer", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    mg = sub.add_parser("migrate", help="apply database migrations; build the online indexes not yet built")
    mg.add_argument("--event-segments", type=_segment_count, metavar="N",
                    help="also build, online, the event log's index for N reconciler segments"
                         " (PACER_RECONCILER_SEGMENTS; 16 comes with the migrations)")
    mg.set_defaults(fn=_migrate)
    sub.add_parser("topics", help="create the Kafka topics if missing; set their retention as configured").set_defaults(fn=_topics)
    rb = sub.add_parser("rebuild-projection", help="recount shard progress from the items table (services stopped)")
    rb.add_argument("--services-stopped", action="store_true",
                    help=f"confirm that {WRITERS} are stopped")
    rb.set_defaults(fn=_rebuild_projection)
    add_restore_commands(sub)
    add_dead_letter_commands(sub)
    pub = sub.add_parser("publish", help="publish a job request (JSON file, or - for stdin)")
    pub.add_argument("file")
    pub.add_argument("--raw", action="store_true", help="publish without validating (to try the DLQ)")
    pub.set_defaults(fn=_publish)
    st = sub.add_parser("status", help="a job's state and items per status")
    st.add_argument("job", help="request id or job id")
    st.set_defaults(fn=_status)
    lim = sub.add_parser("limits", help="hot-adjust a guid's pacing limits ('*' for every guid)")
    lim.add_argument("guid")
    lim.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                     help="e.g. min_interval_s=2, per_hour=300, quiet_hours=22:00-08:00, online_reserve=0.3")
    lim.add_argument("--reason", help="why (kept in the audit log)")
    lim.set_defaults(fn=_limits)
    sc = sub.add_parser("schema", help="print the job request JSON Schema")
    sc.add_argument("--out")
    sc.set_defaults(fn=_schema)
    rt = sub.add_parser("retry", help="retry an item: a compensation item through the normal send path")
    rt.add_argument("item", metavar="ITEM_ID")
    rt.add_argument("--reason", help="why (kept in the audit log)")
    rt.add_argument("--priority", type=int, help="priority of the compensation (lower runs first)")
    rt.set_defaults(fn=_retry)
    cn = sub.add_parser("cancel", help="cancel an item that has not been taken yet")
    cn.add_argument("item", metavar="ITEM_ID")
    cn.add_argument("--reason", help="why (kept in the audit log)")
    cn.set_defaults(fn=_cancel)
    lk = sub.add_parser("locks", help="guid and item leases, with lock dashboard counts")
    lk.add_argument("--json", action="store_true", help="print JSON instead of tables")
    lk.add_argument("--limit", type=count, default=1000, help="at most this many leases of each kind")
    lk.set_defaults(fn=_locks)
    tk = sub.add_parser("token", help="Control API tokens")
    tk_sub = tk.add_subparsers(dest="token_cmd", required=True)
    tc = tk_sub.add_parser("create", help="make a token and print it once (the database keeps only its hash)")
    tc.add_argument("--name", required=True, help="unique name; the API records actions as token:<name>")
    tc.add_argument("--role", required=True, choices=[r.value for r in Role],
                    help="operator < tech_admin < admin (cumulative)")
    tc.add_argument("--reason", help="why (kept in the audit log)")
    tc.add_argument("--tenant", action="append", dest="tenants", metavar="NAME",
                    help="scope the token to this tenant (repeatable): it sees and changes only its jobs")
    tc.set_defaults(fn=_token_create)
    args = p.parse_args(argv)
    raise SystemExit(_run(args))


def _run(args: argparse.Namespace) -> int:
    """The command's exit code; what an operator gets wrong or cannot reach is one line on
    stderr and its exit code, not a traceback."""
    try:
        return int(args.fn(args))
    except ValidationError as exc:
        print(f"pacer {args.cmd}: settings missing or not valid: {one_line(exc)}", file=sys.stderr)
        return EXIT_USAGE
    except (psycopg.OperationalError, KafkaException, ProduceError, TimeoutError, TopicMissing) as exc:
        print(f"pacer {args.cmd}: cannot be done now: {str(exc).strip() or type(exc).__name__}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    except OSError as exc:  # a file that is not there or not readable
        print(f"pacer {args.cmd}: {exc}", file=sys.stderr)
        return EXIT_USAGE
