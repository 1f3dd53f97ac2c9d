-- After a tap closes an answer's choices, the message that carried them changes (Slack:
-- `chat.update` with the buttons replaced by the choice made; Telegram: the keyboard
-- removed). That edit is a reply part of the answered turn, posted through the reply
-- machinery like any part (rate limits, holds, retries, exactly once): `edit_of` names the
-- part whose message it edits, NULL for every part that posts a message of its own. An
-- edit repeated after a crash changes nothing, so a part in doubt is simply redone.
ALTER TABLE channel_replies ADD COLUMN edit_of integer;
