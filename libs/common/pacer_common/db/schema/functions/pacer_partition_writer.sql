-- Called first by a transaction that may add unfinished items to a partition past retention
-- (an operator's retry of an old job's item, a requery page of a long-lived job: both stamped
-- with the job's creation time). It holds, shared, the lock pacer_prune_partition holds alone
-- for each partition it drops, and pacer_ensure_partitions for its whole run: no partition is
-- dropped while such a write is uncommitted (the guard would not see the new row, and the DROP
-- would take it with the partition), and such a write waits for a drop under way to end.
-- Writers do not wait for each other. Taking no table lock, it cannot deadlock with the
-- queries that read or write every partition of items (a generic plan locks them all).
CREATE OR REPLACE FUNCTION pacer_partition_writer() RETURNS void
LANGUAGE sql AS $fn$
    SELECT pg_advisory_xact_lock_shared(hashtext('pacer_partitions'))
$fn$;
