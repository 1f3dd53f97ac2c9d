-- Pictures, voice notes and files reach the agent (crate::media).
--
-- channel_messages.attachments: the files a user sent with the turn, as a JSON array of
-- {type, mime, size, name, source} (crate::media::Attachment); NULL when there are none.
-- `source` is the platform's handle on the file (a Telegram file_id, a WhatsApp media id,
-- a Slack file id and download URL), never the bytes and never a credential. The column is
-- written once at ingress and never updated, so the turn's later updates stay HOT
-- (migration 10); it is in no index.
ALTER TABLE channel_messages ADD COLUMN attachments jsonb;
