-- The time partitions of the days ahead (and yesterday's, if missing).
SELECT partition, action, detail FROM pacer_ensure_partitions(now(), %(ahead_days)s)
