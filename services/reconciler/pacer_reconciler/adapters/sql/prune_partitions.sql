-- The time partitions past retention, in the order to drop them ('due'; prune_partition drops
-- each, a transaction each), and the default partitions that hold rows.
SELECT partition, action, detail FROM pacer_partitions_due(now(), %(retain_days)s::jsonb)
