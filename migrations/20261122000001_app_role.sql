-- The role every pooled connection switches to (`SET ROLE channel_bridge_app`), so that
-- row-level security applies even when DATABASE_URL names a superuser or the table owner.
-- NOLOGIN: nobody connects as it directly. NOBYPASSRLS: policies always apply.
-- Roles are cluster-wide, so several databases of one cluster (tests, staging) share it;
-- creating it tolerates a concurrent creator instead of failing.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'channel_bridge_app') THEN
        CREATE ROLE channel_bridge_app NOLOGIN NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE;
    END IF;
EXCEPTION WHEN duplicate_object OR unique_violation THEN
    NULL;
END
$$;

-- The migrating user must be a member to `SET ROLE` into it (a superuser already may).
DO $$
BEGIN
    IF NOT pg_has_role(current_user, 'channel_bridge_app', 'MEMBER') THEN
        EXECUTE format('GRANT channel_bridge_app TO %I', current_user);
    END IF;
EXCEPTION WHEN unique_violation OR internal_error THEN
    NULL;
END
$$;

GRANT USAGE ON SCHEMA public TO channel_bridge_app;
