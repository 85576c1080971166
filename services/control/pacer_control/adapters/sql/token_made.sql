-- The token named %(name)s if its secret is the one hashed %(hash)s: a create_token whose
-- commit's answer was lost finds the token it made (another's token under the name: no row).
SELECT name, role, created_at, tenants FROM api_tokens WHERE name = %(name)s AND token_hash = %(hash)s
