-- One row per reply part posted back to the platform. (tenant_id, message_id, part_index)
-- is the part's identity: a part with a platform_message_id is never posted again.
CREATE TABLE channel_replies (
    tenant_id           uuid NOT NULL,
    message_id          uuid NOT NULL,
    part_index          integer NOT NULL CHECK (part_index >= 0),
    content             text NOT NULL,
    -- pending → sending → sent | failed; `sending` marks a request whose outcome is not yet
    -- known, reconciled before any resend (docs/delivery.md).
    status              text NOT NULL DEFAULT 'pending'
                            CHECK (status IN ('pending', 'sending', 'sent', 'failed')),
    platform_message_id text,
    -- What the platform later reported (WhatsApp sent/delivered/read/failed).
    delivery_status     text,
    attempts            integer NOT NULL DEFAULT 0,
    last_error          text,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    sent_at             timestamptz,
    PRIMARY KEY (tenant_id, message_id, part_index),
    FOREIGN KEY (tenant_id, message_id) REFERENCES channel_messages (tenant_id, id) ON DELETE CASCADE
);

-- WhatsApp status callbacks name our sent message by the wamid the send returned.
CREATE INDEX channel_replies_platform_message_idx
    ON channel_replies (tenant_id, platform_message_id)
    WHERE platform_message_id IS NOT NULL;

ALTER TABLE channel_replies ENABLE ROW LEVEL SECURITY;
ALTER TABLE channel_replies FORCE ROW LEVEL SECURITY;
CREATE POLICY tenant_isolation ON channel_replies
    USING (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid)
    WITH CHECK (tenant_id = nullif(current_setting('app.tenant_id', true), '')::uuid);

GRANT SELECT, INSERT, UPDATE, DELETE ON channel_replies TO channel_bridge_app;
