-- Open shards of running jobs (guid not paused, online) with no progress for %(stall)s, by
-- guid, with what tells a stall from a guid waiting for its limits (shard_stall_inputs,
-- domain/stalls.py). Every such guid, read through a cursor a page at a time.
SELECT guid, array_agg(quiet_since ORDER BY shard_id) AS since, array_agg(job_gap ORDER BY shard_id) AS job_gaps,
       limits, windows, sender_limits, penalty
FROM shard_stall_inputs
WHERE status IN ('pending', 'running') AND job_status = 'running' AND NOT guid_held
  AND quiet_since < now() - %(stall)s::interval
GROUP BY guid, limits, windows, sender_limits, penalty
