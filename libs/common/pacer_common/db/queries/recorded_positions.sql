-- A consumer group's positions on a topic as this database recorded them (consumer_positions):
-- in a database restored from a backup, where the group had got to with what the backup holds.
SELECT kafka_partition, next_offset FROM consumer_positions
WHERE group_id = %(group_id)s AND topic = %(topic)s
