-- A turn the agent answered but whose reply could not be delivered (a part failed for good:
-- the platform refused it, or its outcome stayed unknown after the last attempt) is
-- `delivery_failed`, with the part's error in `last_error`: admins find it by status and
-- resend it (`POST /v1/admin/messages/{id}/resend`), instead of reading every `executed`
-- turn's reply parts. A resend puts it back to `executed` until the reply is delivered.
-- It stays a terminal turn: history shows it with its response, as before.
ALTER TABLE channel_messages DROP CONSTRAINT channel_messages_status_check;
ALTER TABLE channel_messages ADD CONSTRAINT channel_messages_status_check
    CHECK (status IN ('accepted', 'dispatching', 'executed', 'delivery_failed',
                      'dispatch_failed', 'denied_unlinked', 'ignored'));
