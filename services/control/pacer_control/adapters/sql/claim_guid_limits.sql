-- A guid without overrides yet: its row made empty (the change that follows in this
-- transaction fills it), so there is a row to lock. No row back: another transaction made it
-- meanwhile (this insert waited for its commit); lock_guid_limits.sql then reads its overrides.
INSERT INTO guid_limits (guid, limits, updated_by, updated_at)
VALUES (%(guid)s, '{}'::jsonb, %(actor)s, clock_timestamp())
ON CONFLICT (guid) DO NOTHING
RETURNING guid
