-- After ``tenant_guids_claim.sql`` claimed a new guid, before ``tenant_guids.sql`` counts: the
-- tenant's claims that add guids take turns while it has a max_guids (a transaction-scoped
-- advisory lock, key space 'pctg', held to commit). Without it two jobs claiming different new
-- guids at once would each count only its own, and together pass the quota. The count is a
-- statement of its own, so its snapshot sees the claims committed while this one waited.
SELECT pg_advisory_xact_lock(1885566055, hashtext(name)) FROM tenants
WHERE name = %(tenant)s AND max_guids IS NOT NULL
