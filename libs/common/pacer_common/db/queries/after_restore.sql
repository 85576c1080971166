-- One batch of `pacer after-restore`: items the restored database cannot vouch for, put in
-- doubt (pacer_after_restore); how many from each status.
SELECT from_status, n FROM pacer_after_restore(%(actor)s::text, %(reason)s::text, %(limit)s::integer)
