"""Buckets of guids (CRC modulo GUID_BUCKETS) that make up a sender's partitions exactly."""
from __future__ import annotations

import re
import zlib

from hypothesis import given
from hypothesis import strategies as st

from pacer_common.db.online_indexes import declared
from pacer_common.domain.ids import Guid
from pacer_sender.adapters.postgres import _sql
from pacer_sender.domain.partitions import GUID_BUCKETS, buckets_of, partition_of

DIVIDING = [n for n in range(1, 257) if GUID_BUCKETS % n == 0]


def test_common_partition_counts_divide_the_buckets() -> None:
    for n in (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128):
        assert GUID_BUCKETS % n == 0, n


def test_a_partitions_buckets_are_every_nth_from_it_and_shared_ones_come_once() -> None:
    assert buckets_of([(16, 3)]) == list(range(3, GUID_BUCKETS, 16))
    both = buckets_of([(16, 3), (16, 3), (8, 3)])  # the same partition of both lane topics, and a coarser count
    assert both == sorted(set(range(3, GUID_BUCKETS, 8)))
    assert buckets_of([]) == []


def test_a_count_that_does_not_divide_the_buckets_has_none() -> None:
    assert buckets_of([(16, 3), (7, 1)]) is None
    assert buckets_of([(256, 0)]) is None
    assert buckets_of([(0, 0)]) is None


@given(guid=st.text(min_size=1, max_size=40), n=st.sampled_from(DIVIDING), data=st.data())
def test_a_guid_is_in_a_partitions_buckets_exactly_when_it_is_in_the_partition(guid: str, n: int, data) -> None:
    p = data.draw(st.integers(0, n - 1))
    bucket = zlib.crc32(guid.encode()) % GUID_BUCKETS
    assert (bucket in set(buckets_of([(n, p)]) or [])) == (partition_of(Guid(guid), n) == p)


def test_the_index_and_the_sweep_take_the_same_modulus_as_the_domain() -> None:
    """The sweep's bucket probes can use the index only if their expression is the index's."""
    (index,) = [i for i in declared() if i.name == "items_guid_queued_bucket"]
    assert re.findall(r"pacer_guid_crc\(guid\) % (\d+)", index.definition) == [str(GUID_BUCKETS)]
    sweep = _sql("waiting_guids")
    assert set(re.findall(r"pacer_guid_crc\((?:i\.)?guid\) %% (\d+)", sweep)) == {str(GUID_BUCKETS)}
