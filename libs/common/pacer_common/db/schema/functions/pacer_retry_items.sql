-- Manual retries of items (the Control API's, from one to 10,000 in a transaction):
-- pacer_compensate for each, then every touched shard's and job's total, a shard or job the
-- reconciler had completed running again with its compensations. Returns each item's answer
-- with its place in p_items (``ord``).
--
-- The compensations are open from the commit on, and their shards and jobs with them: a sender
-- never finds one in a job still marked completed, and a reconciler segment completing a job's
-- last other shard waits for the job's row and reads the shard open.
--
-- Lock order: the batch's coalescing locks (ticket chains), then the reconciler's
-- (apply_counts, refresh_shards, lock_jobs): the projected counts
-- (each compensation's pending count, the items taken in shard order), then the shard rows,
-- then the job rows, each in key order. A segment holds its shards' counts and rows while it
-- waits for a job's row; a retry that held the job's row while it took those (as every retry
-- once did from its first item) could deadlock with it.
CREATE OR REPLACE FUNCTION pacer_retry_items(p_items uuid[], p_actor text, p_priority smallint DEFAULT NULL)
RETURNS TABLE (ord bigint, item_id uuid, outcome text, new_item uuid, message text)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
DECLARE
    r record;
    c record;
    shard_ids bigint[] := '{}';
    job_ids uuid[] := '{}';
BEGIN
    PERFORM pacer_partition_writer();  -- a compensation may land in a partition a prune would drop
    -- Every coalescing lock of the batch first, in one order (pacer_compensate takes each again
    -- before its item's row): taken item by item, in shard order, two bulk retries over two
    -- ticket chains could each hold one and wait for the other's.
    PERFORM pg_advisory_xact_lock(x.h)
    FROM (SELECT DISTINCT hashtext('pacer.coalesce:' || k.tenant || ':' || k.coalesce_key) AS h
          FROM items i JOIN jobs k ON k.job_id = i.job_id
          WHERE i.item_id = ANY(p_items) AND k.coalesce_key IS NOT NULL) x
    ORDER BY x.h;
    FOR r IN SELECT u.id, u.n, i.shard_id, i.job_id
             FROM unnest(p_items) WITH ORDINALITY AS u(id, n) LEFT JOIN items i ON i.item_id = u.id
             ORDER BY i.shard_id NULLS LAST, u.id, u.n LOOP
        SELECT * INTO c FROM pacer_compensate(r.id, p_actor, p_priority);
        IF c.outcome = 'created' THEN
            shard_ids := shard_ids || r.shard_id;
            job_ids := job_ids || r.job_id;
        END IF;
        ord := r.n;
        item_id := r.id;
        outcome := c.outcome;
        new_item := c.new_item;
        message := c.message;
        RETURN NEXT;
    END LOOP;
    IF cardinality(shard_ids) = 0 THEN
        RETURN;
    END IF;
    PERFORM 1 FROM shards s WHERE s.shard_id = ANY(shard_ids) ORDER BY s.shard_id FOR NO KEY UPDATE;
    UPDATE shards s
    SET total = s.total + a.n, status = CASE WHEN s.status = 'completed' THEN 'running' ELSE s.status END
    FROM (SELECT x AS shard_id, count(*) AS n FROM unnest(shard_ids) AS x GROUP BY x) AS a
    WHERE s.shard_id = a.shard_id;
    PERFORM 1 FROM jobs j WHERE j.job_id = ANY(job_ids) ORDER BY j.job_id FOR NO KEY UPDATE;
    UPDATE jobs j
    SET total = j.total + a.n,
        status = CASE WHEN j.status = 'completed' THEN 'running' ELSE j.status END,
        finished_at = CASE WHEN j.status = 'completed' THEN NULL ELSE j.finished_at END
    FROM (SELECT x AS job_id, count(*) AS n FROM unnest(job_ids) AS x GROUP BY x) AS a
    WHERE j.job_id = a.job_id;
END
$fn$;
