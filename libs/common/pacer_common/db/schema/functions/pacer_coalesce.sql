-- Coalescing of ticket notifications: a newer status version of the same business id
-- supersedes older ones not yet sent; an older version arriving late is superseded at once.
-- Items already in flight finish. Returns the number of items superseded.
CREATE OR REPLACE FUNCTION pacer_coalesce(p_job uuid)
RETURNS integer
LANGUAGE plpgsql AS $fn$
DECLARE
    j jobs%ROWTYPE;
    ids uuid[];
BEGIN
    SELECT * INTO j FROM jobs WHERE job_id = p_job;
    IF j.coalesce_key IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtext('pacer.coalesce:' || j.coalesce_key));
    SELECT array_agg(i.item_id) INTO ids
    FROM items i JOIN jobs o ON o.job_id = i.job_id
    WHERE o.coalesce_key = j.coalesce_key AND i.status IN ('pending', 'waiting_retry')
      AND (o.coalesce_version < j.coalesce_version
           OR (o.job_id = p_job AND EXISTS (SELECT 1 FROM jobs n WHERE n.coalesce_key = j.coalesce_key
                                                                 AND n.coalesce_version > j.coalesce_version)));
    IF ids IS NULL THEN
        RETURN 0;
    END IF;
    PERFORM pacer_transition(ids, '{pending,waiting_retry}', 'abandoned', 'ItemSuperseded',
        jsonb_build_object('business_id', j.coalesce_key, 'by_version', j.coalesce_version, 'error_class', 'superseded'),
        p_clear_lease => true, p_error_class => 'superseded',
        p_error => format('superseded by status version of business id %s', j.coalesce_key));
    RETURN cardinality(ids);
END
$fn$;
