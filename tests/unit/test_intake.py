"""The callback intake's rules: what a callback is, and what is answered and appended when."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import SecretStr, ValidationError

from pacer_common.cli import topic_layout
from pacer_common.domain import callbacks as acted_on
from pacer_common.domain.callbacks import ACTED_ON
from pacer_common.domain.tenants import MAX_CALLBACK_BYTES, Tenant, sign
from pacer_common.settings import KafkaSettings
from pacer_intake.core import Intake
from pacer_intake.domain.callbacks import BadCallback, Callback, parse
from pacer_intake.ports import LogUnavailable
from pacer_intake.settings import IntakeSettings

names = st.text(min_size=1, max_size=40).filter(lambda s: "\x00" not in s)
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                           lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
                           max_leaves=10)


@given(names.filter(lambda s: s not in ACTED_ON), names, st.dictionaries(st.text(), json_values, max_size=4))
def test_any_object_with_cmd_and_guid_is_a_callback(cmd: str, guid: str, data: dict[str, object]) -> None:
    cb = parse(json.dumps({"cmd": cmd, "guid": guid, "ts": 1, "data": data}).encode())
    assert (cb.cmd, cb.guid) == (cmd, guid)


@given(st.fixed_dictionaries({"cmd": st.sampled_from(ACTED_ON), "guid": names | st.just("g" * 257)},
                             optional={"ts": json_values | st.sampled_from(["2026-01-01T10:00:00",
                                                                            "2026-01-01T10:00:00+08:00"]),
                                       "data": st.fixed_dictionaries({}, optional={
                                           "status": st.sampled_from(["online", "kicked", "gone", 1]),
                                           "mediaId": names | st.integers(), "ok": st.booleans() | st.text(),
                                           "reason": st.none() | st.text()})}))
def test_a_command_pacer_acts_on_is_taken_exactly_when_the_reconciler_can_act_on_it(body: dict[str, object]) -> None:
    raw = json.dumps(body).encode()
    try:
        reconciler = acted_on.parse(raw)
    except acted_on.BadCallback:
        with pytest.raises(BadCallback):  # with the reconciler's reason, unless one of the intake's own came first
            parse(raw)
    else:
        assert not isinstance(reconciler, acted_on.Other)
        assert parse(raw) == Callback(str(body["cmd"]), str(body["guid"]))


@pytest.mark.parametrize(("raw", "why"), [
    (b"{not json", "not JSON"),
    (b"\xff\xfe", "not UTF-8"),
    (b"[1, 2]", "not a JSON object but list"),
    (b'{"guid": "g"}', "missing 'cmd'"),
    (b'{"cmd": "", "guid": "g"}', "missing 'cmd'"),
    (b'{"cmd": "device.status"}', "missing 'guid'"),
    (b'{"cmd": "device.status", "guid": 7}', "missing 'guid'"),
    (b'{"cmd": "x", "guid": "g", "data": [1]}', "'data' must be an object"),
    (json.dumps({"cmd": "x", "guid": "g" * 257}).encode(), "is not a guid \\(over 256 characters"),
    (json.dumps({"cmd": "x", "guid": "g\x00"}).encode(), "is not a guid"),
    # Pacer's own commands, as the reconciler reads them (it skipped these, and the event was lost)
    (b'{"cmd":"device.status","guid":"g1","ts":"2026-01-01T10:00:00","data":{"status":"kicked"}}',
     "^not a callback: ts: Input should have timezone info$"),
    (b'{"cmd":"device.status","guid":"g1","data":{"status":"kicked"}}', "^not a callback: ts: Field required$"),
    (b'{"cmd":"device.status","guid":"g1","ts":1,"data":{"status":"gone"}}', "^device.status: status: Input should be"),
    (b'{"cmd":"media.ready","guid":"g1","ts":1,"data":{"ok":true}}', "^media.ready: mediaId: Field required$"),
    (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),  # 200 KB: under the size limit
])
def test_a_malformed_body_is_refused_with_its_reason(raw: bytes, why: str) -> None:
    with pytest.raises(BadCallback, match=why):
        parse(raw)


class Log:
    def __init__(self, down: bool = False) -> None:
        self.appended: list[tuple[str, str, bytes]] = []
        self.dead: list[tuple[str, bytes, str]] = []
        self.down = down

    async def append(self, tenant: str, guid: str, raw: bytes) -> None:
        if self.down:
            raise LogUnavailable("down")
        self.appended.append((tenant, guid, raw))

    async def dead_letter(self, tenant: str, raw: bytes, reason: str) -> None:
        if self.down:
            raise LogUnavailable("down")
        self.dead.append((tenant, raw, reason))


TENANTS = {"acme": Tenant("acme", callback_secret=SecretStr("s3")), "bare": Tenant("bare"),
           "blank": Tenant("blank", callback_secret=SecretStr(""))}


def receive(log: Log, tenant: str, raw: bytes | None, signature: str | None) -> tuple[str, int]:
    got = asyncio.run(Intake(TENANTS.get, log, max_body_bytes=100).receive(tenant, raw, signature))
    return got.result, got.status


def test_a_signed_callback_is_appended_under_its_guid() -> None:
    log, raw = Log(), b'{"cmd":"device.status","guid":"g1","ts":1,"data":{"status":"online"}}'
    assert receive(log, "acme", raw, sign("s3", raw)) == ("accepted", 200)
    assert log.appended == [("acme", "g1", raw)] and not log.dead


def test_nothing_unsigned_is_written_anywhere() -> None:
    log, raw = Log(), b'{"cmd":"device.status","guid":"g1"}'
    assert receive(log, "acme", raw, sign("other", raw)) == ("bad_signature", 401)
    assert receive(log, "acme", raw, None) == ("bad_signature", 401)
    assert receive(log, "acme", b"garbage", "00") == ("bad_signature", 401)  # not dead-lettered either
    assert receive(log, "bare", raw, sign("", raw)) == ("bad_signature", 401)  # no secret: nothing verifies
    assert receive(log, "blank", raw, sign("", raw)) == ("bad_signature", 401)  # an empty one: anyone could sign
    assert receive(log, "acme", raw, "\xe9" + sign("s3", raw)[1:]) == ("bad_signature", 401)  # any header byte
    assert receive(log, "nope", raw, sign("s3", raw)) == ("unknown_tenant", 404)
    assert receive(log, "acme", None, None) == ("too_large", 413)
    assert not log.appended and not log.dead


def test_a_signed_malformed_body_is_dead_lettered_with_the_reason() -> None:
    log, raw = Log(), b'{"cmd":"x"}'
    assert receive(log, "acme", raw, sign("s3", raw)) == ("dead_lettered", 400)
    assert log.dead == [("acme", raw, "missing 'guid' (a non-empty string)")] and not log.appended


def test_a_signed_callback_pacer_could_not_act_on_is_dead_lettered_not_appended() -> None:
    log, raw = Log(), b'{"cmd":"device.status","guid":"g1","ts":"2026-01-01T10:00:00","data":{"status":"kicked"}}'
    got = asyncio.run(Intake(TENANTS.get, log, max_body_bytes=1000).receive("acme", raw, sign("s3", raw)))
    assert (got.result, got.status) == ("dead_lettered", 400)
    assert got.message == "malformed callback, dead-lettered: not a callback: ts: Input should have timezone info"
    assert log.dead == [("acme", raw, "not a callback: ts: Input should have timezone info")] and not log.appended
    # the same event with its zone is taken; a command Pacer does not act on is not read so closely
    good = raw.replace(b'10:00:00"', b'10:00:00+08:00"')
    other = b'{"cmd":"message.received","guid":"g1","data":{"msgUid":"m"}}'
    for body in (good, other):
        assert receive(log, "acme", body, sign("s3", body)) == ("accepted", 200)
    assert log.appended == [("acme", "g1", good), ("acme", "g1", other)] and len(log.dead) == 1


def test_a_log_that_cannot_acknowledge_is_a_503_to_send_again() -> None:
    raw = b'{"cmd":"x","guid":"g"}'
    assert receive(Log(down=True), "acme", raw, sign("s3", raw)) == ("unavailable", 503)
    assert receive(Log(down=True), "acme", b"[]", sign("s3", b"[]")) == ("unavailable", 503)


def test_an_empty_default_secret_stops_the_intake_at_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PACER_INTAKE_DEFAULT_CALLBACK_SECRET", "")
    with pytest.raises(ValidationError, match="default_callback_secret"):
        IntakeSettings()


def test_the_callback_topics_take_the_largest_body_the_intake_may_take() -> None:
    assert IntakeSettings(max_body_bytes=MAX_CALLBACK_BYTES).max_body_bytes == MAX_CALLBACK_BYTES
    with pytest.raises(ValidationError, match="max_body_bytes"):
        IntakeSettings(max_body_bytes=MAX_CALLBACK_BYTES + 1)
    layout = topic_layout(KafkaSettings(kafka_bootstrap_servers="127.0.0.1:9092", topic_prefix="p"))
    for topic in ("p.callbacks", "p.callbacks.dlq"):
        assert int(layout[topic][1]["max.message.bytes"]) >= MAX_CALLBACK_BYTES + 65_536, topic  # and its headers
