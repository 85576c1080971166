-- pacer_release_held read a request's key with every scope's cast in one query
-- (r.key::uuid, r.key::bigint) and relied on the scope test to keep the wrong cast from
-- being evaluated. SQL promises no evaluation order: a plan that scans the shard index for
-- a job's request (a BitmapOr over the three scopes' indexes) casts the job's uuid to
-- bigint and fails, and the reconciler's sweep with it. Each scope's key is now converted
-- once, in plpgsql, under its own IF; the query compares typed values only.

CREATE OR REPLACE FUNCTION pacer_release_held(p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    ids uuid[];
    done integer := 0;
    k_job uuid;
    k_shard bigint;
    k_guid text;
BEGIN
    FOR r IN SELECT * FROM hold_releases ORDER BY requested_at FOR UPDATE SKIP LOCKED LOOP
        k_job := NULL;
        k_shard := NULL;
        k_guid := NULL;
        IF r.scope = 'job' THEN
            k_job := r.key::uuid;
        ELSIF r.scope = 'shard' THEN
            k_shard := r.key::bigint;
        ELSE
            k_guid := r.key;
        END IF;
        SELECT array_agg(c.item_id) INTO ids FROM (
            SELECT i.item_id
            FROM items i
            JOIN jobs j ON j.job_id = i.job_id
            JOIN shards s ON s.shard_id = i.shard_id
            LEFT JOIN guid_leases g ON g.guid = i.guid
            WHERE i.held AND i.status = 'pending'
              AND (i.job_id = k_job OR i.shard_id = k_shard OR i.guid = k_guid)
              AND pacer_hold_reason(j.status, j.paused_reason, s.status, s.paused_reason, g.paused_reason) IS NULL
            LIMIT p_limit - done
            FOR UPDATE OF i SKIP LOCKED
        ) AS c;
        IF ids IS NULL THEN
            DELETE FROM hold_releases h
            WHERE h.scope = r.scope AND h.key = r.key AND h.requested_at < now() - interval '30 seconds';
            CONTINUE;
        END IF;
        UPDATE items SET held = false WHERE item_id = ANY(ids);
        PERFORM pacer_transition(ids, '{pending}', 'pending', 'ItemReleased');
        done := done + cardinality(ids);
        EXIT WHEN done >= p_limit;
    END LOOP;
    RETURN done;
END
$fn$;
