"""Reads kept by what they cost.

A job's counts are one aggregate over its shards: 1.5 ms at a thousand shards, 15 ms at ten
thousand, about 150 ms at a hundred thousand (``bench console``). The console's job page reads
them every second while it is shown, and API clients poll them; at a fleet's scale, every tab
and every client would keep a database connection busy for that long, every second.

:class:`CostPaced` keeps such a read for a time in proportion to what it took: a read that took
``t`` is reused for ``t * (1 - share) / share`` after it (19 t at the default 5%), so however
many callers ask, the database spends at most ``share`` of its time re-reading it. A read
quicker than ``fresh_s`` is never kept: on a job of ordinary size every caller reads afresh, as
if there were no keeping at all. Nothing is kept longer than ``max_s``, however long its read
took (a read slowed by a busy server or event loop). Once a kept value is due, the first caller
reads it again and the others meanwhile are given the one kept, so a hundred tabs polling a job
make one read, not one each. An operator's action on the job forgets what was kept.
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


@dataclass
class _Kept(Generic[V]):
    value: V
    until: datetime
    reading_since: datetime | None = None  # a caller is reading it again


class CostPaced(Generic[K, V]):
    """Values read at a cost, each kept ``took * (1 - share) / share`` after its read, at most
    ``max_s`` (none that took less than ``fresh_s``); at most ``size`` of them, the most
    recently read."""

    def __init__(self, share: float, fresh_s: float, max_s: float = 5.0, size: int = 1024) -> None:
        if not 0 < share <= 1:
            raise ValueError(f"share must be in (0, 1], not {share}")
        self.share, self.fresh_s, self.max_s, self.size = share, fresh_s, max_s, size
        self._kept: OrderedDict[K, _Kept[V]] = OrderedDict()

    def get(self, key: K, now: datetime) -> V | None:
        """The value kept for ``key``, if it is still to be reused at ``now``; None if the
        caller is to read it. A value due is given to callers while another reads it again
        (for at most ``max_s``: a read that failed leaves it to the next caller)."""
        kept = self._kept.get(key)
        if kept is None:
            return None
        if now < kept.until:
            return kept.value
        if kept.reading_since is not None and now < kept.reading_since + timedelta(seconds=self.max_s):
            return kept.value
        kept.reading_since = now
        return None

    def forget(self, key: K) -> None:
        """What was kept for ``key`` is no longer true (an operator acted on it)."""
        self._kept.pop(key, None)

    def keep(self, key: K, value: V, took_s: float, now: datetime) -> None:
        """``value`` was read for ``key`` at ``now``, in ``took_s``."""
        reuse_s = min(self.max_s, took_s * (1 - self.share) / self.share)
        if took_s < self.fresh_s or reuse_s <= 0:
            self._kept.pop(key, None)
            return
        self._kept[key] = _Kept(value, now + timedelta(seconds=reuse_s))
        self._kept.move_to_end(key)
        while len(self._kept) > self.size:
            self._kept.popitem(last=False)
