-- The history reads order by (received_at, id) newest first and stop at the limit. The
-- indexes they are meant to walk now hold that whole order (`id` too), and each covers only
-- the rows its read can match (linked users, unlinked senders): so on any database, even
-- one whose statistics never came (autovacuum off or late), the planner has one
-- sensible index per read. Before, a plan made on an empty table walked the listing index
-- `(tenant_id, received_at, id)` and filtered the tenant's whole history, for good: the
-- gateway's prepared statements keep their plan while the statistics do not change.
--
-- Built before the old ones are dropped, in this migration's transaction: writes to
-- channel_messages wait while they build (about a second per million rows). Each statement
-- runs by EXECUTE: Citus passes some DDL on to its nodes as the text of the query it came
-- in, which must then be that statement alone.
DO $$
BEGIN
    EXECUTE 'CREATE INDEX channel_messages_user_history_idx
                 ON channel_messages (tenant_id, user_id, received_at DESC, id DESC)
                 WHERE user_id IS NOT NULL';
    EXECUTE 'CREATE INDEX channel_messages_sender_history_ordered_idx
                 ON channel_messages (tenant_id, conversation_key, received_at DESC, id DESC)
                 WHERE user_id IS NULL';
    EXECUTE 'DROP INDEX channel_messages_history_idx';
    EXECUTE 'DROP INDEX channel_messages_sender_history_idx';
END $$;
