-- The dispatch engine (one claimer per instance, batch claims, per-tenant caps).

-- A claimed job's lease now lives in `available_at`: the claim sets it to the lease's end,
-- so a leased job is out of the claim's ready range (`available_at <= now()`) and a claim
-- never scans past the thousands of jobs in flight; an expired lease is simply a job whose
-- time has come again. `lease_owner` is a token drawn per claim (not per instance), so two
-- claims of the same job, even by one instance, are told apart.
ALTER TABLE dispatch_queue DROP COLUMN leased_until;

-- The most jobs of this tenant one instance keeps in flight at once (NULL: the instance's
-- default share, CB_TENANT_MAX_IN_FLIGHT). Set by the operator, never by the tenant.
ALTER TABLE tenants ADD COLUMN max_in_flight integer CHECK (max_in_flight > 0);

-- A job's row changes several times while it is in flight (its claim, its stage, its lease
-- renewals): room on each page lets the updates that touch no indexed column stay HOT.
ALTER TABLE dispatch_queue SET (fillfactor = 70);

-- The claim goes tenant by tenant (fair across tenants): a loose scan
-- finds the tenants with a ready job, then each tenant's oldest ready jobs within its room.
-- A tenant at its cap is never scanned, however deep its backlog.
CREATE INDEX dispatch_queue_tenant_ready_idx ON dispatch_queue (tenant_id, available_at, seq);
