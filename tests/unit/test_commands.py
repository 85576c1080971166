"""A job's item commands encoded in bulk are byte for byte what the model gives one by one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal
from uuid import uuid4

from hypothesis import given
from hypothesis import strategies as st

from pacer_common.domain import commands
from pacer_common.domain.commands import ItemCommand, JobCommands

SURROGATES: tuple[Literal["Cs"]] = ("Cs",)  # lone surrogates: no str JSON can carry them
text = st.text(st.characters(exclude_categories=SURROGATES), max_size=40)  # any str JSON can carry
when = st.none() | st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                                timezones=st.sampled_from([UTC])).map(lambda d: d + timedelta(0))
items = st.lists(st.tuples(text, st.integers(0, 2**62), text, text, text, text), max_size=5)


@given(text, st.integers(0, 9), text, when, when, items)
def test_bulk_encoding_matches_the_model_exactly(job_id, priority, kind, expire_at, not_before, rows) -> None:
    batch = JobCommands(job_id, priority, kind, expire_at, not_before, rows)
    models = [ItemCommand(item_id=r[0], job_id=job_id, shard_id=r[1], guid=r[2], to_id=r[3], content=r[4],
                          idem_key=r[5], priority=priority, kind=kind, expire_at=expire_at, not_before=not_before)
              for r in rows]
    assert list(batch) == models
    assert list(batch.encoded()) == [(m.guid, m.model_dump_json().encode()) for m in models]
    assert [ItemCommand.model_validate_json(b) for _, b in batch.encoded()] == models


def test_commands_given_the_same_fields_share_one_record_of_them_and_each_still_tells_its_own() -> None:
    """A sender holds up to twice its memory budget of commands: the set of given field
    names pydantic keeps per instance was half of each."""
    fields = dict(job_id="j", shard_id=1, guid="g", to_id="r", content="x", idem_key="k", priority=3,
                  kind="campaign")
    a, b = (ItemCommand.model_validate_json(ItemCommand(item_id=i, **fields).model_dump_json()) for i in ("1", "2"))
    assert a.model_fields_set is b.model_fields_set, "each command keeps a set of its own"
    assert a.model_fields_set == set(ItemCommand.model_fields)
    fewer = ItemCommand.model_validate({"item_id": "3", **fields})
    assert fewer.model_fields_set == {"item_id", *fields}, "a command given fewer fields reports those"
    assert fewer.model_dump(exclude_unset=True) == {"item_id": "3", **fields}
    again = ItemCommand.model_copy(fewer, update={"tenant": "t"})
    assert "tenant" in again.model_fields_set and "tenant" not in fewer.model_fields_set, "a copy's record is its own"


def fresh(s: str) -> str:
    """An equal string that is not the same object, as a driver decodes each row's."""
    return "".join(list(s))


def test_a_jobs_commands_share_its_strings_and_a_content_of_their_own_stays_theirs() -> None:
    """A refill's rows and the JSON parser give each command its own copy of the job's text
    (up to 2 KB): held once per item, that was most of a campaign command's memory."""
    text = "您好，欢迎参加本周的会员活动" * 20
    job = str(uuid4())

    def command(item: str, content: str, job_id: str = job) -> ItemCommand:
        return ItemCommand.model_validate({
            "item_id": item, "job_id": fresh(job_id), "shard_id": 0, "guid": fresh("wm-guid-0001"), "to_id": fresh("wm-customer-01"),
            "content": fresh(content), "idem_key": fresh(f"k{item}"), "priority": 50, "kind": fresh("campaign"),
            "tenant": fresh("acme"), "traceparent": fresh("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")})

    a, b = command("1", text), command("2", text)
    for field in ("content", "job_id", "kind", "tenant", "traceparent"):
        assert getattr(a, field) is getattr(b, field), f"{field} is held once per command"
    assert a.guid is not b.guid and a.idem_key != b.idem_key, "an item's own fields stay its own"
    own = command("3", text + "!")
    assert own.content == text + "!" and own.kind is a.kind, "a content rendered per target is kept as given"
    other = command("4", text, job_id=str(uuid4()))
    assert other.content == text and other.content is not a.content, "another job shares nothing with this one"
    assert ItemCommand.model_validate_json(b.model_dump_json()) == b, "what is shared changes no value"


def test_the_strings_kept_for_sharing_are_bounded_however_many_jobs_pass() -> None:
    for _ in range(commands._JOB_STRINGS_MAX + 10):
        ItemCommand(item_id="1", job_id=str(uuid4()), shard_id=0, guid="g", to_id="r", content="x", idem_key="k",
                    priority=50, kind="campaign")
    assert 0 < len(commands._JOB_STRINGS) <= commands._JOB_STRINGS_MAX
