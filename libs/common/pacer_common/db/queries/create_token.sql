-- A new API token (its hash only) and the audit record of its making, in one statement:
-- the token exists if and only if its creation was recorded. ``tenants`` (NULL: all) scopes it.
WITH created AS (
    INSERT INTO api_tokens (token_hash, name, role, created_by, tenants)
    VALUES (%(hash)s, %(name)s, %(role)s, %(actor)s, %(tenants)s::text[])
    RETURNING name, role, created_by, created_at, tenants
), audited AS (
    INSERT INTO audit_log (actor, action, target_type, target_id, reason, before, after)
    SELECT %(actor)s, 'create_token', 'token', c.name, %(reason)s, NULL,
           jsonb_strip_nulls(jsonb_build_object('role', c.role, 'tenants', to_jsonb(c.tenants)))
    FROM created c
)
SELECT name, role, created_by, created_at FROM created
