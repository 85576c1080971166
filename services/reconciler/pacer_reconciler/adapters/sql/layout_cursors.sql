-- Every cursor of the reconciler: the single leader's ('reconciler') and each segment's
-- ('reconciler/<s>of<n>'), of any layout. Locked: a replica of an old layout committing a
-- batch now waits for this transaction, and finds its cursor gone if the layout changed.
SELECT name, last_xid::text AS xid, last_seq FROM log_cursors
WHERE name = %(prefix)s OR name LIKE %(prefix)s || '/%%'
FOR UPDATE
