"""A job's item commands encoded in bulk are byte for byte what the model gives one by one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Literal

from hypothesis import given
from hypothesis import strategies as st

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
