-- Make the calling transaction commit synchronously, whatever the server's, database's or
-- role's default (see pacer_common.db.durable). A function that records a step exactly once
-- rests on (the claim before a gateway call, its outcome, a guid lease) calls this first, so
-- the one statement that calls it, run on its own in autocommit, is a durable transaction in
-- one round trip. ``set_config(…, true)`` is a SET LOCAL: it lasts until the transaction
-- ends, also when called from a function with a SET clause of its own (only that clause's
-- parameters are restored when such a function returns).
CREATE OR REPLACE FUNCTION pacer_synchronous_commit() RETURNS void
LANGUAGE plpgsql AS $fn$
BEGIN
    PERFORM set_config('synchronous_commit', 'on', true);
END
$fn$;
