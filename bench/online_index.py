"""``bench index``: an index of ``db/schema/indexes/`` built over a loaded ``items``, the whole
table at once (``CREATE INDEX``) and online (migrate's build, partition by partition,
concurrently), while one writer updates items one by one: how long each build took and the
longest any write waited meanwhile; and, for scale, the longest of as many writes again
with no build at all."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import psycopg

from bench.common import CORES, drop_db, env_int, fresh_db, real_infra, seed_items
from pacer_common.db.online_indexes import declared, ensure_online_indexes


class _Writer(threading.Thread):
    """Updates a random one of ``items`` at a time, on one connection, until stopped; keeps the
    longest a write took."""

    def __init__(self, url: str, items: list[str]) -> None:
        super().__init__(daemon=True)
        self.url, self.items = url, items
        self.stop = threading.Event()
        self.longest_s, self.writes = 0.0, 0
        self._target, self._reached = 20, threading.Event()  # 20 writes before any build starts

    def made(self, writes: int, timeout_s: float = 120) -> None:
        """Return once ``writes`` writes in all have been made (at most ``timeout_s``)."""
        self._target = writes
        self._reached.clear()
        if self.writes < writes and not self._reached.wait(timeout_s):
            raise TimeoutError(f"{self.writes} of {writes} writes in {timeout_s} s")

    def run(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            while not self.stop.is_set():
                t0 = time.perf_counter()
                conn.execute("UPDATE items SET updated_at = now() WHERE item_id = %s", (random.choice(self.items),))
                self.longest_s = max(self.longest_s, time.perf_counter() - t0)
                self.writes += 1
                if self.writes >= self._target:
                    self._reached.set()
                self.stop.wait(0.005)


def _while_writing(url: str, items: list[str], build: Callable[[_Writer], object]) -> tuple[float, float, int]:
    """(seconds ``build`` took, the longest write meanwhile in seconds, writes made)."""
    writer = _Writer(url, items)
    writer.start()
    writer.made(20)  # writing before the build starts
    t0 = time.perf_counter()
    build(writer)
    took = time.perf_counter() - t0
    writer.stop.set()
    writer.join()
    return took, writer.longest_s, writer.writes


def index() -> str:
    guids, per_guid = 1000, env_int("BENCH_INDEX_ITEMS", 1_000_000) // 1000
    inf = real_infra()
    url = fresh_db(inf, "index")
    (ix,) = [i for i in declared() if i.name == "items_guid_queued_bucket"]
    try:
        seeded = seed_items(url, guids, per_guid)
        items = [str(c.item_id) for c in random.sample(seeded.commands, 1000)]
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE items")
            partitions = conn.execute("SELECT count(*) FROM pg_partition_tree('items') WHERE isleaf").fetchone()
            conn.execute(f"DROP INDEX {ix.name}")
            plain = _while_writing(url, items, lambda _: conn.execute(
                f"CREATE INDEX {ix.name} ON {ix.table} {ix.definition}"))
            conn.execute(f"DROP INDEX {ix.name}")
            online = _while_writing(url, items, lambda _: ensure_online_indexes(conn))
            # As many writes again with no build: the longest write a quiet table gives.
            alone = _while_writing(url, items, lambda writer: writer.made(20 + online[2]))
            valid = conn.execute("SELECT indisvalid FROM pg_index WHERE indexrelid = %s::regclass",
                                 (ix.name,)).fetchone()
        assert valid == (True,), valid
    finally:
        drop_db(url)
    n = guids * per_guid
    return (f"bench index: items={n} partitions={partitions[0] if partitions else 0} "
            f"plain_build_s={plain[0]:.2f} plain_longest_write_ms={plain[1] * 1000:.0f} "
            f"online_build_s={online[0]:.2f} online_longest_write_ms={online[1] * 1000:.0f} "
            f"online_build_ratio={online[0] / plain[0]:.2f} no_build_longest_write_ms={alone[1] * 1000:.0f} "
            f"writes={plain[2]}+{online[2]}+{alone[2]} cores={CORES}")
