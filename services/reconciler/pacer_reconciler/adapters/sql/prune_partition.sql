-- One partition past retention dropped, unless its guard keeps it; a transaction of its own.
SELECT partition, action, detail FROM pacer_prune_partition(%(partition)s, now(), %(retain_days)s::jsonb)
