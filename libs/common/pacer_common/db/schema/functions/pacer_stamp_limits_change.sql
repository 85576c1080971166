-- Each guid_limits change carries the id of the transaction that made it. A sender reads
-- the changes of transactions older than the oldest one still running, past the last id it
-- has seen, so a change that commits after a later-stamped one is still read.
CREATE OR REPLACE FUNCTION pacer_stamp_limits_change() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    NEW.change_xid := pg_current_xact_id();
    RETURN NEW;
END
$fn$;
