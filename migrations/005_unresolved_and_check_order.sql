-- A deferred settle whose hold Redis no longer knows (it lost its data) is kept, marked, for an operator: the
-- charge is real, but posting it without its hold needs a decision (was it in the lost outbox?).
ALTER TABLE pending_settles ADD COLUMN unresolved BOOLEAN NOT NULL DEFAULT false;

-- Payment checks are visited least recently checked first, so checks that stay open cannot starve newer ones.
ALTER TABLE payment_checks ADD COLUMN last_checked_at TIMESTAMPTZ;
CREATE INDEX payment_checks_next ON payment_checks (last_checked_at NULLS FIRST, id) WHERE state = 'pending';
