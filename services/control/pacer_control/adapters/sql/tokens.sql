-- API tokens without their secrets (only hashes are stored; those are not shown either).
SELECT name, role, tenants, created_by, created_at, revoked_at, last_used_at FROM api_tokens ORDER BY name
