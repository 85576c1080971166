-- Why an item may not be claimed now, or NULL. Takes the item's job, shard and guid state
-- (the guid's: pacer_guid_hold of its pause and its lifecycle state).
CREATE OR REPLACE FUNCTION pacer_hold_reason(p_job_status text, p_job_reason text, p_shard_status text,
                                  p_shard_reason text, p_guid_reason text)
RETURNS text
LANGUAGE sql IMMUTABLE AS $fn$
    SELECT CASE
        WHEN p_job_status <> 'running' THEN 'job ' || p_job_status || COALESCE(': ' || p_job_reason, '')
        WHEN p_shard_status = 'paused' THEN 'shard paused' || COALESCE(': ' || p_shard_reason, '')
        WHEN p_guid_reason IS NOT NULL THEN 'guid ' || p_guid_reason
    END;
$fn$;
