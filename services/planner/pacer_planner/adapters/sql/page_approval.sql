-- In the page's transaction, after page_record.sql (the job's row is held): a job whose paged
-- items now pass the approval size waits for an admin. pacer_await_approval decides: only a
-- running job, and never one an admin has approved (held is false otherwise). The job is held
-- before the page's commands go out, so its items wait instead of sending, and paging stops at
-- the next claim. Only a page that added items asks: an approval then always has items to
-- release, and a page that added none brings nothing new to judge.
SELECT pacer_await_approval(j.job_id, r.reason, 'system:planner') AS held, r.reason
FROM jobs j
CROSS JOIN LATERAL (SELECT format('awaiting approval: %%s items paged, above %%s', j.total,
                                  %(above)s::bigint) AS reason) r
WHERE j.job_id = %(job_id)s AND %(added)s::bigint > 0 AND j.total > %(above)s::bigint
