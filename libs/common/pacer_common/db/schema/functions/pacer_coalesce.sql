-- Coalescing of ticket notifications: a newer status version of the same business id
-- supersedes older ones not yet sent; an older version arriving late is superseded at once.
-- Items already in flight finish. Returns the number of items superseded.
--
-- A business id is a tenant's own (two tenants may both have a ticket 42): a chain is the jobs
-- of one tenant with one coalesce_key, and so is its lock. Every reader of a chain matches on
-- both (pacer_begin_send, pacer_begin_send_many, pacer_compensate, pacer_retry_items,
-- pacer_resolve_unverified, pacer_prune_jobs); the key stored is the business id alone.
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
    PERFORM pg_advisory_xact_lock(hashtext('pacer.coalesce:' || j.tenant || ':' || j.coalesce_key));
    SELECT array_agg(i.item_id) INTO ids
    FROM items i JOIN jobs o ON o.job_id = i.job_id
    WHERE o.coalesce_key = j.coalesce_key AND o.tenant = j.tenant AND i.status IN ('pending', 'waiting_retry')
      AND (o.coalesce_version < j.coalesce_version
           OR (o.job_id = p_job AND EXISTS (SELECT 1 FROM jobs n WHERE n.coalesce_key = j.coalesce_key
                                                                 AND n.tenant = j.tenant
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
