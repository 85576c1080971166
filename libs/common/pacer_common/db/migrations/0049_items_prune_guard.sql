-- The prune guard of items (0027) asked whether a partition past retention still holds an
-- unfinished item with `i.status IN (SELECT t.from_status FROM item_transitions t)`, which no
-- index of items answers: each prune of an items partition read the whole partition under the
-- partitions lock (500,000 finished items: a Seq Scan, about 60-240 ms, every run, every old
-- partition). One literal list of the six statuses is no better before PostgreSQL 18 (still a
-- Seq Scan). Each status is now asked of the partial index that holds it, an index-only probe of
-- an empty range when the partition is finished (well under a millisecond):
--
--   pending, waiting_retry   items_guid_queued
--   claimed, submitted       items_guid_in_flight, items_lease
--   recovery_pending         items_recovery
--   unverified               items_unverified
--
-- They are the statuses an item can still leave: the from_status of item_transitions, which is
-- checked here, and by tests/integration/test_partitions.py against the schema of today (a
-- status an item can leave that the guard did not ask of would let its partition be dropped).
DO $check$
BEGIN
    IF (SELECT array_agg(DISTINCT t.from_status::text ORDER BY t.from_status::text) FROM item_transitions t)
       IS DISTINCT FROM ARRAY['claimed', 'pending', 'recovery_pending', 'submitted', 'unverified', 'waiting_retry'] THEN
        RAISE EXCEPTION 'the items prune guard asks of other statuses than item_transitions.from_status';
    END IF;
END
$check$;

UPDATE partitioned_tables SET guard = $g$SELECT 'holds unfinished items'
    WHERE EXISTS (SELECT 1 FROM %1$I i WHERE i.status IN ('pending', 'waiting_retry'))
       OR EXISTS (SELECT 1 FROM %1$I i WHERE i.status IN ('claimed', 'submitted'))
       OR EXISTS (SELECT 1 FROM %1$I i WHERE i.status = 'recovery_pending')
       OR EXISTS (SELECT 1 FROM %1$I i WHERE i.status = 'unverified')$g$
WHERE parent = 'items';
