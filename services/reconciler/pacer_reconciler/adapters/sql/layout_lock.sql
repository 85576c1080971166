-- One replica at a time sets up the cursors of a segment layout (until this transaction ends).
SELECT pg_advisory_xact_lock(hashtext('pacer-reconciler-layout'))
