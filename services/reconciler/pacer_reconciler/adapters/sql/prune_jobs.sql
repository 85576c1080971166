-- Finished jobs whose items are gone, past the items' retention: their rows go too.
SELECT pacer_prune_jobs(now() - make_interval(days => %(retain_days)s), %(limit)s) AS pruned
