-- The release sweep: held items whose holds are all lifted go pending → pending
-- ('ItemReleased'), which makes the reconciler publish their commands again. It works
-- through the release requests (hold_releases) the hold-lifted triggers record, not through
-- every held item, so a paused job with a million held items costs nothing while it stays
-- paused. A request is kept for a while after it finds nothing left to release, so that an
-- item marked held by a claim that read the hold just before it was lifted is still picked
-- up. Each scope's key is converted once, in plpgsql, under its own IF (SQL promises no
-- evaluation order, so a query casting every scope's key could cast a job's uuid to bigint).
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
            LEFT JOIN guid_states h ON h.guid = i.guid
            WHERE i.held AND i.status = 'pending'
              AND (i.job_id = k_job OR i.shard_id = k_shard OR i.guid = k_guid)
              AND pacer_hold_reason(j.status, j.paused_reason, s.status, s.paused_reason,
                                    pacer_guid_hold(g.paused_reason, h.state::text, h.reason)) IS NULL
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
