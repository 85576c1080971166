-- Drop the time partitions past retention that nothing still needs; the rest, with why.
SELECT partition, action, detail FROM pacer_prune_partitions(now(), %(retain_days)s::jsonb)
