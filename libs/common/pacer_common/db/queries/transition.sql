-- Apply a transition (see db/schema/functions/pacer_transition.sql).
SELECT item_id::text AS item_id, version, lease_epoch, attempts, from_status::text AS from_status
FROM pacer_transition(
    %(ids)s::uuid[], %(from)s::item_status[], %(to)s::item_status, %(type)s, %(payload)s::jsonb,
    %(epoch)s::bigint, %(only_expired)s, %(lease_owner)s::text, %(lease_ttl)s::interval, %(clear_lease)s,
    %(attempt_bump)s::int, %(next_attempt_at)s::timestamptz, %(error_class)s::text, %(error)s::text)
