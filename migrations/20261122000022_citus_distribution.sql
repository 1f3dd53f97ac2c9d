-- Runs on Citus (docs/citus.md). On plain PostgreSQL it only drops
-- the queue's foreign key and creates a function that does nothing without Citus.
--
-- The queue stays a plain table on the coordinator: the cross-tenant claim
-- (`FOR UPDATE SKIP LOCKED` over every tenant) cannot run on a distributed table. A plain
-- table cannot keep a foreign key to a reference table (`tenants`), so the key goes,
-- everywhere, to keep one schema. Nothing deletes tenants (the app role has no DELETE on
-- them); a job outlives its turn only until the worker finds the turn gone and drops it.
ALTER TABLE dispatch_queue DROP CONSTRAINT IF EXISTS dispatch_queue_tenant_id_fkey;

-- Distributes the tables in the order Citus accepts, skipping what is distributed already,
-- so it is safe to call again (`channel-bridge citus distribute` calls it for a database
-- that got Citus after it was migrated):
--   1. `tenants` and `api_keys` become reference tables (a copy on every node): keys are
--      looked up by hash before any tenant is known, and their unique prefix and hash
--      cannot be unique on a table distributed by tenant;
--   2. the tenant tables are distributed by `tenant_id`, co-located with
--      `channel_connectors`, parents before the tables whose foreign keys point at them;
--   3. any other table with a `tenant_id` column and row-level security (a later
--      migration's) the same way.
-- `citus.multi_shard_modify_mode = sequential`: DDL on distributed tables in the same
-- transaction as DDL on reference tables must not run in parallel. Local tables referencing
-- a reference table are not turned into Citus local tables on the way
-- (`citus.enable_local_reference_table_foreign_keys = off`); the first trial on a cluster needed
-- both. Citus is detected by its functions, so the order can be checked without it.
CREATE OR REPLACE FUNCTION channel_bridge_distribute() RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    reference_tables text[] := ARRAY['tenants', 'api_keys'];
    tenant_tables text[] := ARRAY['channel_connectors', 'channel_links', 'channel_messages',
                                  'channel_replies', 'channel_notices', 'slack_read_budget'];
    later text[];
    t text;
    distributed text[] := ARRAY[]::text[];
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'create_distributed_table') THEN
        RETURN 'citus is not installed here: nothing to distribute';
    END IF;
    SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
    SET LOCAL citus.enable_local_reference_table_foreign_keys TO off;
    FOREACH t IN ARRAY reference_tables LOOP
        IF NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            PERFORM create_reference_table(t);
            distributed := distributed || (t || ' (reference)');
        END IF;
    END LOOP;
    SELECT coalesce(array_agg(c.relname::text ORDER BY c.relname), ARRAY[]::text[]) INTO later
      FROM pg_class c
     -- The schema the gateway's tables live in, whatever the caller's search path.
     WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'channel_connectors'::regclass)
       AND c.relkind = 'r' AND c.relrowsecurity
       AND c.relname <> ALL (reference_tables || tenant_tables || ARRAY['dispatch_queue'])
       AND EXISTS (SELECT 1 FROM pg_attribute a
                    WHERE a.attrelid = c.oid AND a.attname = 'tenant_id' AND NOT a.attisdropped);
    FOREACH t IN ARRAY tenant_tables || later LOOP
        IF to_regclass(t) IS NOT NULL
           AND NOT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            IF t = 'channel_connectors' THEN
                PERFORM create_distributed_table(t, 'tenant_id', colocate_with => 'default');
            ELSE
                PERFORM create_distributed_table(t, 'tenant_id', colocate_with => 'channel_connectors');
            END IF;
            distributed := distributed || t;
        END IF;
    END LOOP;
    IF cardinality(distributed) = 0 THEN
        RETURN 'already distributed';
    END IF;
    RETURN 'distributed: ' || array_to_string(distributed, ', ');
END $$;
-- The schema owner's to run (migrate, `citus distribute`), never the app role's.
REVOKE ALL ON FUNCTION channel_bridge_distribute() FROM PUBLIC;

SELECT channel_bridge_distribute();
