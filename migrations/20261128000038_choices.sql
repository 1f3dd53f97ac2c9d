-- Choices an answer offers as buttons, and the taps that come back (docs/agent.md#offering-choices).
--
-- channel_replies.choices: the choices posted with the part (the agent's declaration under
-- its token, crate::choices::Offered); only an answer's last part carries them.
-- channel_replies.choice_token: that token, which every button carries to the platform and
-- a tap brings back; a tap is looked up by it, within the tenant.
-- channel_replies.chosen: which choice was tapped first, by whom and with which tap
-- (crate::choices::Chosen); a later tap on closed choices is recorded as dropped.
-- channel_messages.action: on a tap's turn, the choice it made (crate::choices::TapAction),
-- written once at ingress and in no index, so the turn's updates stay HOT (migration 10).
--
-- Citus: DDL on several distributed tables in one transaction must go one shard at a time
-- (a placeholder setting on plain PostgreSQL), one statement each by EXECUTE (migration 31).
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';
DO $$
BEGIN
    EXECUTE 'ALTER TABLE channel_replies ADD COLUMN choices jsonb';
    EXECUTE 'ALTER TABLE channel_replies ADD COLUMN choice_token text';
    EXECUTE 'ALTER TABLE channel_replies ADD COLUMN chosen jsonb';
    EXECUTE 'CREATE INDEX channel_replies_choice_token_idx ON channel_replies (tenant_id, choice_token)
                 WHERE choice_token IS NOT NULL';
    EXECUTE 'ALTER TABLE channel_messages ADD COLUMN action jsonb';
END $$;
