-- The guids keeping a quiet a gateway asked of them, and their in-doubt items the verifier
-- leaves out meanwhile (pacer_reconciler_guids_quiet, pacer_reconciler_in_doubt_quiet_items,
-- read at every governance round): only the rows a quiet was ever written to are indexed, and
-- the count reads those whose quiet lasts. The lease updates of every send never change it, so
-- they stay HOT.
CREATE INDEX IF NOT EXISTS guid_leases_quiet ON guid_leases (gateway_quiet_until)
    WHERE gateway_quiet_until IS NOT NULL;
