-- The agent answers later (docs/agent.md#answering-later): a dispatch answered 202 leaves
-- its turn `awaiting_agent` until the agent posts `done` to the turn's events URL, or until
-- `awaiting_until` (CB_AGENT_ASYNC_HORIZON_SECS after the 202) has passed. The DDL on the
-- distributed table runs by EXECUTE, one statement each (migration 31 says why).
-- Citus: DDL on several distributed and reference tables in one transaction must go one
-- shard at a time (a placeholder setting on plain PostgreSQL).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

DO $$
BEGIN
    EXECUTE 'ALTER TABLE channel_messages ADD COLUMN awaiting_until timestamptz';
    EXECUTE 'ALTER TABLE channel_messages DROP CONSTRAINT channel_messages_status_check';
    EXECUTE 'ALTER TABLE channel_messages ADD CONSTRAINT channel_messages_status_check
                 CHECK (status IN (''accepted'', ''dispatching'', ''executed'', ''delivery_failed'',
                                   ''dispatch_failed'', ''denied_unlinked'', ''ignored'', ''held'',
                                   ''awaiting_agent''))';
    -- The horizon's sweep finds the turns past it without reading the others.
    EXECUTE 'CREATE INDEX channel_messages_awaiting_idx ON channel_messages (tenant_id, awaiting_until)
                 WHERE status = ''awaiting_agent''';
END $$;

-- Every event the agent posted for a turn, by its `webhook-id`: the same id again is the
-- same request, answered again and applied once. `parts`: the reply parts a `message` event
-- made. Tenant content: RLS, and distributed with the messages on Citus, where its foreign
-- key (to the turn, so erasure and retention take the events along) can only be added
-- once both are distributed.
CREATE TABLE agent_events (
    tenant_id   uuid NOT NULL,
    message_id  uuid NOT NULL,
    event_id    text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('status', 'message', 'done')),
    parts       integer NOT NULL DEFAULT 0,
    received_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, message_id, event_id)
);

ALTER TABLE agent_events ENABLE ROW LEVEL SECURITY;
ALTER TABLE agent_events FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON agent_events
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, DELETE ON agent_events TO channel_bridge_app;

SELECT channel_bridge_distribute();

DO $$
BEGIN
    EXECUTE 'ALTER TABLE agent_events ADD CONSTRAINT agent_events_message_fkey
                 FOREIGN KEY (tenant_id, message_id) REFERENCES channel_messages (tenant_id, id)
                 ON DELETE CASCADE';
END $$;
