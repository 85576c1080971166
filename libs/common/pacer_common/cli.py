"""``pacer``: the operator's command line — migrate, create topics, publish, inspect."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from pacer_common.db.migrate import migrate
from pacer_common.domain.requests import JobRequest
from pacer_common.kafka import MAX_REQUEST_BYTES, ensure_topics, make_producer, produce_all
from pacer_common.settings import KafkaSettings, PostgresSettings


def topic_layout(k: KafkaSettings) -> dict[str, tuple[int, dict[str, str]]]:
    """Every topic Pacer uses: partitions and topic configs."""
    large = {"max.message.bytes": str(MAX_REQUEST_BYTES)}
    return {
        k.job_requests: (4, large),
        k.job_requests_dlq: (1, large),
        k.item_commands: (k.item_command_partitions, {}),
        k.item_outcomes: (8, {}),
    }


def _migrate(_: argparse.Namespace) -> int:
    applied = migrate(PostgresSettings().database_url.get_secret_value())  # type: ignore[call-arg]
    print(f"migrations applied: {', '.join(applied) or 'none (up to date)'}")
    return 0


def _topics(_: argparse.Namespace) -> int:
    k = KafkaSettings()  # type: ignore[call-arg]
    layout = topic_layout(k)
    ensure_topics(k.client_config(), layout)
    for name, (parts, _) in layout.items():
        print(f"topic {name} partitions={parts}")
    return 0


def _publish(args: argparse.Namespace) -> int:
    k = KafkaSettings()  # type: ignore[call-arg]
    raw = sys.stdin.buffer.read() if args.file == "-" else Path(args.file).read_bytes()
    key = None
    if not args.raw:
        req = JobRequest.model_validate_json(raw)  # fail here, loudly, before Kafka does
        key = req.request_id.encode()
    produce_all(make_producer(k.client_config()), [(k.job_requests, key, raw, None)])
    print(f"published to {k.job_requests}")
    return 0


def _status(args: argparse.Namespace) -> int:
    url = PostgresSettings().database_url.get_secret_value()  # type: ignore[call-arg]
    with psycopg.connect(url, row_factory=dict_row) as conn:
        job = conn.execute(
            "SELECT job_id::text, request_id, kind, status, total, created_at, started_at, finished_at"
            " FROM jobs WHERE request_id = %s OR job_id::text = %s", (args.job, args.job)).fetchone()
        if job is None:
            print(f"no job with request id or job id {args.job!r}", file=sys.stderr)
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


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="pacer", description=__doc__)
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("migrate", help="apply database migrations").set_defaults(fn=_migrate)
    sub.add_parser("topics", help="create the Kafka topics if missing").set_defaults(fn=_topics)
    pub = sub.add_parser("publish", help="publish a job request (JSON file, or - for stdin)")
    pub.add_argument("file")
    pub.add_argument("--raw", action="store_true", help="publish without validating (to try the DLQ)")
    pub.set_defaults(fn=_publish)
    st = sub.add_parser("status", help="a job's state and items per status")
    st.add_argument("job", help="request id or job id")
    st.set_defaults(fn=_status)
    sc = sub.add_parser("schema", help="print the job request JSON Schema")
    sc.add_argument("--out")
    sc.set_defaults(fn=_schema)
    args = p.parse_args(argv)
    raise SystemExit(args.fn(args))
