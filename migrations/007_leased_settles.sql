-- A deferred settle of a request admitted under a credit lease (CREDIT_LEASES=on) is posted against that lease:
-- its charge comes out of the lease's lock (at most what the request held of it), not out of a hold of its own.
ALTER TABLE pending_settles ADD COLUMN lease_id TEXT;       -- NULL: the request had a hold of its own (hold_id)
ALTER TABLE pending_settles ADD COLUMN lease_held BIGINT;   -- µUSDC the request held of the lease
