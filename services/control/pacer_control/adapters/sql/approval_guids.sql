-- A job's items still to be sent (pending or waiting_retry) per guid, and how many of its
-- items expired unsent (past their expire_at: the reconciler's expire_due sweep expires those
-- of a job that waits), with the guid's own limits overrides and the defaults of the sender
-- holding it (the control service lays them over every guid's overrides: Pacings), by which
-- the approval's projection reads how long each guid takes. Read from the items (by
-- items_job_status), not the reconciler's projection: exact when the admin decides.
WITH per_guid AS (
    SELECT i.guid, count(*) FILTER (WHERE i.status IN ('pending', 'waiting_retry'))::bigint AS items,
           count(*) FILTER (WHERE i.status = 'expired')::bigint AS expired
    FROM items i
    WHERE i.job_id = %(job)s::uuid AND i.status IN ('pending', 'waiting_retry', 'expired')
    GROUP BY i.guid
)
SELECT p.guid, p.items, p.expired, gl.limits, sl.limits AS sender_limits
FROM per_guid p
LEFT JOIN guid_limits gl ON gl.guid = p.guid
LEFT JOIN guid_leases l ON l.guid = p.guid
LEFT JOIN sender_limits sl ON sl.owner = l.owner
ORDER BY p.items DESC, p.guid
