-- What a live Citus cluster needed (docs/citus.md).
--
-- The tenant is set by one function, so that the setting reaches Citus's workers whatever
-- the cluster's defaults: `SET LOCAL` is passed on to the workers only under
-- `citus.propagate_set_commands = 'local'` (default `none`: RLS on the shards would see no
-- tenant), and Citus replays the text of the whole query a `SET LOCAL` came in, so it runs
-- here by EXECUTE, where that text is the `SET LOCAL` alone (`begin; set local …` sent as one
-- string reached the workers as a second `BEGIN`). On plain PostgreSQL the citus setting is
-- an inert placeholder.
CREATE FUNCTION channel_bridge_set_tenant(tenant uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    SET LOCAL citus.propagate_set_commands = 'local';
    EXECUTE format('SET LOCAL app.tenant_id = %L', tenant);
END $$;
REVOKE ALL ON FUNCTION channel_bridge_set_tenant(uuid) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION channel_bridge_set_tenant(uuid) TO channel_bridge_app;

-- Citus evaluates the queue's identity default itself, with a privilege check, when the
-- ingress statement inserts into the queue from a statement on distributed tables.
GRANT USAGE ON SEQUENCE dispatch_queue_seq_seq TO channel_bridge_app;

-- As migration 22's, and the rows distributing left on the coordinator are removed.
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
    -- Distributing copies a table's rows into its shards and leaves them, invisible, in the
    -- coordinator's own table, where erasure and retention would never reach them. Done
    -- once every table is distributed: Citus refuses while a local table references one.
    FOREACH t IN ARRAY reference_tables || tenant_tables || later LOOP
        IF to_regclass(t) IS NOT NULL
           AND EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = t::regclass) THEN
            PERFORM truncate_local_data_after_distributing_table(t::regclass);
        END IF;
    END LOOP;
    IF cardinality(distributed) = 0 THEN
        RETURN 'already distributed';
    END IF;
    RETURN 'distributed: ' || array_to_string(distributed, ', ');
END $$;
REVOKE ALL ON FUNCTION channel_bridge_distribute() FROM PUBLIC;

-- A database distributed by migration 22's function still holds those rows: remove them.
DO $$
DECLARE t regclass;
BEGIN
    IF to_regclass('pg_dist_partition') IS NULL THEN
        RETURN;
    END IF;
    FOR t IN SELECT logicalrelid FROM pg_dist_partition
              WHERE logicalrelid::text IN ('tenants', 'api_keys', 'channel_connectors',
                                           'channel_links', 'channel_messages',
                                           'channel_replies', 'channel_notices',
                                           'slack_read_budget', 'audit_log')
    LOOP
        PERFORM truncate_local_data_after_distributing_table(t);
    END LOOP;
END $$;
