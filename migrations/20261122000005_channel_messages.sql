-- One row per inbound user turn, from webhook to answer.
CREATE TABLE channel_messages (
    tenant_id           uuid NOT NULL,
    id                  uuid NOT NULL,
    connector_id        uuid NOT NULL,
    platform            text NOT NULL CHECK (platform IN ('slack', 'whatsapp', 'telegram')),
    -- Same for every retry and duplicate of one user message (docs/platforms.md, "Dedupe keys").
    idempotency_key     text NOT NULL,
    platform_message_id text NOT NULL,
    chat_id             text NOT NULL,
    thread_id           text,
    platform_user_id    text NOT NULL,
    reply_to_id         text,
    -- The linked tenant user; NULL for an unlinked sender.
    user_id             text,
    -- Ordering unit: 'user:<user_id>' when linked, else 'sender:<connector>:<platform user>'.
    conversation_key    text NOT NULL,
    request_content     text NOT NULL,
    response_content    text,
    decision            text,
    status              text NOT NULL CHECK (status IN ('accepted', 'dispatching', 'executed',
                            'dispatch_failed', 'denied_unlinked', 'ignored')),
    attempts            integer NOT NULL DEFAULT 0,
    last_error          text,
    received_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    completed_at        timestamptz,
    updated_at          timestamptz NOT NULL DEFAULT now(),
    metadata            jsonb NOT NULL DEFAULT '{}'::jsonb,
    PRIMARY KEY (tenant_id, id),
    FOREIGN KEY (tenant_id, connector_id) REFERENCES channel_connectors (tenant_id, id) ON DELETE CASCADE
);

-- Dedupe: a retry or duplicate of the same user message hits this and inserts nothing
-- (INSERT … ON CONFLICT DO NOTHING). Kept forever: outlasts Meta's 7-day retry horizon.
CREATE UNIQUE INDEX channel_messages_dedupe_key
    ON channel_messages (tenant_id, connector_id, idempotency_key);

-- History of a linked user across all their platforms, newest first.
CREATE INDEX channel_messages_history_idx
    ON channel_messages (tenant_id, user_id, received_at DESC);

-- History of an unlinked sender (allow policy), who has no user_id.
CREATE INDEX channel_messages_sender_history_idx
    ON channel_messages (tenant_id, conversation_key, received_at DESC)
    WHERE user_id IS NULL;

-- Admin listing, newest first, with keyset pagination on (received_at, id).
CREATE INDEX channel_messages_recent_idx
    ON channel_messages (tenant_id, received_at DESC, id DESC);

ALTER TABLE channel_messages ENABLE ROW LEVEL SECURITY;
ALTER TABLE channel_messages FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON channel_messages
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE, DELETE ON channel_messages TO channel_bridge_app;
