-- Time partitions: the tables that grow with every item and every action shed old rows by
-- dropping whole partitions (pacer_prune_partitions), never by DELETE.
--
--   items, item_events   one partition per 7 days, by ranges of item id: an item id is a version 7
--                        UUID whose first 48 bits are its job's creation time, so a job's items,
--                        their events and their ledger keys share the partition of the job's week
--                        (weeks, not days: a query by guid reads every partition, and 14 daily
--                        ones cost a third of bench scale's rate; docs/performance.md)
--   send_ledger          one per 7 days, by ranges of item id (the item that reserved the key)
--   audit_log, operator_conflicts, guid_state_history
--                        one per 30 days, by time (at)
--
-- Each table keeps a DEFAULT partition, <table>_default: the table as it was before this
-- migration, with its rows, attached as it is (no copy). It also catches a row whose period has
-- no partition yet (pacer_ensure_partitions creates them days ahead and moves such rows out).
--
-- A unique key that does not contain the partition key cannot be declared on the partitioned
-- table: items' one item per (job, guid, to_id) of a requery and the ledger's one row per
-- idempotency key become indexes of each partition (partitioned_tables.local_ddl). All of a
-- job's items are in one partition, so the first holds as before; the ledger's is completed
-- across partitions by pacer_begin_send, under a lock on the key.

-- A function taking the old table's row type would follow it to its new name.
DROP FUNCTION IF EXISTS pacer_item_command(items);

CREATE TABLE partitioned_tables (
    parent      text PRIMARY KEY,
    key_column  text NOT NULL,
    bound       text NOT NULL CHECK (bound IN ('item_id', 'time')),  -- item_id: version 7 UUID ranges
    period_days integer NOT NULL CHECK (period_days > 0),
    prune_order integer NOT NULL,  -- a partition may wait on one of a table pruned before it
    local_ddl   text[] NOT NULL DEFAULT '{}',  -- run on every new partition: format(ddl, partition)
    guard       text  -- why a partition past retention must stay: format(guard, partition, starts,
                      -- ends) is a query whose rows are the reasons (none: it may be dropped)
);

INSERT INTO partitioned_tables (parent, key_column, bound, period_days, prune_order, local_ddl, guard) VALUES
('items', 'item_id', 'item_id', 7, 1,
 ARRAY['CREATE UNIQUE INDEX ON %1$I (job_id, guid, to_id) WHERE target_page IS NOT NULL'],
 $g$SELECT 'holds unfinished items' WHERE EXISTS (
        SELECT 1 FROM %1$I i WHERE i.status IN (SELECT t.from_status FROM item_transitions t))$g$),
('item_events', 'item_id', 'item_id', 7, 2, '{}',
 $g$SELECT 'the items of its days are still kept' WHERE EXISTS (
        SELECT 1 FROM pacer_partitions('items') p WHERE p.starts < %3$L AND p.ends > %2$L)
    UNION ALL
    SELECT 'holds events a reconciler cursor has not passed'
    WHERE (SELECT max(e.xid) FROM %1$I e) >= COALESCE((SELECT min(c.last_xid) FROM log_cursors c), '0'::xid8)$g$),
('send_ledger', 'item_id', 'item_id', 7, 3,
 ARRAY['CREATE UNIQUE INDEX ON %1$I (idem_key)'],
 $g$SELECT 'the items of its days are still kept' WHERE EXISTS (
        SELECT 1 FROM pacer_partitions('items') p WHERE p.starts < %3$L AND p.ends > %2$L)
    UNION ALL
    SELECT 'holds reserved sends' WHERE EXISTS (SELECT 1 FROM %1$I l WHERE l.state = 'reserved')$g$),
('audit_log', 'at', 'time', 30, 4, '{}', NULL),
('operator_conflicts', 'at', 'time', 30, 4, '{}', NULL),
('guid_state_history', 'at', 'time', 30, 4, '{}', NULL);

-- Each table becomes the default partition of a new partitioned table of the same name.
DO $convert$
DECLARE
    t record;
    ix record;
    col record;
    old text;
    seq text;
    identity text[];
    pk text[];
BEGIN
    FOR t IN SELECT parent, key_column FROM partitioned_tables ORDER BY prune_order, parent LOOP
        old := t.parent || '_default';
        EXECUTE format('ALTER TABLE %I RENAME TO %I', t.parent, old);
        -- Identity columns become sequence defaults of the parent (identity on a partitioned
        -- table needs PostgreSQL 17): a sequence of the same name, from where the old one stood.
        identity := '{}';
        FOR col IN SELECT a.attname FROM pg_attribute a
                   WHERE a.attrelid = old::regclass AND a.attidentity <> '' AND NOT a.attisdropped LOOP
            EXECUTE format('ALTER TABLE %I ALTER COLUMN %I DROP IDENTITY', old, col.attname);
            identity := identity || col.attname::text;
        END LOOP;
        EXECUTE format('CREATE TABLE %I (LIKE %I INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING STORAGE '
                       'INCLUDING COMMENTS) PARTITION BY RANGE (%I)', t.parent, old, t.key_column);
        FOREACH seq IN ARRAY identity LOOP
            EXECUTE format('CREATE SEQUENCE %I AS bigint OWNED BY %I.%I', t.parent || '_' || seq || '_seq',
                           t.parent, seq);
            EXECUTE format('SELECT setval(%L, COALESCE((SELECT max(%I) FROM %I), 0) + 1, false)',
                           t.parent || '_' || seq || '_seq', seq, old);
            EXECUTE format('ALTER TABLE %I ALTER COLUMN %I SET DEFAULT nextval(%L)', t.parent, seq,
                           t.parent || '_' || seq || '_seq');
        END LOOP;
        -- A serial's sequence now belongs to the parent's column.
        FOR col IN SELECT s.relname AS seq, a.attname
                   FROM pg_depend d
                   JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
                   JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
                   WHERE d.refobjid = old::regclass AND d.deptype = 'a' LOOP
            EXECUTE format('ALTER SEQUENCE %I OWNED BY %I.%I', col.seq, t.parent, col.attname);
        END LOOP;
        -- The indexes: the primary key gains the partition key where it lacks it; a unique index
        -- without it stays the default partition's own (local_ddl gives new partitions theirs);
        -- every other index is declared on the parent under its old name, the old table's
        -- index renamed: attaching the old table as a partition adopts it (no rebuild).
        FOR ix IN SELECT i.indexrelid::regclass::text AS name, pg_get_indexdef(i.indexrelid) AS def,
                         i.indisprimary AS pk, i.indisunique AS uniq,
                         EXISTS (SELECT 1 FROM unnest(i.indkey) k JOIN pg_attribute a
                                 ON a.attrelid = i.indrelid AND a.attnum = k
                                 WHERE a.attname = t.key_column) AS has_key
                  FROM pg_index i WHERE i.indrelid = old::regclass LOOP
            IF ix.pk THEN
                SELECT array_agg(a.attname::text ORDER BY k.ord) INTO pk
                FROM pg_index i, unnest(i.indkey) WITH ORDINALITY k(attnum, ord)
                JOIN pg_attribute a ON a.attrelid = old::regclass AND a.attnum = k.attnum
                WHERE i.indexrelid = ix.name::regclass;
                IF t.key_column = ANY(pk) THEN
                    EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.name, old || '_pkey');
                ELSE  -- the old key stays unique in the old table; the parent's adds the partition key
                    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (%s)', left(old || '_' || array_to_string(pk, '_'), 59)
                                   || '_key', old, (SELECT string_agg(quote_ident(c), ', ') FROM unnest(pk) c));
                    EXECUTE format('ALTER TABLE %I DROP CONSTRAINT %I', old, ix.name);
                    pk := pk || t.key_column;
                END IF;
                EXECUTE format('ALTER TABLE %I ADD PRIMARY KEY (%s)', t.parent,
                               (SELECT string_agg(quote_ident(c), ', ') FROM unnest(pk) c));
            ELSIF NOT (ix.uniq AND NOT ix.has_key) THEN
                EXECUTE format('ALTER INDEX %I RENAME TO %I', ix.name, left(ix.name || '_default', 63));
                EXECUTE regexp_replace(ix.def, ' ON (\S+\.)?' || old || ' ', ' ON ' || quote_ident(t.parent) || ' ');
            END IF;
        END LOOP;
        EXECUTE format('ALTER TABLE %I ATTACH PARTITION %I DEFAULT', t.parent, old);
    END LOOP;
END
$convert$;
