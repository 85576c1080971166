-- A forced release of a guid's lease, audited (pacer_force_release_guid, db/schema/functions);
-- with the holder the admin confirmed, if the caller said which.
SELECT outcome, message, previous_owner, epoch, evicted_until, in_flight
FROM pacer_force_release_guid(%(guid)s, %(actor)s, %(reason)s,
                              %(expected_owner)s, %(expected_epoch)s::bigint)
