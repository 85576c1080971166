-- A forced release of an item's lease, audited (pacer_force_release_item, 0017_forced_release.sql).
SELECT outcome, message, from_status, to_status, epoch
FROM pacer_force_release_item(%(item)s::uuid, %(actor)s, %(reason)s)
