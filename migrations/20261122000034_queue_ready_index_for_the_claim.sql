-- The queue's generations have no planner statistics (truncated in turn, never analyzed
-- while they hold jobs), and with none the planner took the per-tenant ready index
-- (tenant_id, available_at, seq) for statements it does not fit: the claim's check for an
-- older job of the conversation walked every job of the tenant (8 ms and more a claim at 1,000
-- turns/s), and the answer store scanned the tenant's jobs beside the primary key.
-- Partial on a predicate that is always true and that only the claim states
-- (`enqueued_at is not null`), it is invisible to every other statement.
DROP INDEX dispatch_queue_tenant_ready_idx;
CREATE INDEX dispatch_queue_tenant_ready_idx ON dispatch_queue (tenant_id, available_at, seq)
    WHERE enqueued_at IS NOT NULL;
