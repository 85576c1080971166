"""The requery tests' audience: the fake gateway's audience endpoint (targets a job pages
through), its topics, and requery job requests."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from pacer_common.kafka import ensure_topics
from pacer_dev.fakegateway.process import start_fake_gateway, stop


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    url, proc = start_fake_gateway()
    try:
        yield url
    finally:
        stop(proc)


@pytest.fixture
def topics(kafka_config: dict[str, str], topic_prefix: str) -> dict[str, str]:
    t = {lane: f"{topic_prefix}.item-commands.{lane}" for lane in ("online", "batch")} | {
        "dlq": f"{topic_prefix}.job-requests.dlq"}
    ensure_topics(kafka_config, {name: (1, {}) for name in t.values()})
    return t


@dataclass
class Audience:
    base: str
    name: str

    @property
    def url(self) -> str:
        return f"{self.base}/_audience/{self.name}"

    def put(self, targets: list[Any], **extra: Any) -> None:
        httpx.put(f"{self.base}/_admin/audiences/{self.name}", json={"targets": targets, **extra}).raise_for_status()

    def fail(self, n: int, mode: str = "status") -> None:
        httpx.put(f"{self.base}/_admin/audiences/{self.name}/faults",
                  json={"fail_next": n, "mode": mode}).raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        return list(httpx.get(f"{self.base}/_admin/audiences/{self.name}").json()["requests"])


@pytest.fixture
def audience(gateway: str) -> Audience:
    return Audience(gateway, f"aud-{uuid.uuid4().hex[:8]}")


def targets(n: int, guids: int = 3, start: int = 0, guid: str | None = None) -> list[dict[str, Any]]:
    return [{"guid": guid or f"g{i % guids}", "to_id": f"r{i}", "vars": {"n": str(i)}} for i in range(start, start + n)]


def requery(rid: str, url: str, page_size: int, **extra: Any) -> bytes:
    return json.dumps({
        "request_id": rid, "kind": "campaign", "created_by": "t", "message": {"type": "text", "content": "hi {n}"},
        "targets": {"mode": "requery", "url": url, "page_size": page_size},
        "expire_at": (datetime.now(UTC) + timedelta(hours=1)).isoformat(), **extra,
    }).encode()
