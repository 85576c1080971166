-- A forced release of a guid's lease, audited (pacer_force_release_guid, 0017_forced_release.sql).
SELECT outcome, message, previous_owner, epoch, evicted_until, in_flight
FROM pacer_force_release_guid(%(guid)s, %(actor)s, %(reason)s)
