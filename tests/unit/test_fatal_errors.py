"""A Kafka producer's fatal error stops the service for a fresh process to take over: every
produce after it fails, so retrying in place would fail for ever behind a green /readyz."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import httpx
import pytest
from confluent_kafka import KafkaError
from prometheus_client import CollectorRegistry

from pacer_common.kafka import producer_error
from pacer_common.lifecycle import Fatal, stop_event
from pacer_common.ops import Health, ops_app


async def _probes(health: Health) -> dict[str, tuple[int, Any]]:
    transport = httpx.ASGITransport(app=ops_app("svc", CollectorRegistry(), health))
    async with httpx.AsyncClient(transport=transport, base_url="http://ops") as ops:
        return {path: ((r := await ops.get(path)).status_code, r.json()) for path in ("/healthz", "/readyz")}


def test_a_fatal_producer_error_makes_the_service_unhealthy_and_asks_it_to_stop() -> None:
    fatal = Fatal()
    err = KafkaError(KafkaError._FATAL, "Fatal idempotent producer error: Local: Inconsistent state", fatal=True)

    async def go() -> tuple[Health, dict[str, tuple[int, Any]], dict[str, tuple[int, Any]]]:
        health, stop = Health(fatal), stop_event(fatal)  # as run_service makes them
        health.set_ready(True, "consuming")
        before = await _probes(health)
        # librdkafka calls back on the thread that polls the producer, not always the loop's
        await asyncio.to_thread(producer_error, err, fatal)
        await asyncio.wait_for(stop.wait(), 5)
        health.set_ready(True, "consuming")  # a service loop still running cannot make it ready again
        return health, before, await _probes(health)

    health, before, after = asyncio.run(go())
    assert before == {"/healthz": (200, {"status": "ok", "service": "svc"}),
                      "/readyz": (200, {"ready": True, "reason": "consuming"})}
    assert not health.ready and not health.alive
    reason = "fatal: kafka producer: " + str(err)
    assert after == {"/healthz": (503, {"status": "fatal", "service": "svc", "reason": reason}),
                     "/readyz": (503, {"ready": False, "reason": reason})}


def test_a_producer_error_librdkafka_retries_by_itself_is_only_logged(caplog: pytest.LogCaptureFixture) -> None:
    fatal = Fatal()
    err = KafkaError(KafkaError._TRANSPORT, "broker down")

    async def go() -> Health:
        health = Health(fatal)
        health.set_ready(True, "consuming")
        await asyncio.to_thread(producer_error, err, fatal)
        return health

    with caplog.at_level(logging.WARNING, logger="pacer_common.kafka.errors"):
        health = asyncio.run(go())
    assert fatal.reason is None, "nothing declared: no stop is asked"
    assert health.ready and health.alive
    assert [(r.name, r.levelno, r.getMessage()) for r in caplog.records] == [
        ("pacer_common.kafka.errors", logging.WARNING, f"kafka producer error: {err}")]


def test_a_service_started_after_the_fatal_error_stops_at_once() -> None:
    fatal = Fatal()
    fatal.declare("kafka producer: broken")

    async def go() -> bool:
        return stop_event(fatal).is_set()

    assert asyncio.run(go())
