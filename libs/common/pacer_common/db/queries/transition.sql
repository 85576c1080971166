-- The only statement that changes an item's status. It moves the given items from one of
-- the expected statuses to the target, appends one event per moved item in the same
-- statement, and returns what moved. Guards:
--   %(from)s           statuses the caller expects (from the transition table);
--   %(epoch)s          when not null, the lease epoch the caller holds (fencing);
--   %(only_expired)s   only items whose lease has run out (takeover);
-- Lease columns: %(lease_owner)s / %(lease_ttl)s set a new lease (claim, bumps the epoch);
-- %(clear_lease)s drops it. Counters and error fields are patched when given.
WITH target AS (
    SELECT item_id, status AS from_status
    FROM items
    WHERE item_id = ANY(%(ids)s::uuid[])
      AND status = ANY(%(from)s::item_status[])
      AND (%(epoch)s::bigint IS NULL OR lease_epoch = %(epoch)s::bigint)
      AND (NOT %(only_expired)s OR lease_until < now())
    ORDER BY item_id
    FOR UPDATE
), moved AS (
    UPDATE items AS i SET
        status          = %(to)s::item_status,
        version         = i.version + 1,
        updated_at      = now(),
        lease_epoch     = i.lease_epoch + CASE WHEN %(lease_owner)s::text IS NULL THEN 0 ELSE 1 END,
        lease_owner     = CASE WHEN %(lease_owner)s::text IS NOT NULL THEN %(lease_owner)s::text
                               WHEN %(clear_lease)s THEN NULL ELSE i.lease_owner END,
        lease_until     = CASE WHEN %(lease_owner)s::text IS NOT NULL THEN now() + %(lease_ttl)s::interval
                               WHEN %(clear_lease)s THEN NULL ELSE i.lease_until END,
        attempts        = i.attempts + %(attempt_bump)s::int,
        next_attempt_at = %(next_attempt_at)s::timestamptz,
        last_error_class = COALESCE(%(error_class)s::text, i.last_error_class),
        last_error      = COALESCE(%(error)s::text, i.last_error)
    FROM target
    WHERE i.item_id = target.item_id
    RETURNING i.item_id, i.job_id, i.shard_id, i.guid, i.version, i.lease_epoch,
              i.attempts, target.from_status
)
, logged AS (
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    SELECT item_id, job_id, shard_id, guid, version, %(type)s, from_status, %(to)s::item_status,
           %(payload)s::jsonb
    FROM moved
)
SELECT item_id::text, version, lease_epoch, attempts, from_status::text FROM moved;
