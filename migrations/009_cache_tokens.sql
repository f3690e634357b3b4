-- A charge's prompt split by what the provider's cache did with it (issue 32): of prompt_tokens, those read from
-- the cache and those written to it (5-minute and 1-hour writes), each billed at its own price. Kept on the charge
-- rows (and on deferred settles, which post them later) so revenue and usage can be told per kind; 0 on the rows
-- from before, and on charges without caching.
ALTER TABLE ledger_events ADD COLUMN cached_prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ledger_events ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE ledger_events ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pending_settles ADD COLUMN cached_prompt_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pending_settles ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE pending_settles ADD COLUMN cache_write_1h_tokens INTEGER NOT NULL DEFAULT 0;
