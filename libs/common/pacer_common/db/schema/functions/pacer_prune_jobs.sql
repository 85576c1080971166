-- Delete up to ``p_limit`` finished jobs created before ``p_before`` whose items are all gone
-- (their time partitions dropped past retention), with their shards, shard counts and target
-- pages; returns how many jobs went. A job that still has any item, in any partition (the
-- default one included), stays, and so does every job not completed, cancelled or
-- terminated. So does a job whose events' partition is still kept: all of a job's items,
-- and so all of its events, are in the partitions of its creation time, and an events
-- partition is dropped only once every reconciler cursor has passed it — a reconciler that
-- lags past the items' retention still finds the job, its shards and counts of every event
-- it has yet to apply. One row per job or shard, not per item: deleted in small batches,
-- locked rows skipped (another run, or the Control API, has them).
--
-- A job of a ticket chain stays while a job of an older status version of its business id
-- (its tenant's coalesce_key) still has items. Whether an item is superseded is read from the jobs of its
-- business id (a retry, a send, a compensation: is there a newer version?): were the newer job
-- deleted while an item of an older one is still kept (its partition holding other unfinished
-- work), a retry of that item would be answered "not superseded" and its outdated status sent.
-- An older version with no items left has nothing to retry or send, whatever its status (a
-- paused one is never completed): it holds nothing back, and a chain's versions go together.
CREATE OR REPLACE FUNCTION pacer_prune_jobs(p_before timestamptz, p_limit integer DEFAULT 1000)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    ids uuid[];
    events_kept tstzrange[] := ARRAY(SELECT tstzrange(p.starts, p.ends) FROM pacer_partitions('item_events') p);
BEGIN
    SELECT array_agg(x.job_id) INTO ids FROM (
        SELECT j.job_id FROM jobs j
        WHERE j.created_at < p_before AND j.status IN ('completed', 'cancelled', 'terminated')
          AND NOT EXISTS (SELECT 1 FROM items i WHERE i.job_id = j.job_id)
          AND NOT j.created_at <@ ANY(events_kept)
          AND NOT EXISTS (SELECT 1 FROM jobs o WHERE o.coalesce_key = j.coalesce_key AND o.tenant = j.tenant
                                                 AND o.coalesce_version < j.coalesce_version
                                                 AND EXISTS (SELECT 1 FROM items i WHERE i.job_id = o.job_id))
        ORDER BY j.created_at
        LIMIT p_limit
        FOR UPDATE SKIP LOCKED
    ) x;
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    DELETE FROM shard_status_counts c USING shards s WHERE c.shard_id = s.shard_id AND s.job_id = ANY(ids);
    DELETE FROM shards WHERE job_id = ANY(ids);
    DELETE FROM job_target_pages WHERE job_id = ANY(ids);
    DELETE FROM jobs WHERE job_id = ANY(ids);
    RETURN cardinality(ids);
END
$fn$;
