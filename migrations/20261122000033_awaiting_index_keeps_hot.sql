-- Migration 32's index on awaiting turns named `status` in its predicate, so every change of
-- a turn's status (accepted → dispatching → executed, twice a turn) had to add an entry to
-- each of channel_messages' indexes instead of staying a heap-only (HOT) update.
-- `awaiting_until` is set only while a turn awaits the agent and cleared when it leaves that
-- state, so it marks the same rows, and only the rare 202 changes it. The horizon's sweep
-- (`status = 'awaiting_agent' and awaiting_until < $2`) still uses the index: its range
-- condition implies the new predicate. By EXECUTE, as migration 31 says why.
SET LOCAL citus.multi_shard_modify_mode TO 'sequential';

DO $$
BEGIN
    EXECUTE 'DROP INDEX channel_messages_awaiting_idx';
    EXECUTE 'CREATE INDEX channel_messages_awaiting_idx ON channel_messages (tenant_id, awaiting_until)
                 WHERE awaiting_until IS NOT NULL';
END $$;
