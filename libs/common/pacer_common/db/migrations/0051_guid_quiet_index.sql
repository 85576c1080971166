-- The guids keeping a quiet a gateway asked of them (pacer_reconciler_guids_quiet, read at
-- every governance round; and whether any is, before their in-doubt items are counted): only
-- the rows a quiet was ever written to are indexed, and the count reads those whose quiet
-- lasts. The lease updates of every send never change it, so they stay HOT.
CREATE INDEX IF NOT EXISTS guid_leases_quiet ON guid_leases (gateway_quiet_until)
    WHERE gateway_quiet_until IS NOT NULL;
