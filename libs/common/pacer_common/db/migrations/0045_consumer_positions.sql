-- Where a consumer group had read to, kept in the database that holds what it did with what it
-- read. The planner writes a partition's next offset once a request's effects are durable (its
-- job committed, or its dead-letter record acknowledged), before it commits that offset to
-- Kafka. So every request below a stored position has its effects in this database, and a copy
-- of the database restored from a backup holds the position that matches it: `pacer
-- rewind-groups` takes the planners' group back to it, past a request read before the restore
-- point whose job was stored after it (the broker's timestamps alone would skip that request).
CREATE TABLE IF NOT EXISTS consumer_positions (
    group_id        text        NOT NULL,
    topic           text        NOT NULL,
    kafka_partition integer     NOT NULL,
    next_offset     bigint      NOT NULL,
    recorded_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (group_id, topic, kafka_partition)
);
