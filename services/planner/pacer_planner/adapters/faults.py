"""Which errors are the environment's fault: the database or the broker being unavailable.

The intake loop retries a request that fails with one of these, for as long as it takes, and
never dead-letters it (``core.consume``). ``RefusedError`` (a statement past a server limit
for what it holds) is not among them: ``with_retry`` translates it out of the
``OperationalError`` family, and the store reports it as the request's fault.
"""

from __future__ import annotations

import psycopg
from confluent_kafka import KafkaException

from pacer_common.db.errors import TransientError
from pacer_common.kafka import ProduceError

ENVIRONMENT: tuple[type[BaseException], ...] = (
    TransientError,  # Postgres unavailable past with_retry's own deadline
    psycopg.OperationalError,  # connection lost, pool timeout (PoolTimeout is one)
    KafkaException,  # produce refused by the client, broker unreachable
    ProduceError,  # a produce not acknowledged within its timeout (dead-letter records too)
)
