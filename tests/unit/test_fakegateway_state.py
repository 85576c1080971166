"""Pure logic of the fake gateway: recording, duplicates, pacing, concurrency, knobs."""

from __future__ import annotations

import pytest

from pacer_dev.fakegateway.config import ConfigError, GatewayConfig, config_from_mapping
from pacer_dev.fakegateway.main import load_settings
from pacer_dev.fakegateway.state import (
    CODE_BAD_PARAMS,
    CODE_OK,
    CODE_RATE_LIMITED,
    CODE_RETRYABLE,
    NEEDS_HUMAN_CODES,
    GatewayState,
)


def make_state(**knobs: object) -> GatewayState:
    return GatewayState(config_from_mapping(knobs))


def test_accepted_send_is_recorded_with_all_fields() -> None:
    gw = make_state()
    out = gw.submit("g1", "u1", "hello", "k1", now_mono=10.0, now_wall=1000.0)
    assert out.code == CODE_OK and out.http_status == 200 and not out.drop
    assert out.record is not None
    rec = gw.sends()[0]
    assert (rec.guid, rec.to_id, rec.content, rec.idempotency_key) == ("g1", "u1", "hello", "k1")
    assert (rec.at_mono, rec.at, rec.msg_id) == (10.0, 1000.0, out.record.msg_id)
    stats = gw.stats()
    assert stats["sends"] == 1 and stats["unique_keys"] == 1 and stats["duplicates"] == 0
    assert stats["first_send_at"] == stats["last_send_at"] == 1000.0


def test_duplicates_by_key_count_sends_beyond_the_first() -> None:
    gw = make_state()
    for i in range(3):
        gw.submit("g1", "u1", f"text {i}", "k1")
    gw.submit("g2", "u9", "other guid, same key", "k1")
    gw.submit("g1", "u1", "unique", "k2")
    stats = gw.stats()
    assert stats["unique_keys"] == 2
    assert stats["duplicate_keys"] == 3
    assert stats["duplicate_triples"] == 0
    assert stats["duplicates"] == 3


def test_duplicates_by_triple_only_for_keyless_sends_but_all_counts_everything() -> None:
    gw = make_state()
    gw.submit("g1", "u1", "same", None)
    gw.submit("g1", "u1", "same", None)
    gw.submit("g1", "u1", "same", None)
    gw.submit("g1", "u2", "same", None)  # other recipient: not a duplicate
    gw.submit("g1", "u3", "keyed", "k1")
    gw.submit("g1", "u3", "keyed", "k2")  # same triple, distinct keys
    stats = gw.stats()
    assert stats["duplicate_triples"] == 2
    assert stats["duplicate_keys"] == 0
    assert stats["duplicates"] == 2
    assert stats["duplicate_triples_all"] == 3


def test_duplicates_is_the_union_of_key_and_keyless_triple_duplicates() -> None:
    gw = make_state()
    gw.submit("g1", "u1", "a", "k1")
    gw.submit("g1", "u1", "a", "k1")
    gw.submit("g1", "u2", "b", None)
    gw.submit("g1", "u2", "b", None)
    stats = gw.stats()
    assert (stats["duplicate_keys"], stats["duplicate_triples"], stats["duplicates"]) == (1, 1, 2)
    assert stats["duplicate_triples_all"] == 2


def test_send_within_min_interval_is_rejected_counted_and_not_recorded() -> None:
    gw = make_state(min_interval_ms=100)
    assert gw.submit("g1", "u1", "a", "k1", now_mono=1.000).code == CODE_OK
    rejected = gw.submit("g1", "u1", "b", "k2", now_mono=1.050)
    assert rejected.code == CODE_RATE_LIMITED and rejected.record is None
    # The gap is measured from the last ACCEPTED send, not from the rejected try.
    assert gw.submit("g1", "u1", "b", "k2", now_mono=1.099).code == CODE_RATE_LIMITED
    assert gw.submit("g1", "u1", "b", "k2", now_mono=1.100).code == CODE_OK
    assert gw.submit("g2", "u1", "c", "k3", now_mono=1.101).code == CODE_OK  # other guid
    stats = gw.stats()
    assert stats["interval_violations"] == 2
    assert stats["rejected_by_code"] == {str(CODE_RATE_LIMITED): 2}
    assert stats["sends"] == 3
    assert [r.content for r in gw.sends(guid="g1")] == ["a", "b"]


def test_with_retry_after_a_rate_limit_is_an_http_429_asking_the_guid_for_quiet() -> None:
    gw = make_state(min_interval_ms=1000, retry_after_s=1.5)
    assert gw.submit("g1", "u1", "a", "k1", now_mono=0.0).code == CODE_OK
    limited = gw.submit("g1", "u1", "b", "k2", now_mono=0.5)  # the guid's interval: rate-limited
    assert (limited.code, limited.http_status, limited.retry_after_s) == (CODE_RATE_LIMITED, 429, 2)
    inside = gw.submit("g1", "u1", "b", "k2", now_mono=2.0)  # the quiet (2 s, whole seconds) not over
    assert (inside.http_status, inside.retry_after_s) == (429, 1), "refused for the time left"
    assert gw.submit("g2", "u1", "c", "k3", now_mono=2.0).code == CODE_OK, "another guid is not held"
    assert gw.submit("g1", "u1", "b", "k2", now_mono=2.5).code == CODE_OK, "not extended by the violation"
    assert (gw.stats()["quiet_asked"], gw.stats()["quiet_violations"]) == (1, 1)
    # The violation names the call that asked the quiet it broke: k2's first (of its calls, every one counted).
    assert gw.stats()["quiet_violated"] == [{"guid": "g1", "key": "k2", "call": 1}]
    assert gw.submit("g1", "u1", "b", "k2", now_mono=3.1).code == CODE_RATE_LIMITED  # k2's fourth call asks one
    gw.submit("g1", "u1", "c", "k4", now_mono=3.5)  # inside it
    assert gw.stats()["quiet_violated"][-1] == {"guid": "g1", "key": "k2", "call": 4}
    assert make_state(p_rate_limited=1.0).submit("g1", "u1", "a", "k1").http_status == 200, "without it: a code"


def test_per_guid_interval_override_beats_default() -> None:
    gw = make_state(min_interval_ms=0, guid_min_interval_ms={"slow": 1000})
    assert gw.submit("fast", "u", "1", None, now_mono=0.0).code == CODE_OK
    assert gw.submit("fast", "u", "2", None, now_mono=0.001).code == CODE_OK
    assert gw.submit("slow", "u", "1", None, now_mono=0.0).code == CODE_OK
    assert gw.submit("slow", "u", "2", None, now_mono=0.999).code == CODE_RATE_LIMITED
    assert gw.stats()["interval_violations"] == 1


def test_max_concurrency_per_guid_tracks_the_peak_of_overlapping_requests() -> None:
    gw = make_state()
    gw.enter("g1")
    gw.enter("g2")
    gw.enter("g1")
    assert gw.stats()["max_concurrency_per_guid"] == 2
    gw.leave("g1")
    gw.leave("g1")
    gw.enter("g1")  # sequential again: the peak stays
    gw.leave("g1")
    gw.leave("g2")
    stats = gw.stats()
    assert stats["max_concurrency_per_guid"] == 2
    assert stats["max_concurrency_guid"] == "g1"
    assert stats["max_concurrency_total"] == 3
    assert stats["inflight"] == 0


def test_sequential_requests_never_raise_concurrency_above_one() -> None:
    gw = make_state()
    for _ in range(5):
        gw.enter("g1")
        gw.submit("g1", "u", "x", None)
        gw.leave("g1")
    assert gw.stats()["max_concurrency_per_guid"] == 1


def test_reset_clears_records_and_counters_but_keeps_config_and_live_requests() -> None:
    gw = make_state(min_interval_ms=5)
    gw.enter("g1")
    gw.submit("g1", "u", "x", "k")
    gw.reset()
    assert gw.stats()["sends"] == 0 and gw.stats()["max_concurrency_per_guid"] == 0
    assert gw.config.min_interval_ms == 5
    gw.enter("g1")  # the request from before the reset is still running
    assert gw.stats()["max_concurrency_per_guid"] == 2
    gw.leave("g1")
    gw.leave("g1")
    assert gw.stats()["inflight"] == 0


@pytest.mark.parametrize(
    ("knob", "codes", "http_status"),
    [
        ("p_retryable", {CODE_RETRYABLE}, 200),
        ("p_needs_human", set(NEEDS_HUMAN_CODES), 200),
        ("p_bad_params", {CODE_BAD_PARAMS}, 200),
        ("p_rate_limited", {CODE_RATE_LIMITED}, 200),
        ("p_http_5xx", {CODE_RETRYABLE}, 502),
    ],
)
def test_each_failure_class_rejects_without_recording(
    knob: str, codes: set[int], http_status: int
) -> None:
    gw = make_state(**{knob: 1.0}, seed=3)
    outcomes = [gw.submit("g1", "u", str(i), f"k{i}") for i in range(20)]
    assert {o.code for o in outcomes} <= codes
    assert all(o.http_status == http_status and o.record is None for o in outcomes)
    assert gw.stats()["sends"] == 0
    assert gw.stats()["interval_violations"] == 0
    if knob == "p_needs_human":
        assert {o.code for o in outcomes} == codes  # all three codes show up


def test_fail_guids_forces_a_code_for_that_guid_only() -> None:
    gw = make_state(fail_guids={"bad": 1002})
    assert gw.submit("bad", "u", "x", None).code == 1002
    assert gw.submit("good", "u", "x", None).code == CODE_OK
    assert gw.stats()["rejected_by_code"] == {"1002": 1}


def test_drop_after_accept_records_the_send_and_flags_the_drop() -> None:
    gw = make_state(p_drop_after_accept=1.0)
    out = gw.submit("g1", "u", "x", "k1")
    assert out.drop and out.code == CODE_OK and out.record is not None
    assert gw.stats()["dropped_responses"] == 1 and gw.stats()["sends"] == 1
    assert [r.msg_id for r in gw.lookup("g1", idempotency_key="k1")] == [out.record.msg_id]


def test_lookup_by_key_or_by_recipient_and_content_is_scoped_to_the_guid() -> None:
    gw = make_state()
    gw.submit("g1", "u1", "hello", "k1")
    gw.submit("g2", "u1", "hello", "k1")
    assert len(gw.lookup("g1", idempotency_key="k1")) == 1
    assert len(gw.lookup("g1", to_id="u1", content="hello")) == 1
    assert gw.lookup("g1", idempotency_key="nope") == []
    assert gw.lookup("g3", to_id="u1", content="hello") == []
    with pytest.raises(ValueError):
        gw.lookup("g1")


def test_same_seed_gives_the_same_outcome_sequence() -> None:
    knobs = {"p_retryable": 0.2, "p_needs_human": 0.1, "p_drop_after_accept": 0.2, "seed": 42}
    runs = []
    for _ in range(2):
        gw = make_state(**knobs)
        runs.append([(o.code, o.drop) for o in (gw.submit("g", "u", str(i), None) for i in range(200))])
    assert runs[0] == runs[1]
    codes = {code for code, _ in runs[0]}
    assert CODE_OK in codes and CODE_RETRYABLE in codes and any(drop for _, drop in runs[0])


def test_config_validation_and_string_coercion() -> None:
    cfg = config_from_mapping({"latency_ms": "5", "fail_guids": '{"g": "1001"}', "lookup_unavailable": "true"})
    assert cfg.latency_ms == 5.0 and cfg.fail_guids == {"g": 1001} and cfg.lookup_unavailable is True
    with pytest.raises(ConfigError):
        GatewayConfig().updated({"p_retryable": 0.7, "p_bad_params": 0.4})
    with pytest.raises(ConfigError):
        GatewayConfig().updated({"no_such_knob": 1})
    with pytest.raises(ConfigError):
        GatewayConfig().updated({"latency_ms": -1})
    with pytest.raises(ConfigError):
        GatewayConfig().updated({"fail_guids": {"g": 0}})


def test_runtime_seed_update_reseeds() -> None:
    gw = make_state(p_retryable=0.5, seed=1)
    first = [gw.submit("g", "u", str(i), None).code for i in range(50)]
    gw.update_config({"seed": 1})
    assert [gw.submit("g", "u", str(i), None).code for i in range(50)] == first


def test_settings_flags_override_environment() -> None:
    env = {
        "PACER_FAKE_GATEWAY_P_RETRYABLE": "0.5",
        "PACER_FAKE_GATEWAY_SEED": "9",
        "PACER_FAKE_GATEWAY_PORT": "9999",
    }
    settings = load_settings(["--p-retryable", "0.1", "--guid-min-interval-ms", '{"g": 250}'], env)
    assert settings.port == 9999 and settings.host == "127.0.0.1"
    assert settings.config.p_retryable == 0.1
    assert settings.config.seed == 9
    assert settings.config.guid_min_interval_ms == {"g": 250.0}
