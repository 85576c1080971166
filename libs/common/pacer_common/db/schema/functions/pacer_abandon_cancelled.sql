-- Those of the given items that wait to be sent (pending or waiting_retry) under a cancelled
-- job are abandoned, the way the job's cancel abandons them: pending / waiting_retry →
-- abandoned (ItemCancelled, scope job, error class cancelled), through pacer_transition, so a
-- claim racing it has exactly one winner. Returns the ids abandoned ('{}' when none).
--
-- The cancel (pacer_job_action, with this same transition) abandons what waits when it
-- commits; an item then in flight may come back to waiting later: a failed send scheduled
-- again (waiting_retry, then due), an in-doubt send verified or resolved as not delivered
-- (pending). Held like the items of a paused job, it would wait for a job that never runs
-- again, pending forever, and keep its week's partitions. So pacer_begin_send (a command of
-- such an item) and the reconciler's retry_due sweep (due_retry_due.sql) come here.
--
-- The ledger needs nothing: an item that waits holds no reserved key (the send that put it
-- back freed it: pacer_settle with release, ledger_released.sql, pacer_resolve_unverified),
-- and the abandonment comes before any claim. The event names p_actor, the one cancelling now
-- (the cancel itself, and a cancel again), else who cancelled the job (its paused_by, which
-- the cancel set).
DROP FUNCTION IF EXISTS pacer_abandon_cancelled(uuid[]);
CREATE OR REPLACE FUNCTION pacer_abandon_cancelled(p_ids uuid[], p_actor text DEFAULT NULL)
RETURNS uuid[]
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
DECLARE
    r record;
    gone uuid[] := '{}';
BEGIN
    IF p_ids IS NULL OR cardinality(p_ids) = 0 THEN
        RETURN gone;
    END IF;
    FOR r IN
        SELECT COALESCE(p_actor, j.paused_by) AS actor, array_agg(i.item_id ORDER BY i.item_id) AS ids
        FROM items i JOIN jobs j ON j.job_id = i.job_id
        WHERE i.item_id = ANY(p_ids) AND i.status IN ('pending', 'waiting_retry') AND j.status = 'cancelled'
        GROUP BY i.job_id, j.paused_by
        ORDER BY i.job_id
    LOOP
        gone := gone || ARRAY(
            SELECT t.item_id
            FROM pacer_transition(r.ids, '{pending,waiting_retry}', 'abandoned', 'ItemCancelled',
                jsonb_build_object('actor', r.actor, 'error_class', 'cancelled', 'scope', 'job'),
                p_clear_lease => true, p_error_class => 'cancelled',
                p_error => format('job cancelled by %s', r.actor)) AS t);
    END LOOP;
    RETURN gone;
END
$fn$;
