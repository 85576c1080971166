-- A job's items per guid, with the guid's own limits overrides and the defaults of the sender
-- holding it (the control service lays them over every guid's overrides: Pacings), by which
-- the approval's projection reads how long each guid takes.
SELECT s.guid, sum(s.total)::bigint AS items, gl.limits, sl.limits AS sender_limits
FROM shards s
LEFT JOIN guid_limits gl ON gl.guid = s.guid
LEFT JOIN guid_leases l ON l.guid = s.guid
LEFT JOIN sender_limits sl ON sl.owner = l.owner
WHERE s.job_id = %(job)s::uuid
GROUP BY s.guid, gl.limits, sl.limits
ORDER BY items DESC, s.guid
