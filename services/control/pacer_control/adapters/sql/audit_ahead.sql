-- Whether an audit position names a transaction this database has not reached: one taken
-- before the database was restored from a logical backup, whose transaction ids start again.
SELECT %(xid)s::text::xid8 >= pg_snapshot_xmax(pg_current_snapshot()) AS ahead
