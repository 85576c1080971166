"""The Control API's pure parts: permission table, CSV rows, limits, dry runs, views, auth."""

from __future__ import annotations

import asyncio
import hashlib
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain.ids import RequestId
from pacer_common.domain.limits import Pacing, parse_limits
from pacer_common.domain.requests import JobRequest
from pacer_common.domain.tokens import Role, new_token, token_hash
from pacer_common.domain.validation import prepare
from pacer_control.core import MISSING_TOKEN, UNKNOWN_TOKEN, Control
from pacer_control.domain import report
from pacer_control.domain.dryrun import DryRunError, dry_run
from pacer_control.domain.errors import Forbidden, Unauthorized
from pacer_control.domain.filters import AuditPosition
from pacer_control.domain.permissions import FIELD_ACTIONS, RULES, Principal, may, refusal
from pacer_control.domain.reuse import CostPaced
from pacer_control.domain.views import failure_categories, limits_shown, not_resendable, shown, sum_counts
from pacer_planner.domain.planning import PlanError, plan
from pacer_sender.domain.pacing import Limits

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


# ---- permissions ----------------------------------------------------------------------------


def test_roles_are_cumulative_and_refusals_name_the_role_needed() -> None:
    for action, rule in RULES.items():
        allowed = [r for r in Role if may(r, action)]
        # Everything from the least role up, nothing below it.
        assert allowed == list(Role)[list(Role).index(rule.role):], action
    assert refusal(Role.OPERATOR, "jobs.terminate") == "role 'operator' may not terminate jobs; needs 'tech_admin'"
    assert refusal(Role.TECH_ADMIN, "tokens.create") == "role 'tech_admin' may not create API tokens; needs 'admin'"
    assert refusal(Role.ADMIN, "guids.release_lock") is None
    assert set(RULES) >= FIELD_ACTIONS
    assert Principal("alice", Role.OPERATOR).actor == "token:alice"


def test_the_operator_role_covers_the_day_to_day_actions() -> None:
    operator = {a for a in RULES if may(Role.OPERATOR, a)}
    assert {"jobs.view", "jobs.pause", "jobs.resume", "jobs.cancel", "items.retry", "items.cancel",
            "guids.pause", "guids.resume", "audit.view", "requests.dry_run", "reports.view"} <= operator
    assert not operator & {"jobs.terminate", "locks.view", "guids.limits", "gateway.test_send", "guids.leases",
                           "guids.release_lock", "jobs.budget", "tokens.create"}


class _Tokens:
    """An in-memory stand-in for the token lookup of ControlStore."""

    def __init__(self, **tokens: Role) -> None:
        self.by_hash = {token_hash(t): Principal(f"name-{t}", r) for t, r in tokens.items()}

    async def principal(self, h: str) -> Principal | None:
        return self.by_hash.get(h)


def test_authenticate_reads_bearer_tokens_and_authorize_applies_the_table() -> None:
    ctl = Control(_Tokens(secret=Role.TECH_ADMIN))  # type: ignore[arg-type]  # a token store fake with only the lookups authenticate uses

    def auth(header: str | None) -> Any:
        return asyncio.run(ctl.authenticate(header))

    assert auth("Bearer secret") == Principal("name-secret", Role.TECH_ADMIN)
    assert auth("bearer   secret ").role is Role.TECH_ADMIN
    for header, why in [(None, MISSING_TOKEN), ("", MISSING_TOKEN), ("Bearer", MISSING_TOKEN),
                        ("Basic secret", MISSING_TOKEN), ("Bearer other", UNKNOWN_TOKEN)]:
        with pytest.raises(Unauthorized, match=why):
            auth(header)
    who = auth("Bearer secret")
    Control.authorize(who, "jobs.terminate")
    with pytest.raises(Forbidden, match="needs 'admin'"):
        Control.authorize(who, "guids.release_lock")


def test_tokens_are_random_and_stored_as_sha256() -> None:
    a, b = new_token(), new_token()
    assert a != b and len(a) >= 40
    assert token_hash(a) == hashlib.sha256(a.encode()).hexdigest()


# ---- report ---------------------------------------------------------------------------------


def test_report_lines_are_csv_with_no_formulas() -> None:
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert report.header() == ",".join(report.COLUMNS) + "\r\n"
    text = report.lines([("i1", "=HYPERLINK(1)", "+86 123", "failed", 2, None, 'said "no", twice', at)])
    assert text == "i1,'=HYPERLINK(1),'+86 123,failed,2,,\"said \"\"no\"\", twice\",2026-01-02T03:04:05+00:00\r\n"
    assert report.filename(RequestId("campaign/../x y")) == "pacer-report-campaign_.._x_y.csv"


# ---- limits ---------------------------------------------------------------------------------


def test_hot_limits_are_the_senders_limits_and_keep_them_valid() -> None:
    assert issubclass(Limits, Pacing) and set(Limits.model_fields) == set(Pacing.model_fields)
    stored = parse_limits({"quiet_hours": "22:00-08:00", "online_reserve": "0.3"})
    assert stored == {"quiet_hours": "22:00-08:00", "online_reserve": 0.3}


def test_limits_are_validated_before_they_are_stored() -> None:
    assert parse_limits({"min_interval_s": "2", "per_hour": None}) == {"min_interval_s": 2.0, "per_hour": None}
    cases: list[tuple[dict[str, Any], str]] = [({"min_interval": 1}, "unknown limit"), ({"min_interval_s": None}, "cannot be null"),
                     ({"quiet_hours": "22-8"}, "22:00-08:00"), ({"timezone": "Mars/Base"}, "unknown time zone"),
                     ({"online_reserve": 1}, "less than 1"), ({"per_day": 0}, "greater than 0"),
                     ({"jitter_s": float("nan")}, "finite"), ({}, "at least one")]
    for bad, why in cases:
        with pytest.raises(ValueError, match=why):
            parse_limits(bad)


# ---- dry run --------------------------------------------------------------------------------


def _req(**changes: Any) -> JobRequest:
    base: dict[str, Any] = {
        "request_id": "r-1", "kind": "campaign", "created_by": "ops:alice",
        "message": {"content": "Hello {name}"},
        "targets": {"mode": "snapshot", "items": [
            {"guid": "g1", "to_id": "a", "vars": {"name": "A"}},
            {"guid": "g1", "to_id": "b", "vars": {"name": "B"}},
            {"guid": "g2", "to_id": "a", "vars": {"name": "C"}}]},
    }
    base.update(changes)
    return JobRequest.model_validate(base)


def _dry_run(req: JobRequest, samples: int = 5) -> Any:
    return dry_run(prepare(req, NOW), NOW, samples)


def test_dry_run_reports_items_shards_and_samples() -> None:
    d = _dry_run(_req(budget={"max_sends": 2}), samples=2)
    assert (d.items, d.shards, d.lane, d.priority, d.template_fields) == (3, {"g1": 2, "g2": 1}, "batch", 3, ["name"])
    assert [(s.guid, s.to_id, s.content) for s in d.samples] == [("g1", "a", "Hello A"), ("g1", "b", "Hello B")]
    assert d.warnings == [("budget.max_sends (2) is below the 3 items: the job pauses when the budget is used up, "
                           "until an admin confirms a larger one")]


BROKEN = [
    {"expire_at": (NOW - timedelta(minutes=1)).isoformat()},
    {"message": {"content": "Hello {name.upper}"}},
    {"message": {"content": "Hello {name"}},
    {"message": {"content": "Hello {surname}"}},
    {"targets": {"items": [{"guid": "g1", "to_id": "a", "vars": {"name": "A"}},
                           {"guid": "g1", "to_id": "a", "vars": {"name": "A"}}]}},
]


@pytest.mark.parametrize("change", BROKEN)
def test_dry_run_refuses_what_the_planner_refuses_in_its_words(change: dict[str, Any]) -> None:
    req = _req(**change)
    with pytest.raises(PlanError) as planner:
        plan(req, NOW)
    with pytest.raises(DryRunError) as ours:
        prepare(req, NOW)
    assert str(ours.value) == str(planner.value)


def test_dry_run_agrees_with_the_planner_on_a_valid_request() -> None:
    req = _req()
    p, d = plan(req, NOW), _dry_run(req, samples=10)
    per_guid: dict[str, int] = {}
    for key, n in p.shards.items():  # keyed by guid, or by (guid, sub) where a guid is split
        guid = key[0] if isinstance(key, tuple) else key
        per_guid[guid] = per_guid.get(guid, 0) + n
    assert d.shards == per_guid and d.items == len(p.items) and d.priority == p.priority
    assert [(s.guid, s.to_id, s.content) for s in d.samples] == [(i.guid, i.to_id, i.content) for i in p.items]


# ---- views ----------------------------------------------------------------------------------


def test_counts_and_failure_categories() -> None:
    assert sum_counts([{"pending": 2, "failed": 1}, {"pending": 3, "confirmed": 0}]) == {"failed": 1, "pending": 5}
    got = failure_categories([
        {"error_class": "needs_human", "status": "failed", "n": 2},
        {"error_class": "retryable", "status": "waiting_retry", "n": 5},
        {"error_class": "needs_human", "status": "abandoned", "n": 4},
    ])
    assert got == [
        {"error_class": "needs_human", "total": 6, "by_status": {"abandoned": 4, "failed": 2}},
        {"error_class": "retryable", "total": 5, "by_status": {"waiting_retry": 5}},
    ]


@given(st.none() | st.integers(0, 2**64 - 1), st.integers(0, 2**63 - 1))
def test_an_audit_position_reads_back_as_written(xid: int | None, entry: int) -> None:
    position = AuditPosition(xid, entry)
    assert AuditPosition.parse(str(position)) == position


@pytest.mark.parametrize("text", ["", ".", "1.", ".1", "1.2.3", "-1", "1e3", "٣", f"{2**64}.1", f"1.{2**63}"])
def test_an_audit_position_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ValueError):
        AuditPosition.parse(text)


# ---- a job's counts, kept by what their read cost -------------------------------------------


def test_a_read_is_kept_in_proportion_to_what_it_took_and_a_quick_one_not_at_all() -> None:
    paced: CostPaced[str, int] = CostPaced(share=0.05, fresh_s=0.02)
    paced.keep("big", 1, took_s=0.15, now=NOW)  # kept 19 × 0.15 s = 2.85 s: reads take 5% of the time
    paced.keep("small", 2, took_s=0.019, now=NOW)  # quicker than the floor: read afresh every time
    assert paced.get("big", NOW + timedelta(seconds=2.84)) == 1
    assert paced.get("small", NOW) is None
    paced.keep("big", 3, took_s=0.15, now=NOW)
    paced.keep("big", 4, took_s=0.001, now=NOW)  # a quick read of the same key drops what was kept
    assert paced.get("big", NOW) is None
    paced.keep("slow", 5, took_s=30, now=NOW)  # a read slowed by a busy server: kept 5 s, not 570
    assert paced.get("slow", NOW + timedelta(seconds=4.9)) == 5
    assert paced.get("slow", NOW + timedelta(seconds=5)) is None


def test_a_due_read_is_made_by_one_caller_while_the_others_are_given_what_was_kept() -> None:
    paced: CostPaced[str, int] = CostPaced(share=0.05, fresh_s=0.02, max_s=5)
    paced.keep("job", 1, took_s=0.2, now=NOW)  # kept 3.8 s
    due = NOW + timedelta(seconds=3.8)
    assert paced.get("job", due) is None  # the first caller reads it again
    assert paced.get("job", due + timedelta(seconds=0.1)) == 1  # the others meanwhile: what was kept
    paced.keep("job", 2, took_s=0.2, now=due + timedelta(seconds=0.2))
    assert paced.get("job", due + timedelta(seconds=0.3)) == 2
    # a read that never came back (its request failed): the next caller reads once max_s is over
    assert paced.get("job", due + timedelta(seconds=4.0)) is None
    assert paced.get("job", due + timedelta(seconds=8.9)) == 2
    assert paced.get("job", due + timedelta(seconds=9.0)) is None


def test_what_was_kept_is_forgotten_on_an_operators_action() -> None:
    paced: CostPaced[str, int] = CostPaced(share=0.05, fresh_s=0.02)
    paced.keep("job", 1, took_s=0.2, now=NOW)
    paced.forget("job")
    paced.forget("never kept")
    assert paced.get("job", NOW) is None


def test_kept_reads_are_bounded_the_least_recently_read_going_first() -> None:
    paced: CostPaced[int, int] = CostPaced(share=0.5, fresh_s=0, size=3)  # each kept 1 s
    for k in range(4):
        paced.keep(k, k, took_s=1, now=NOW)
    assert [paced.get(k, NOW) for k in range(4)] == [None, 1, 2, 3]
    paced.keep(1, 10, took_s=1, now=NOW)  # read again: the most recent
    paced.keep(4, 4, took_s=1, now=NOW)
    assert [paced.get(k, NOW) for k in range(5)] == [None, 10, None, 3, 4]


@pytest.mark.parametrize("share", [0, -0.1, 1.5])
def test_a_share_outside_zero_to_one_is_refused(share: float) -> None:
    with pytest.raises(ValueError, match="share must be in"):
        CostPaced(share, 0.02)


def test_a_share_of_one_keeps_nothing() -> None:
    paced: CostPaced[str, int] = CostPaced(share=1, fresh_s=0)
    paced.keep("a", 1, took_s=5, now=NOW)
    assert paced.get("a", NOW) is None


def test_an_audited_value_reads_as_it_was_written_not_as_json_escapes() -> None:
    """The audit page shows an action's before and after: text as it is (a tenant named
    'acme' in quotes, Chinese characters), anything else as JSON with its characters."""
    assert shown("tenant 'acme' is unknown") == "tenant 'acme' is unknown"
    assert shown({"reason": "客户要求", "min_interval_s": 2.0}) == '{"min_interval_s": 2.0, "reason": "客户要求"}'
    assert shown(3) == "3" and shown(True) == "true"


def test_a_guid_goes_by_its_own_limits_and_every_guid_s_it_does_not_set_name_by_name() -> None:
    assert limits_shown({"b": 2, "a": 0}, {"a": 1, "c": 3}) == [("a", 0, False), ("b", 2, False), ("c", 3, True)]
    assert limits_shown(None, {"c": 3}) == [("c", 3, True)]
    assert limits_shown("not an object", {}) == [], "a row that is not an object counts as none"


def test_a_dead_letter_is_offered_for_republishing_only_when_it_is_a_whole_json_object() -> None:
    class Letter:
        def __init__(self, value: bytes, cut: str | None = None) -> None:
            self.value, self.cut = value, cut

        def not_republishable(self) -> str | None:
            return None if self.cut is None else f"the record holds only part ({self.cut})"

    assert not_resendable(Letter(b'{"request_id": "r-1"}')) is None
    assert (not_resendable(Letter(b'{"request_id": "r-1"', "first 1000 bytes"))
            == "the record holds only part (first 1000 bytes)")
    assert (why := not_resendable(Letter(b'{"request_id": "r-1"'))) is not None and why.startswith("its bytes are not JSON")
    assert (why := not_resendable(Letter(b"[1, 2]"))) is not None and "a JSON list, not an object" in why
