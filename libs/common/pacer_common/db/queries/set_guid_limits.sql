INSERT INTO guid_limits (guid, limits, updated_by, updated_at)
VALUES (%(guid)s, %(limits)s, %(actor)s, clock_timestamp())
ON CONFLICT (guid) DO UPDATE
SET limits = guid_limits.limits || EXCLUDED.limits, updated_by = EXCLUDED.updated_by, updated_at = clock_timestamp()
RETURNING guid, limits
