-- Private history stays private.
--
-- channel_messages.space: the shared space a turn was asked in (a Slack channel, private
-- channel or group DM; a Telegram group, supergroup or channel; a WhatsApp group as
-- `group:<id>`), NULL for a direct message. Turns recorded before this migration get it
-- from what ingress already kept in `metadata` (Slack `channel_type`, Telegram
-- `chat_type`); WhatsApp turns were all direct.
ALTER TABLE channel_messages ADD COLUMN space text;
UPDATE channel_messages SET space = chat_id
 WHERE (platform = 'slack' AND metadata->>'channel_type' IN ('channel', 'group', 'mpim'))
    OR (platform = 'telegram' AND metadata->>'chat_type' IN ('group', 'supergroup', 'channel'));

-- tenants.history_scope: which earlier turns the agent sees (domain::HistoryScopeSetting).
-- The default keeps a user's direct messages out of what is answered in a shared space.
ALTER TABLE tenants ADD COLUMN history_scope text NOT NULL DEFAULT 'private_aware';
ALTER TABLE tenants ADD CONSTRAINT tenants_history_scope_check
    CHECK (history_scope IN ('user', 'private_aware', 'chat'));
GRANT UPDATE (history_scope) ON tenants TO channel_bridge_app;
