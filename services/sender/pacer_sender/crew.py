"""What every guid worker shares: the executor, the stores, the memory budget, the lease
keeper, the knobs and the hooks the composition root plugs metrics into."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from pacer_common.domain.commands import ItemCommand
from pacer_common.domain.requests import Lane
from pacer_sender.core import Executed, Executor
from pacer_sender.domain.pacing import ClaimAhead, Limits
from pacer_sender.flow import Buffer
from pacer_sender.leasing import LeaseKeeper
from pacer_sender.ports import GuidQueueStore

# A claimed item waits for a quiet its guid keeps that ends at most this long after the item's
# turn, and gives its turn up to a longer one. The lease row's end of a quiet comes later than
# the pacer's own end of the same quiet by the writes in between (the rate limit's penalty
# written after the answer, the claim's answer read after its statement): a claim that finds
# the guid's own quiet on its row waits out that difference instead of a round through the
# reconciler. The sender's composition root keeps it within a quarter of the send deadline.
QUIET_WAIT_S = 1.0


@dataclass
class WorkerConfig:
    shed_every_s: float = 30.0  # how often a guid with batch work checks it for shedding
    horizon_s: float = 60.0  # a worker with nothing due sooner than this ends (the sweep restarts it)
    error_attempts: int = 3  # attempts of an item whose execution raises a bug
    error_backoff_s: float = 1.0  # first pause after such an attempt; doubles, at most 60 s
    max_idle_s: float = 30.0  # a waiting guid re-checks at least this often (changes wake it sooner)
    lease_retry_s: float = 1.0  # pause after the database or the guid lease was not to be had
    # Up to this fraction of a batch interval, drawn per guid, holds the first campaign send of
    # a rested guid that batch work reaches (``GuidPacer.spread_start``); 0: none is held.
    first_send_spread: float = 0.0
    quiet_wait_s: float = QUIET_WAIT_S  # see QUIET_WAIT_S


@dataclass
class Hooks:
    on_executed: Callable[[ItemCommand, Executed], None] = lambda cmd, res: None
    on_internal_error: Callable[[], None] = lambda: None
    on_shed: Callable[[int], None] = lambda n: None
    job_interval: Callable[[str], float | None] = lambda job_id: None  # a job's own interval per guid
    job_weight: Callable[[str], float | None] = lambda job_id: None  # a job's weight in the guid's fair share
    # A send's call started this long after it was allowed (its pacing gap over, or its pick).
    on_send_delay: Callable[[Lane, float], None] = lambda lane, seconds: None


@dataclass(eq=False)
class Crew:
    executor: Executor
    limits: Callable[[str], Limits]  # guid → its current limits (hot-adjustable)
    queue: GuidQueueStore
    buffer: Buffer
    leases: LeaseKeeper
    config: WorkerConfig
    hooks: Hooks
    rng: random.Random = field(default_factory=random.Random)
    clock: Callable[[], float] = time.monotonic
    progress: asyncio.Event = field(default_factory=asyncio.Event)  # set whenever an item in hand finishes
    owns: Callable[[str], bool] = lambda guid: True  # is this guid's partition assigned to this sender?
    ahead: ClaimAhead = field(default_factory=ClaimAhead)  # how long before a gap's end its item is claimed
