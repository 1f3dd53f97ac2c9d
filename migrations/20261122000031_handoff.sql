-- A person can step in (docs/admin.md#human-handoff): while a person holds a conversation,
-- its user turns are recorded `held` and not dispatched; what the person writes is a turn
-- of its own, delivered like an answer and shown to the agent later.
--
-- The changes to distributed and reference tables run by EXECUTE, one statement each:
-- Citus passes some DDL on to its nodes as the text of the query it came in (migration 28),
-- and adds no column together with a constraint.

-- Who wrote a turn: `user` (the platform's user, answered by the agent), `person` (a
-- tenant's person answering in the agent's place; `author` names the key), or `agent` (the
-- agent writing first). A turn not from the user has an empty request and its text in
-- `response_content`. `agent_ms`: how long the agent took to answer (the last call).
-- `held`: recorded while a person holds the conversation, not dispatched; handing back
-- dispatches the last unanswered one, the others stay `held` and show in history.
-- Citus: DDL on several distributed and reference tables in one transaction must go one
-- shard at a time (a placeholder setting on plain PostgreSQL).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

DO $$
BEGIN
    EXECUTE 'ALTER TABLE channel_messages ADD COLUMN origin text NOT NULL DEFAULT ''user''';
    EXECUTE 'ALTER TABLE channel_messages ADD CONSTRAINT channel_messages_origin_check
                 CHECK (origin IN (''user'', ''person'', ''agent''))';
    EXECUTE 'ALTER TABLE channel_messages ADD COLUMN author text';
    EXECUTE 'ALTER TABLE channel_messages ADD COLUMN agent_ms integer';
    EXECUTE 'ALTER TABLE channel_messages DROP CONSTRAINT channel_messages_status_check';
    EXECUTE 'ALTER TABLE channel_messages ADD CONSTRAINT channel_messages_status_check
                 CHECK (status IN (''accepted'', ''dispatching'', ''executed'', ''delivery_failed'',
                                   ''dispatch_failed'', ''denied_unlinked'', ''ignored'', ''held''))';
    -- A conversation held this long (seconds) with its user's last turn unanswered returns
    -- to the agent; NULL (the default) keeps it held until a person hands it back.
    EXECUTE 'ALTER TABLE tenants ADD COLUMN handoff_return_secs integer';
    EXECUTE 'ALTER TABLE tenants ADD CONSTRAINT tenants_handoff_return_secs_check
                 CHECK (handoff_return_secs > 0)';
    EXECUTE 'GRANT UPDATE (handoff_return_secs) ON tenants TO channel_bridge_app';
    -- The agent asking for a person, and the gateway returning a conversation after the
    -- tenant's handoff_return_secs, act too.
    EXECUTE 'ALTER TABLE audit_log DROP CONSTRAINT audit_log_actor_check';
    EXECUTE 'ALTER TABLE audit_log ADD CONSTRAINT audit_log_actor_check
                 CHECK (actor IN (''operator'', ''cli'', ''agent'', ''gateway'')
                        OR actor ~ ''^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'')';
END $$;

-- One row per conversation a person holds. `held_by` is the key's name, or `agent` when
-- the agent asked for a person; `reason` is what it gave. Tenant content: RLS, and on
-- Citus distributed with the messages (channel_bridge_distribute picks it up).
CREATE TABLE conversation_holds (
    tenant_id        uuid NOT NULL,
    conversation_key text NOT NULL,
    user_id          text,
    held_by          text NOT NULL,
    by_agent         boolean NOT NULL DEFAULT false,
    reason           text,
    held_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, conversation_key)
);

ALTER TABLE conversation_holds ENABLE ROW LEVEL SECURITY;
ALTER TABLE conversation_holds FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON conversation_holds
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE, DELETE ON conversation_holds TO channel_bridge_app;

SELECT channel_bridge_distribute();
