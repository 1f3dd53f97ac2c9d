-- The durable work queue behind every step after the webhook's 200. Infrastructure: it
-- holds ids and scheduling state only, no message content, so it has no RLS and the
-- worker's cross-tenant claim can see every tenant's jobs.
CREATE TABLE dispatch_queue (
    message_id       uuid PRIMARY KEY,
    tenant_id        uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    -- Only the lowest `seq` of a conversation may be claimed: one in flight per user.
    conversation_key text NOT NULL,
    seq              bigint GENERATED ALWAYS AS IDENTITY,
    -- 'dispatch' (call the agent) then 'reply' (post the parts back).
    stage            text NOT NULL DEFAULT 'dispatch' CHECK (stage IN ('dispatch', 'reply')),
    available_at     timestamptz NOT NULL DEFAULT now(),
    -- A claimed job is invisible until its lease runs out; a crashed worker's job comes back.
    leased_until     timestamptz,
    lease_owner      uuid,
    attempts         integer NOT NULL DEFAULT 0,
    enqueued_at      timestamptz NOT NULL DEFAULT now()
);

-- Head-of-line rule: "is there an older job in this conversation?" is one index probe.
CREATE INDEX dispatch_queue_conversation_idx ON dispatch_queue (tenant_id, conversation_key, seq);
-- Claim scan: ready jobs in arrival order.
CREATE INDEX dispatch_queue_claim_idx ON dispatch_queue (available_at, seq);

GRANT SELECT, INSERT, UPDATE, DELETE ON dispatch_queue TO channel_bridge_app;
