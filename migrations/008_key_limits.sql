-- A key's own limits, fixed at its creation (issue 35): the models it may call and its request rate.
ALTER TABLE api_keys ADD COLUMN models TEXT;                  -- JSON list of catalog ids or "<provider>/*"; NULL: any model
ALTER TABLE api_keys ADD COLUMN requests_per_minute INTEGER   -- NULL: only the gateway-wide rate limit
  CHECK (requests_per_minute IS NULL OR requests_per_minute >= 1);
