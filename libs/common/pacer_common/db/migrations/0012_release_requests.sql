-- Release held items only where a hold was lifted, instead of scanning every held item on
-- every sweep: a paused job with a million held items must cost nothing while it stays
-- paused.
--
-- Lifting a hold (a job back to running, a shard out of paused, a guid's pause cleared) is
-- recorded by a trigger as a release request for that scope, whatever made the change.
-- pacer_release_held works through the requests. A request is kept for a while after it
-- finds nothing left to release, so that an item marked held by a claim that read the hold
-- just before it was lifted is still picked up.

CREATE TABLE hold_releases (
    scope        text NOT NULL CHECK (scope IN ('job', 'shard', 'guid')),
    key          text NOT NULL,
    requested_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (scope, key)
);

CREATE INDEX items_held_shard ON items (shard_id) WHERE held AND status = 'pending';
CREATE INDEX items_held_guid ON items (guid) WHERE held AND status = 'pending';

CREATE FUNCTION pacer_request_release() RETURNS trigger
LANGUAGE plpgsql AS $fn$
DECLARE
    k text;
BEGIN
    -- each table's own key column (a record's fields are resolved per trigger table)
    IF TG_TABLE_NAME = 'jobs' THEN
        k := NEW.job_id::text;
    ELSIF TG_TABLE_NAME = 'shards' THEN
        k := NEW.shard_id::text;
    ELSE
        k := NEW.guid;
    END IF;
    INSERT INTO hold_releases (scope, key) VALUES (TG_ARGV[0], k)
    ON CONFLICT (scope, key) DO UPDATE SET requested_at = now();
    RETURN NULL;
END
$fn$;

CREATE TRIGGER jobs_hold_lifted AFTER UPDATE OF status ON jobs
FOR EACH ROW WHEN (OLD.status <> 'running' AND NEW.status = 'running')
EXECUTE FUNCTION pacer_request_release('job');

CREATE TRIGGER shards_hold_lifted AFTER UPDATE OF status ON shards
FOR EACH ROW WHEN (OLD.status = 'paused' AND NEW.status <> 'paused')
EXECUTE FUNCTION pacer_request_release('shard');

CREATE TRIGGER guids_hold_lifted AFTER UPDATE OF paused_reason ON guid_leases
FOR EACH ROW WHEN (OLD.paused_reason IS NOT NULL AND NEW.paused_reason IS NULL)
EXECUTE FUNCTION pacer_request_release('guid');

-- Up to p_limit held items of the requested scopes whose holds are all lifted go
-- pending → pending ('ItemReleased'). Returns how many.
CREATE OR REPLACE FUNCTION pacer_release_held(p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    r record;
    ids uuid[];
    done integer := 0;
BEGIN
    FOR r IN SELECT * FROM hold_releases ORDER BY requested_at FOR UPDATE SKIP LOCKED LOOP
        SELECT array_agg(c.item_id) INTO ids FROM (
            SELECT i.item_id
            FROM items i
            JOIN jobs j ON j.job_id = i.job_id
            JOIN shards s ON s.shard_id = i.shard_id
            LEFT JOIN guid_leases g ON g.guid = i.guid
            WHERE i.held AND i.status = 'pending'
              AND ((r.scope = 'job' AND i.job_id = r.key::uuid)
                   OR (r.scope = 'shard' AND i.shard_id = r.key::bigint)
                   OR (r.scope = 'guid' AND i.guid = r.key))
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
