-- After a tap that closes an answer's choices, the answer's message changes where the
-- platform allows (Slack: chat.update shows what was chosen; Telegram: the keyboard is
-- removed). On by default; a connector turns it off when its answers must stay as posted
-- (the choice still closes: a second tap is recorded, not dispatched).
ALTER TABLE channel_connectors
    ADD COLUMN edit_after_tap boolean NOT NULL DEFAULT true;

-- Written by db::connectors::update (admin PATCH), as typing_indicator (migration 21).
GRANT UPDATE (edit_after_tap) ON channel_connectors TO channel_bridge_app;
