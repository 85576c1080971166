-- The planners' group has handled every request of this partition below next_offset: their
-- effects are durable (consumer_positions, migration 0045). Any planner may write it, a
-- replaced one too: each value was true when written, and rewinding to one that is lower than
-- another planner's only reads more requests again (their jobs are found by request id).
INSERT INTO consumer_positions AS p (group_id, topic, kafka_partition, next_offset)
VALUES (%(group_id)s, %(topic)s, %(partition)s, %(next_offset)s)
ON CONFLICT (group_id, topic, kafka_partition)
DO UPDATE SET next_offset = EXCLUDED.next_offset, recorded_at = now()
