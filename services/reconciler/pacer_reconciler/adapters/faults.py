"""Which errors are the environment's fault, not an event row's: the database, the broker or
the leader lease being unavailable. A tail round that fails with one of these is retried with
back-off and skips nothing (``core.Reconciler``)."""

from __future__ import annotations

from confluent_kafka import KafkaException

from pacer_common.db.errors import TransientError
from pacer_common.db.leader import LeadershipLost
from pacer_common.kafka import ProduceError
from pacer_reconciler.ports import CursorMoved

ENVIRONMENT: tuple[type[BaseException], ...] = (
    TransientError, ProduceError, KafkaException, CursorMoved, LeadershipLost, OSError,
)
