-- Cut the partitions of these tables made from now on (pacer_ensure_partitions) by the given
-- number of days of creation times; those made already keep their periods. The tables whose
-- period changed, with the period they had.
WITH was AS (
    SELECT parent, period_days FROM partitioned_tables
    WHERE parent = ANY(%(tables)s) AND period_days <> %(period_days)s
    FOR UPDATE
)
UPDATE partitioned_tables t SET period_days = %(period_days)s
FROM was WHERE t.parent = was.parent
RETURNING t.parent, was.period_days AS was
