"""Which errors are the environment's fault: the database or the broker being unavailable.

The intake loop retries a request that fails with one of these, for as long as it takes, and
never dead-letters it (``core.consume``). ``RefusedError`` (a statement past a server limit
for what it holds) is not among them: ``with_retry`` translates it out of the
``OperationalError`` family, and the store reports it as the request's fault. Nor is Kafka
refusing one record for what it is (:data:`RECORD_FAULTS`: its size or its shape): waiting
cannot help, so the dead-letter producer keeps what it can of such a record instead
(``adapters.kafka``) and never lets the refusal out as a ``KafkaException``.
"""

from __future__ import annotations

import psycopg
from confluent_kafka import KafkaError, KafkaException

from pacer_common.db.errors import TransientError
from pacer_common.kafka import ProduceError

ENVIRONMENT: tuple[type[BaseException], ...] = (
    TransientError,  # Postgres unavailable past with_retry's own deadline
    psycopg.OperationalError,  # connection lost, pool timeout (PoolTimeout is one)
    KafkaException,  # produce refused by the client, broker unreachable (a record's own fault: RECORD_FAULTS)
    ProduceError,  # a produce not acknowledged within its timeout (dead-letter records too)
)

# Kafka's refusals of one record for what it is, from the client or the broker: the same
# record is refused again however long one waits, while the next one may go through. A
# refusal for the topic (not authorized, unknown) or the broker's state stays the environment's.
RECORD_FAULTS = frozenset({
    KafkaError.MSG_SIZE_TOO_LARGE,  # past the producer's message.max.bytes, or the topic's max.message.bytes
    KafkaError.INVALID_MSG_SIZE,
    KafkaError.RECORD_LIST_TOO_LARGE,  # its batch (this record) past the topic's segment size
    KafkaError.INVALID_RECORD,  # the broker's validation of this record failed
})


def record_fault(err: object) -> KafkaError | None:
    """``err`` (a ``KafkaError``, or a ``KafkaException`` carrying one) if it is Kafka refusing
    one record for what it is, else None."""
    if isinstance(err, KafkaException) and err.args:
        err = err.args[0]
    return err if isinstance(err, KafkaError) and err.code() in RECORD_FAULTS else None
