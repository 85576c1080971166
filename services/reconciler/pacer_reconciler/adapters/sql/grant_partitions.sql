-- The parents' grants given to every partition that lacks them.
SELECT partition, action, detail FROM pacer_grant_partitions()
