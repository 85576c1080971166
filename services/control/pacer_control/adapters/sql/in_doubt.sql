-- Unverified sends, oldest first, with what is known: the request (to, key, content length),
-- the job and its status, the item's expire_at (``expired``: passed), the newest status
-- version of its business id when newer than its job's (``superseded_by``; resolved as not
-- delivered, an item expired, superseded or of a cancelled job is not sent), and every event of
-- the item (the gateway's answers, the verifier's lookups).
SELECT i.item_id::text AS item_id, i.job_id::text AS job_id, j.request_id, j.status AS job_status,
       (SELECT max(n.coalesce_version) FROM jobs n
        WHERE n.coalesce_key = j.coalesce_key AND n.tenant = j.tenant
          AND n.coalesce_version > j.coalesce_version) AS superseded_by,
       i.expire_at, COALESCE(i.expire_at <= now(), false) AS expired, i.guid, i.to_id, i.idem_key,
       length(COALESCE(i.content, j.item_content)) AS content_chars,
       left(COALESCE(i.content, j.item_content), 200) AS content_start, i.attempts,
       i.last_error_class, i.last_error, i.updated_at, l.state AS ledger_state,
       COALESCE((SELECT jsonb_agg(jsonb_build_object('at', e.occurred_at, 'type', e.type, 'to', e.to_status,
                                                     'payload', e.payload) ORDER BY e.version)
                 FROM item_events e WHERE e.item_id = i.item_id), '[]'::jsonb) AS events
FROM items i
JOIN jobs j ON j.job_id = i.job_id
LEFT JOIN send_ledger l ON l.idem_key = i.idem_key AND l.item_id = i.item_id
WHERE i.status = 'unverified'
ORDER BY i.updated_at, i.item_id
LIMIT %(limit)s
