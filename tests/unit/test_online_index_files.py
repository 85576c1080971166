"""The files of ``db/schema/indexes/`` and the names of partitions' indexes."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pacer_common.db.online_indexes import OnlineIndex, declared, partition_index_name


def test_each_declared_index_is_one_create_index_with_its_condition() -> None:
    tail, expire_due, bucket = declared()  # by file name
    assert (expire_due.name, expire_due.table, expire_due.when) == ("items_expire_due", "items", None)
    assert (tail.name, tail.table, tail.definition, tail.when) == ("audit_log_tail", "audit_log", "(xid, id)", None)
    assert (bucket.name, bucket.table) == ("items_guid_queued_bucket", "items")
    assert bucket.definition == ("((pacer_guid_crc(guid) % 5760), guid)\n"
                                 "    WHERE status IN ('pending', 'waiting_retry')")
    assert bucket.when == "pacer_guid_crc('') IS NOT NULL"


def test_a_file_that_is_not_one_plain_create_index_is_refused_with_what_is_expected() -> None:
    for text in ("CREATE INDEX CONCURRENTLY x ON items (guid);", "CREATE UNIQUE INDEX x ON items (guid);",
                 "CREATE INDEX x ON ONLY items (guid);", "-- nothing\n", "DROP INDEX x;",
                 "CREATE INDEX IF NOT EXISTS x ON items (guid);", "CREATE INDEX a ON items (guid); DROP TABLE items;"):
        with pytest.raises(ValueError, match="expected one 'CREATE INDEX <name> ON <table>"):
            OnlineIndex.parse("indexes/x.sql", text)
    parsed = OnlineIndex.parse("indexes/x.sql", "-- a comment\nCREATE INDEX x ON items (guid)\n WHERE held;\n")
    assert parsed == OnlineIndex("x", "items", "(guid)\n WHERE held", None)


def test_a_partitions_index_is_named_after_the_index_and_the_partitions_suffix() -> None:
    assert partition_index_name("items_guid_queued_bucket", "items", "items_default") == \
        "items_guid_queued_bucket_default"
    assert partition_index_name("items_guid_queued_bucket", "items", "items_p20261205") == \
        "items_guid_queued_bucket_p20261205"
    assert partition_index_name("ix", "items", "archive_2020") == "ix_archive_2020"


@given(st.text(alphabet=st.characters(min_codepoint=97, max_codepoint=122) | st.just("_") | st.just("账"),
               min_size=1, max_size=60),
       st.text(alphabet=st.characters(min_codepoint=48, max_codepoint=57), min_size=1, max_size=40))
def test_partition_index_names_fit_postgres_and_stay_apart(index: str, day: str) -> None:
    a = partition_index_name(index, "items", f"items_p{day}")
    b = partition_index_name(index, "items", f"items_p{day}0")
    assert len(a.encode()) <= 63 and len(b.encode()) <= 63
    assert a != b
    assert a == partition_index_name(index, "items", f"items_p{day}"), "the same every time"
