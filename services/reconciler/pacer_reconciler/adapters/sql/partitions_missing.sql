-- The time partitions of the days ahead (and yesterday's, if missing) to make: a parent and
-- its new partition's bounds each, in the order to make them.
SELECT parent, starts, ends FROM pacer_partitions_missing(now(), %(ahead_days)s)
