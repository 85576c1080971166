-- A test send to a sandbox target is a one-item job, sent like every other item: the
-- reconciler publishes its command from the creation event, a sender claims it under the
-- guid's lease, paced, with its key reserved in the ledger. Never held for approval (its
-- target is a sandbox). The caller audits it in the same transaction.
--
-- The job is the tenant's that holds the guid, so it goes through that tenant's gateway (an
-- item's tenant is its job's). A guid no tenant holds yet goes through 'default''s and stays
-- unclaimed: which tenant a guid belongs to is fixed for good by the first job of a tenant's
-- that names it (the planner's claim, against max_guids), and a probe from the Control API
-- must not decide that.
CREATE OR REPLACE FUNCTION pacer_test_send(p_job uuid, p_item uuid, p_guid text, p_to_id text, p_content text,
                                p_actor text)
RETURNS TABLE (job_id uuid, item_id uuid, idem_key text)
LANGUAGE plpgsql AS $fn$
DECLARE
    s bigint;
    k text := 'test:' || p_item::text;
    owner text := COALESCE((SELECT g.tenant FROM tenant_guids g WHERE g.guid = p_guid), 'default');
BEGIN
    INSERT INTO jobs (job_id, request_id, kind, priority, created_by, message, content_version, target_mode,
                      total, request, dispatched_at, target_fetched, target_complete_at, tenant)
    VALUES (p_job, 'test-send-' || p_job::text, 'campaign', 0, p_actor,
            jsonb_build_object('type', 'text', 'content', p_content), 1, 'snapshot', 1,
            jsonb_build_object('test_send', true, 'guid', p_guid, 'to_id', p_to_id), now(), 1, now(), owner);
    INSERT INTO shards (job_id, guid, total) VALUES (p_job, p_guid, 1) RETURNING shard_id INTO s;
    INSERT INTO shard_status_counts (shard_id, status, n) VALUES (s, 'pending', 1);
    INSERT INTO items (item_id, job_id, shard_id, guid, to_id, content, idem_key, priority, kind, status, version)
    VALUES (p_item, p_job, s, p_guid, p_to_id, p_content, k, 0, 'campaign', 'pending', 0);
    INSERT INTO item_events (item_id, job_id, shard_id, guid, version, type, from_status, to_status, payload)
    VALUES (p_item, p_job, s, p_guid, 0, 'ItemTestSendCreated', 'pending', 'pending',
            jsonb_build_object('actor', p_actor, 'to_id', p_to_id));
    RETURN QUERY SELECT p_job, p_item, k;
END
$fn$;
