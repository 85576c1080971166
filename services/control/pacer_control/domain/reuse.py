"""Reads kept by what they cost.

A job's counts are one aggregate over its shards: 1.5 ms at a thousand shards, 15 ms at ten
thousand, about 150 ms at a hundred thousand (``bench console``). The console's job page reads
them every second while it is shown, and API clients poll them; at a fleet's scale, every tab
and every client would keep a database connection busy for that long, every second.

:class:`CostPaced` keeps such a read for a time in proportion to what it took: a read that took
``t`` is reused for ``t * (1 - share) / share`` after it (19 t at the default 5%), so however
many callers ask, the database spends at most ``share`` of its time re-reading it. A read
quicker than ``fresh_s`` is never kept: on a job of ordinary size every caller reads afresh, as
if there were no keeping at all.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass(frozen=True)
class Totals:
    """A job's items per status and shards per status, as read at ``read_at``."""

    counts: dict[str, Any]
    shard_statuses: dict[str, int]
    read_at: datetime


@dataclass(frozen=True)
class _Kept(Generic[V]):
    value: V
    until: datetime


class CostPaced(Generic[K, V]):
    """Values read at a cost, each kept ``took * (1 - share) / share`` after its read (none
    that took less than ``fresh_s``); at most ``size`` of them, the most recently read."""

    def __init__(self, share: float, fresh_s: float, size: int = 1024) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], not {share}")
        self.share, self.fresh_s, self.size = share, fresh_s, size
        self._kept: OrderedDict[K, _Kept[V]] = OrderedDict()

    def get(self, key: K, now: datetime) -> V | None:
        """The value kept for ``key``, if it is still to be reused at ``now``."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        if now >= kept.until:
            del self._kept[key]
            return None
        return kept.value

    def keep(self, key: K, value: V, took_s: float, now: datetime) -> None:
        """``value`` was read for ``key`` at ``now``, in ``took_s``."""
        reuse_s = took_s * (1 - self.share) / self.share
        if took_s < self.fresh_s or reuse_s <= 0:
            self._kept.pop(key, None)
            return
        self._kept[key] = _Kept(value, now + timedelta(seconds=reuse_s))
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
