-- Leadership of singleton duties (the reconciler) as a lease row with a TTL and a fencing
-- epoch, instead of a session advisory lock: a frozen (SIGSTOP) leader keeps its TCP
-- connection, and with it an advisory lock, for ever; a lease simply runs out.
CREATE TABLE leader_leases (
    name       text PRIMARY KEY,
    holder     text NOT NULL,
    epoch      bigint NOT NULL CHECK (epoch > 0),
    expires_at timestamptz NOT NULL,
    taken_at   timestamptz NOT NULL DEFAULT now()
);
