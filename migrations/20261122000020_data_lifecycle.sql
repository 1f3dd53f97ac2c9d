-- Data lifecycle: per-tenant retention, erasure of one person, and the audit log
-- of admin actions. README "Data lifecycle".

-- tenants.retention_days: turns (with their reply parts) older than this many days are
-- deleted by the retention job (crate::lifecycle::retention); NULL keeps them for ever (the
-- default, as before this migration). Never below 7 days: a turn's idempotency key lives in
-- its row (channel_messages_dedupe_key), and Meta retries a webhook for up to 7 days, so a
-- shorter retention could let a late retry be recorded and answered a second time. The
-- admin API answers 422 below the minimum; the check is the backstop.
ALTER TABLE tenants ADD COLUMN retention_days integer;
ALTER TABLE tenants ADD CONSTRAINT tenants_retention_days_check
    CHECK (retention_days BETWEEN 7 AND 36500);
-- Written by db::lifecycle::set_retention_days (tenant admin PATCH); see migration 16 for
-- why the app role holds UPDATE column by column.
GRANT UPDATE (retention_days) ON tenants TO channel_bridge_app;

-- Erasure and export by sender (an unlinked person has no user_id): one account's turns
-- without scanning the tenant's. A hash index, because a platform user id is stored whole
-- however long it is (ingress names an over-long one by digest only in its indexed keys),
-- and a B-tree entry must stay under about 2.7 kB; equality is all these lookups need.
-- The column is never updated, so the turn's updates stay HOT (migration 10).
CREATE INDEX channel_messages_sender_idx
    ON channel_messages USING hash (platform_user_id);

-- Who did what to the tenant's configuration and data, for the tenant's admins. Tenant
-- content: under RLS like every other tenant table, primary key starting with tenant_id
-- (Citus). Written in the transaction of the change it records, so a change and its record
-- commit or roll back together.
--   actor   the admin API key's id, 'operator' or 'cli'
--   action  crate::db::audit::AuditAction (connector.create, person.erase, …)
--   target  what it acted on: a connector id, `telegram:408258968`, `user:alice`, …
--   details ids, counts and the names of changed fields; never message text or secrets
-- The record of an erasure names the erased person: it is the proof the request was
-- carried out, and holds no content.
CREATE TABLE audit_log (
    tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    id        uuid NOT NULL,
    at        timestamptz NOT NULL,
    actor     text NOT NULL,
    action    text NOT NULL,
    target    text NOT NULL,
    details   jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (tenant_id, id)
);
ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_check
    CHECK (actor IN ('operator', 'cli')
           OR actor ~ '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$');
ALTER TABLE audit_log ADD CONSTRAINT audit_log_details_check
    CHECK (jsonb_typeof(details) = 'object');

-- The admin listing, newest first, keyset paging on (at, id).
CREATE INDEX audit_log_recent_idx ON audit_log (tenant_id, at DESC, id DESC);

ALTER TABLE audit_log ENABLE ROW LEVEL SECURITY;
ALTER TABLE audit_log FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON audit_log
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

-- Append-only for the application: no UPDATE, no DELETE, so a statement that slipped past
-- the code cannot rewrite or remove the record of what was done.
GRANT SELECT, INSERT ON audit_log TO channel_bridge_app;
