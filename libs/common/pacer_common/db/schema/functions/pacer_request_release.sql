-- Lifting a hold (a job back to running, a shard out of paused, a guid's pause cleared),
-- whatever made the change, is recorded as a release request for that scope in
-- hold_releases; pacer_release_held works through the requests.
CREATE OR REPLACE FUNCTION pacer_request_release() RETURNS trigger
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
