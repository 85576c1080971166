-- A forced release of an item's lease, audited (pacer_force_release_item, db/schema/functions);
-- with the holder the admin confirmed, if the caller said which.
SELECT outcome, message, from_status, to_status, epoch
FROM pacer_force_release_item(%(item)s::uuid, %(actor)s, %(reason)s,
                              %(expected_owner)s, %(expected_epoch)s::bigint)
