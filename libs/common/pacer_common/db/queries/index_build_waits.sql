-- What the concurrent index build of backend %(pid)s is waiting for, if it is in one of its
-- waiting phases (for writers before the build or the validation, for transactions with
-- older snapshots): the session it waits for now, how long that session's transaction has
-- been open and what it last ran.
SELECT p.phase, a.pid, a.application_name, a.state,
       extract(epoch FROM now() - a.xact_start)::int AS open_s, left(a.query, 200) AS query
FROM pg_stat_progress_create_index p
JOIN pg_stat_activity a ON a.pid = p.current_locker_pid
WHERE p.pid = %(pid)s AND p.phase LIKE 'waiting for%%'
