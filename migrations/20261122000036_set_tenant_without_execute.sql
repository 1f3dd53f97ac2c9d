-- The tenant is set at the start of every tenant transaction. Migration 27's function parses
-- and runs two `SET LOCAL` statements by EXECUTE, which only Citus needs (it passes a
-- `SET LOCAL` on to its workers, `set_config()` it does not): on plain PostgreSQL that was
-- about 35 us of PostgreSQL a call, a call nearly every turn. Without Citus loaded
-- (`citus.version` undefined) the same transaction-local setting is made by `set_config(…,
-- true)`; with Citus loaded, as before. Schema-qualified, as a function that sets the tenant
-- should be: no search path may put another `set_config` in its way.
CREATE OR REPLACE FUNCTION channel_bridge_set_tenant(tenant uuid) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF pg_catalog.current_setting('citus.version', true) IS NULL THEN
        PERFORM pg_catalog.set_config('app.tenant_id', tenant::text, true);
    ELSE
        SET LOCAL citus.propagate_set_commands = 'local';
        EXECUTE format('SET LOCAL app.tenant_id = %L', tenant);
    END IF;
END $$;
