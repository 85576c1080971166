-- Take or keep the leases of these guids: free ones, expired ones and our own — except
--   * a guid whose lease was force-released from us, until our released lease would have run
--     out (evicted_until): the release must not be taken back by the holder's next look;
--   * a force-released guid whose evicted holder still has a send in flight on it (an item
--     claimed or submitted under a live item lease): its request may still be on the wire,
--     so a successor waits for it to settle (or for its item lease to run out).
-- Any owner that takes the guid clears the eviction.
-- last_send_at is returned as the time the guid's last send reached the gateway at the latest:
--   * its answer, where the answer was settled after the send began (the gateway saw the send
--     between the two);
--   * otherwise the send's start plus p_in_flight, the longest a request may still be written
--     after its claim (the senders' send deadline): the answer was never recorded (the owner
--     stopped, or its confirmation was cancelled), so the send may have reached the gateway
--     at any time up to then.
-- A successor pacing from it never sends sooner than the guid's interval after the gateway saw
-- the send. Its send windows, rate-limit penalty and the quiet a gateway asked of it (as the
-- seconds left of it at the lock, never below 0) are returned as the row holds them once
-- locked, not as a snapshot taken before: a holder's last send, penalty or quiet, written
-- while this waited for the row, is read.
DROP FUNCTION IF EXISTS pacer_acquire_guids(text[], text, interval);
DO $drop$
BEGIN
    -- The result gained windows, penalty and quiet: an older definition is replaced, not altered.
    IF EXISTS (SELECT 1 FROM pg_proc WHERE oid = to_regprocedure('pacer_acquire_guids(text[], text, interval, interval)')
               AND NOT 'quiet_s' = ANY(proargnames)) THEN
        DROP FUNCTION pacer_acquire_guids(text[], text, interval, interval);
    END IF;
END
$drop$;
CREATE OR REPLACE FUNCTION pacer_acquire_guids(p_guids text[], p_owner text, p_ttl interval,
                                               p_in_flight interval DEFAULT interval '0')
RETURNS TABLE (guid text, epoch bigint, last_send_at timestamptz, took_over boolean, db_now timestamptz,
               windows jsonb, penalty float8, quiet_s float8)
LANGUAGE plpgsql AS $fn$
#variable_conflict use_column
BEGIN
    INSERT INTO guid_leases (guid) SELECT DISTINCT unnest(p_guids) ON CONFLICT DO NOTHING;
    RETURN QUERY
    WITH free AS (
        SELECT l.guid, l.owner AS prev_owner
        FROM guid_leases l
        WHERE l.guid = ANY(p_guids)
          AND (l.owner IS NULL OR l.owner = p_owner OR l.lease_until < now())
          AND (l.evicted_owner IS NULL
               OR (l.evicted_owner = p_owner AND l.evicted_until <= now())
               OR (l.evicted_owner <> p_owner AND NOT EXISTS (
                     SELECT 1 FROM items i
                     WHERE i.guid = l.guid AND i.status IN ('claimed', 'submitted')
                       AND i.lease_owner = l.evicted_owner AND i.lease_until > now())))
        ORDER BY l.guid
        FOR UPDATE
    )
    UPDATE guid_leases g SET
        epoch         = CASE WHEN free.prev_owner IS DISTINCT FROM p_owner THEN g.epoch + 1 ELSE g.epoch END,
        since         = CASE WHEN free.prev_owner IS DISTINCT FROM p_owner THEN now() ELSE g.since END,
        renew_count   = CASE WHEN free.prev_owner = p_owner THEN g.renew_count + 1 ELSE 0 END,
        takeovers     = g.takeovers + CASE WHEN free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner
                                           THEN 1 ELSE 0 END,
        owner         = p_owner,
        lease_until   = now() + p_ttl,
        evicted_owner = NULL,
        evicted_until = NULL
    FROM free
    WHERE g.guid = free.guid
    RETURNING g.guid, g.epoch,
              CASE WHEN g.last_answer_at >= g.last_send_at THEN g.last_answer_at
                   ELSE COALESCE(g.last_send_at + p_in_flight, g.last_answer_at) END,
              (free.prev_owner IS NOT NULL AND free.prev_owner <> p_owner), now(),
              COALESCE(g.windows, '{}'::jsonb), g.penalty,
              greatest(extract(epoch FROM g.gateway_quiet_until - now())::float8, 0);
END
$fn$;
