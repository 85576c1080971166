-- The first step of `pacer after-restore` (every service stopped): a new restore epoch, the
-- Unix time now in seconds (never below the current one + 1), made the default of
-- item_events.restore_epoch, so every event written from here on carries it and its
-- outcome's `pacer-dedupe-key` (item_id:version:epoch) differs from that of any event written
-- between the backup and the restore with the same item and version; and an item with no event
-- of this epoch is one the restored database cannot vouch for when a person retries or resolves
-- it (pacer_restored_after). Returns the epoch.
-- Altering the default takes an exclusive lock on item_events and its partitions for a
-- moment: the services are stopped. Restoring from a backup older than an earlier restore
-- still gets an epoch of its own: the clock has moved on since.
CREATE OR REPLACE FUNCTION pacer_restore_epoch() RETURNS bigint
LANGUAGE plpgsql AS $fn$
DECLARE
    current_epoch bigint;
    epoch bigint;
BEGIN
    SELECT pg_get_expr(d.adbin, d.adrelid)::bigint INTO current_epoch
    FROM pg_attrdef d JOIN pg_attribute a ON a.attrelid = d.adrelid AND a.attnum = d.adnum
    WHERE d.adrelid = 'item_events'::regclass AND a.attname = 'restore_epoch';
    epoch := greatest(floor(extract(epoch FROM clock_timestamp()))::bigint, coalesce(current_epoch, 0) + 1);
    EXECUTE format('ALTER TABLE item_events ALTER COLUMN restore_epoch SET DEFAULT %s', epoch);
    RETURN epoch;
END
$fn$;
