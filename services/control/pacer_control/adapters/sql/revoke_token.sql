-- Revoke a token by name. revoked_now tells a revocation from one that had happened before.
WITH t AS (
    SELECT name, role, revoked_at FROM api_tokens WHERE name = %(name)s FOR UPDATE
), u AS (
    UPDATE api_tokens a SET revoked_at = now()
    FROM t WHERE a.name = t.name AND t.revoked_at IS NULL
    RETURNING a.revoked_at
)
SELECT t.name, t.role, COALESCE(t.revoked_at, (SELECT u.revoked_at FROM u)) AS revoked_at,
       (t.revoked_at IS NULL) AS revoked_now
FROM t
