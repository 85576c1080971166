"""One item followed end to end by its W3C trace context, with the OpenTelemetry SDK's
in-memory exporter: job request (Kafka header) → planner → item row and command → sender
(reading the item from Postgres, as after a lost doorbell) → gateway call → outcome event."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import psycopg
import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pacer_common import tracing
from pacer_common.db.pool import open_pool
from pacer_common.domain.failures import DEFAULT_CODE_TABLE, RetryPolicy
from pacer_common.gateway import GatewayClient, make_client
from pacer_common.kafka import AsyncConsumer, ensure_topics, make_consumer, make_producer, produce_all
from pacer_planner.adapters.faults import ENVIRONMENT
from pacer_planner.adapters.kafka import KafkaCommandBus, KafkaRequestSource
from pacer_planner.adapters.postgres import PostgresJobStore
from pacer_planner.core import Handled, Planner
from pacer_planner.core.consume import IntakeLoop, IntakePolicy
from pacer_reconciler.adapters.kafka import KafkaPublisher
from pacer_reconciler.adapters.postgres import PostgresLog
from pacer_reconciler.core import Reconciler
from pacer_sender.adapters.postgres import PostgresGuidLeases, PostgresItemRepository
from pacer_sender.adapters.queue import PostgresGuidQueue
from pacer_sender.core import Executor
from tests.integration.helpers import read_topic

TTL = timedelta(seconds=30)


@pytest.fixture(scope="module")
def spans() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    tracing.setup("test", processors=[SimpleSpanProcessor(exporter)])
    return exporter


class Gateway(BaseHTTPRequestHandler):
    """A gateway that accepts every send and remembers each request's traceparent."""

    seen: ClassVar[list[str | None]] = []

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        Gateway.seen.append(self.headers.get("traceparent"))
        body = json.dumps({"code": 0, "msg": "ok", "data": {"msgId": f"m-{len(Gateway.seen)}"}}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: Any) -> None:
        pass


def trace_id(traceparent: str | bytes | None) -> str:
    text = traceparent.decode() if isinstance(traceparent, bytes) else traceparent
    assert text, "no traceparent"
    return text.split("-")[1]


def test_one_item_is_followed_from_the_request_to_its_outcome(
        spans: InMemorySpanExporter, database_url: str, kafka_config: dict[str, str], topic_prefix: str) -> None:
    topics = {name: f"{topic_prefix}.{name}" for name in ("requests", "online", "batch", "dlq", "outcomes")}
    ensure_topics(kafka_config, {t: (1, {}) for t in topics.values()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    rid = f"trace-{uuid.uuid4().hex[:8]}"
    body = json.dumps({
        "request_id": rid, "kind": "campaign", "created_by": "t", "message": {"type": "text", "content": "hi"},
        "targets": {"mode": "snapshot", "items": [{"guid": "g-trace", "to_id": "room-1"}]},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(),
    }).encode()
    with tracing.span("caller publishes a job request") as caller:
        request_parent = tracing.current()
    produce_all(make_producer(kafka_config), [(topics["requests"], rid.encode(), body,
                                               tracing.kafka_headers(request_parent))])
    trace = format(caller.get_span_context().trace_id, "032x")

    async def scenario() -> None:
        pool = await open_pool(database_url, min_size=1, max_size=4)
        # The planner's intake loop, on the request as it arrives from Kafka.
        stop = asyncio.Event()
        consumer = AsyncConsumer(make_consumer(kafka_config, f"{topic_prefix}.planner"))
        await consumer.call(consumer.consumer.subscribe, [topics["requests"]])

        class Events:
            def handled(self, result: Handled) -> None:
                assert result.outcome == "planned"
                stop.set()

            def environment_fault(self) -> None: ...
            def internal_error(self) -> None: ...

        bus = KafkaCommandBus(make_producer(kafka_config), lambda lane: topics[lane], topics["dlq"])
        await asyncio.wait_for(IntakeLoop(Planner(PostgresJobStore(pool), bus), KafkaRequestSource(consumer),
                                          IntakePolicy(ENVIRONMENT), Events(), stop).run(), 60)
        await consumer.close()
        # The sender reads the item from Postgres (no command needed) and sends it.
        http = make_client(f"http://127.0.0.1:{server.server_port}", 10.0)
        await PostgresGuidLeases(pool, TTL).acquire(["g-trace"], "w1")
        (cmd,) = (await PostgresGuidQueue(pool).next_ready("g-trace", [], 10)).commands
        executor = Executor(PostgresItemRepository(pool, TTL), GatewayClient(http, DEFAULT_CODE_TABLE), "w1",
                            RetryPolicy())
        assert (await executor.execute(cmd)).outcome == "confirmed"
        await http.aclose()
        # The reconciler publishes the outcome.
        store = PostgresLog(pool, "reconciler", timedelta(seconds=60))
        await Reconciler(store, store, KafkaPublisher(make_producer(kafka_config), topics["outcomes"],
                                                      lambda lane: topics[lane])).tail_once()
        await pool.close()

    asyncio.run(scenario())
    server.shutdown()

    with psycopg.connect(database_url) as conn:
        (stored,) = conn.execute("SELECT traceparent FROM items").fetchone()
    assert trace_id(stored) == trace, "the item row keeps the request's trace"
    (command,) = read_topic(kafka_config, topics["batch"], expect=1)
    assert trace_id(command["headers"]["traceparent"]) == trace == trace_id(command["value"]["traceparent"])
    assert [trace_id(t) for t in Gateway.seen] == [trace], "the gateway call carries the trace"
    confirmed = [o for o in read_topic(kafka_config, topics["outcomes"], expect=3)
                 if o["headers"]["pacer-event-type"] == b"ItemConfirmed"]
    assert [trace_id(o["headers"]["traceparent"]) for o in confirmed] == [trace]
    assert "traceparent" not in confirmed[0]["value"], "the outcome's body is unchanged"

    finished = {s.name: s for s in spans.get_finished_spans() if format(s.context.trace_id, "032x") == trace}
    assert {"plan job request", "send item", "gateway sendText"} <= set(finished)
    assert finished["plan job request"].parent.span_id == caller.get_span_context().span_id
    assert finished["gateway sendText"].parent.span_id == finished["send item"].context.span_id
    # The gateway saw the trace context of the gateway call's own span.
    assert Gateway.seen[0].split("-")[2] == format(finished["gateway sendText"].context.span_id, "016x")
