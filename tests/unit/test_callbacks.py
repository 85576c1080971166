"""Gateway callbacks read for Pacer: what is acted on, and that nothing a gateway sends can
raise anything but a readable BadCallback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence
from datetime import UTC, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.callbacks import BadCallback, DeviceStatus, MediaReady, Other, parse
from pacer_common.domain.guid_health import GuidState, StatusEvent
from pacer_reconciler.callbacks import CallbackConsumer
from pacer_reconciler.ports import RawCallback


def test_device_status_media_ready_and_others() -> None:
    cb = parse(b'{"cmd":"device.status","guid":"g1","ts":"2026-11-30T09:00:00+08:00","data":{"status":"kicked"}}')
    assert isinstance(cb, DeviceStatus) and cb.guid == "g1" and cb.event.state is GuidState.KICKED
    assert cb.event.ts == datetime(2026, 11, 30, 1, 0, tzinfo=UTC) and cb.event.source == "callback"
    ms = parse(b'{"cmd":"media.ready","guid":"g1","ts":1764493200000,"data":{"mediaId":"m","ok":false,'
               b'"reason":"too big"}}')
    assert ms == MediaReady("g1", "m", False, "too big")
    assert parse(b'{"cmd":"message.received","guid":"g1","ts":1,"data":{"msgUid":"u"}}') == Other("message.received")
    long = "g" * 256  # the longest guid a job may name (the intake takes the same)
    assert parse(json.dumps({"cmd": "device.status", "guid": long, "ts": 1, "data": {"status": "online"}}).encode()
                 ) == DeviceStatus(long, StatusEvent(GuidState.ONLINE, datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC),
                                                     "callback"))


@pytest.mark.parametrize(("raw", "why"), [
    (b"", "empty body"),
    (b"[1]", "not a callback"),
    (b'{"cmd":"device.status","guid":"g","ts":"2026-11-30T09:00:00","data":{"status":"online"}}', "ts"),
    (b'{"cmd":"device.status","guid":"g","ts":1,"data":{"status":"gone"}}', "device.status: status"),
    (b'{"cmd":"media.ready","guid":"g","ts":1,"data":{"ok":true}}', "media.ready: mediaId"),
    (b'{"cmd":"device.status","guid":"","ts":1,"data":{"status":"online"}}', "guid"),
    (json.dumps({"cmd": "device.status", "guid": "g" * 257, "ts": 1, "data": {"status": "online"}}).encode(),
     "^not a callback: guid: String should have at most 256 characters$"),
])
def test_a_bad_callback_says_why(raw: bytes, why: str) -> None:
    with pytest.raises(BadCallback, match=why):
        parse(raw)


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=12)


@given(st.binary(max_size=200) | json_values.map(lambda v: json.dumps(v).encode())
       | st.fixed_dictionaries({"cmd": st.sampled_from(["device.status", "media.ready", "x"]), "guid": st.text(),
                                "ts": json_values, "data": json_values}).map(lambda v: json.dumps(v).encode()))
def test_nothing_a_gateway_sends_raises_anything_but_bad_callback(raw: bytes) -> None:
    try:
        parse(raw)
    except BadCallback as exc:
        assert str(exc)


class OneFailedCommit:
    """A source of two callbacks whose first commit fails (a broker away for a moment)."""

    def __init__(self) -> None:
        self.records = [RawCallback(b'{"cmd":"x","guid":"g","ts":1}', ("t", 0, n)) for n in range(2)]
        self.commits = 0
        self.fetched = False

    async def fetch(self, n: int, timeout_s: float) -> list[RawCallback]:
        if self.fetched:
            return []
        self.fetched = True
        return self.records

    async def commit(self, done: Sequence[RawCallback]) -> None:
        self.commits += 1
        if self.commits == 1:
            raise ConnectionError("broker away")


def test_a_round_handled_again_after_a_failed_commit_is_counted_once() -> None:
    source = OneFailedCommit()
    consumer = CallbackConsumer(source, states=None, environment_errors=(ConnectionError,))  # type: ignore[arg-type]

    async def go() -> None:
        with pytest.raises(ConnectionError):
            await consumer.round()
        assert sum(consumer.handled.values()) == 0, "nothing counted before the round commits"
        assert await consumer.round() == 2

    asyncio.run(go())
    assert consumer.handled == {("other", "ignored"): 2} and source.commits == 2
