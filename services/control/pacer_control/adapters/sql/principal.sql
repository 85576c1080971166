-- The caller behind a token hash (not revoked). last_used_at is touched at most once a
-- minute per token, so a busy client costs a read, not a write, per request.
WITH t AS (
    SELECT name, role, tenants FROM api_tokens WHERE token_hash = %(hash)s AND revoked_at IS NULL
), touched AS (
    UPDATE api_tokens SET last_used_at = now()
    WHERE token_hash = %(hash)s AND revoked_at IS NULL
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT name, role, tenants FROM t
