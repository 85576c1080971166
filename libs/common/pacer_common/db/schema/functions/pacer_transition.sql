DROP FUNCTION IF EXISTS pacer_transition(uuid[], item_status[], item_status, text, jsonb, bigint, boolean, text,
                                        interval, boolean, integer, timestamptz, text, text);
DROP FUNCTION IF EXISTS pacer_transition(uuid[], item_status[], item_status, text, jsonb, bigint, boolean, text,
                                        interval, boolean, integer, timestamptz, text, text, bigint[], jsonb[]);
-- The only code that changes an item's status. Moves the given items that are in one of
-- p_from (and, when given, hold lease epoch p_epoch / have an expired lease) to p_to, and
-- appends one event per moved item in the same statement.
-- Batched steps give each item its own guard and payload: p_epochs and p_payloads, when
-- given, run parallel to p_ids (an item's epoch must match; its payload replaces p_payload).
-- Two moves in one (p_via): p_from → p_via → p_to as one row update, still one event per
-- move (p_via_type with p_via_payload, version + 1; then p_type, version + 2), each move
-- checked against item_transitions; the lease and attempt changes are the whole step's, and
-- the second event's payload gets the item's new attempt count (``attempt``) when the step
-- counts one, read under the row's lock. One row version instead of two: the claim and
-- `submitted` of a batched begin.
-- An item's held mark (set by a claim that met a hold: the release sweep and the refill go by
-- it) means "pending, held"; every move out of pending clears it, and so does a move back
-- into pending from elsewhere. A claim that came after the hold was lifted, before the
-- release sweep, once left it set on the claimed item: pending again after a retry, the
-- item was invisible to its guid's refill and to the sweep for guids with work.
-- Generic plans (plan_cache_mode, on this and every function that finds items by id): items
-- is partitioned by item id, and a custom plan, which prunes the partitions while planning,
-- looks cheaper than the generic one, which prunes them as it starts; so the plan cache
-- would keep planning every call, at twice the cost of the call (docs/performance.md,
-- "Time partitions").
CREATE OR REPLACE FUNCTION pacer_transition(
    p_ids uuid[], p_from item_status[], p_to item_status, p_type text,
    p_payload jsonb DEFAULT '{}', p_epoch bigint DEFAULT NULL, p_only_expired boolean DEFAULT false,
    p_lease_owner text DEFAULT NULL, p_lease_ttl interval DEFAULT NULL, p_clear_lease boolean DEFAULT false,
    p_attempt_bump integer DEFAULT 0, p_next_attempt_at timestamptz DEFAULT NULL,
    p_error_class text DEFAULT NULL, p_error text DEFAULT NULL,
    p_epochs bigint[] DEFAULT NULL, p_payloads jsonb[] DEFAULT NULL,
    p_via item_status DEFAULT NULL, p_via_type text DEFAULT NULL, p_via_payload jsonb DEFAULT '{}')
RETURNS TABLE (item_id uuid, version integer, lease_epoch bigint, attempts integer, from_status item_status)
LANGUAGE plpgsql SET plan_cache_mode = force_generic_plan AS $fn$
#variable_conflict use_column
BEGIN
    IF EXISTS (SELECT 1 FROM unnest(p_from) AS f(s)
               WHERE NOT EXISTS (SELECT 1 FROM item_transitions t
                                 WHERE t.from_status = f.s AND t.to_status = COALESCE(p_via, p_to)))
       OR (p_via IS NOT NULL AND NOT EXISTS (SELECT 1 FROM item_transitions t
                                             WHERE t.from_status = p_via AND t.to_status = p_to)) THEN
        RAISE EXCEPTION 'illegal item transition % -> %', p_from, COALESCE(p_via::text || ' -> ', '') || p_to::text
            USING ERRCODE = 'check_violation';
    END IF;
    RETURN QUERY
    WITH target AS (
    -- An item's own epoch and payload are found by its position in p_ids, not by a join: a
    -- join with the list, planned before the statistics knew items, rescanned the items
    -- for every entry of the list.
    SELECT i.item_id, i.status AS from_status, p_payloads[array_position(p_ids, i.item_id)] AS payload
    FROM items i
    WHERE i.item_id = ANY(p_ids)
      AND i.status = ANY(p_from)
      AND (p_epoch IS NULL OR i.lease_epoch = p_epoch)
      AND (p_epochs IS NULL OR i.lease_epoch = p_epochs[array_position(p_ids, i.item_id)])
      AND (NOT p_only_expired OR i.lease_until < now())
    ORDER BY i.item_id
    FOR UPDATE OF i
), moved AS (
    UPDATE items AS i SET
        status          = p_to,
        held            = i.held AND i.status = 'pending' AND p_to = 'pending',
        version         = i.version + CASE WHEN p_via IS NULL THEN 1 ELSE 2 END,
        updated_at      = now(),
        lease_epoch     = i.lease_epoch + CASE WHEN p_lease_owner IS NULL THEN 0 ELSE 1 END,
        lease_owner     = CASE WHEN p_lease_owner IS NOT NULL THEN p_lease_owner
                               WHEN p_clear_lease THEN NULL ELSE i.lease_owner END,
        lease_until     = CASE WHEN p_lease_owner IS NOT NULL THEN now() + p_lease_ttl
                               WHEN p_clear_lease THEN NULL ELSE i.lease_until END,
        attempts        = i.attempts + p_attempt_bump,
        next_attempt_at = p_next_attempt_at,
        last_error_class = COALESCE(p_error_class, i.last_error_class),
        last_error      = COALESCE(p_error, i.last_error)
    FROM target
    WHERE i.item_id = target.item_id
    RETURNING i.item_id, i.job_id, i.shard_id, i.guid, i.version, i.lease_epoch,
              i.attempts, target.from_status, target.payload
)
, logged AS (
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    SELECT item_id, job_id, shard_id, guid, version - 1, p_via_type, from_status, p_via, p_via_payload
    FROM moved WHERE p_via IS NOT NULL
    UNION ALL
    SELECT item_id, job_id, shard_id, guid, version, p_type, COALESCE(p_via, from_status), p_to,
           COALESCE(payload, p_payload)
           || CASE WHEN p_via IS NOT NULL AND p_attempt_bump > 0 THEN jsonb_build_object('attempt', attempts)
                   ELSE '{}' END
    FROM moved
)
SELECT m.item_id, m.version, m.lease_epoch, m.attempts, m.from_status FROM moved m;
END
$fn$;
