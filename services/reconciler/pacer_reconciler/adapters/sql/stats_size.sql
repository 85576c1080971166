-- The bytes of one partition's table (NULL if it is gone). Reading the size takes a share
-- lock on it: held by DDL (a partition being dropped, say), it waits out the lock timeout.
SELECT pg_relation_size(to_regclass(%(partition)s)) AS bytes
