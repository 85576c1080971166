-- The guids paced at a rate-limit penalty (pacer_reconciler_guids_slowed, read at every
-- governance round): only the rows with one are indexed, so the count reads none of the
-- others, and the lease updates of every send, which never change the penalty, stay HOT.
CREATE INDEX IF NOT EXISTS guid_leases_penalized ON guid_leases (guid) WHERE penalty IS NOT NULL;
