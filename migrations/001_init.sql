-- System of record. Redis is the hot ledger; everything here survives a lost Redis and rebuilds it.

CREATE TABLE api_keys (
  id          BIGSERIAL PRIMARY KEY,
  wallet      TEXT        NOT NULL,
  key_hash    TEXT        NOT NULL UNIQUE,          -- sha256 hex of the plaintext; the plaintext is never stored
  label       TEXT        NOT NULL DEFAULT '',
  budget_usdc BIGINT      CHECK (budget_usdc IS NULL OR budget_usdc >= 0),
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  revoked_at  TIMESTAMPTZ
);
CREATE INDEX api_keys_wallet ON api_keys (wallet);

-- Money in: top-ups, operator grants, redeemed codes. Written before the 2xx answer, then applied to Redis
-- (credit-2.lua, idempotent by event_id); applied_at stays NULL until Redis has it, for the reconciler.
CREATE TABLE credits (
  id          BIGSERIAL PRIMARY KEY,
  event_id    TEXT        NOT NULL UNIQUE,
  wallet      TEXT        NOT NULL,
  kind        TEXT        NOT NULL CHECK (kind IN ('topup', 'grant', 'redeem')),
  amount_usdc BIGINT      NOT NULL CHECK (amount_usdc > 0),
  reason      TEXT,
  tx_hash     TEXT        UNIQUE,                   -- settlement transaction of a top-up: one credit per payment
  network     TEXT,
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  applied_at  TIMESTAMPTZ
);
CREATE INDEX credits_wallet ON credits (wallet, id DESC);
CREATE INDEX credits_unapplied ON credits (id) WHERE applied_at IS NULL;

-- Ledger events from the Redis outbox (charge, release, expire), inserted idempotently by event_id.
CREATE TABLE ledger_events (
  event_id          TEXT        PRIMARY KEY,        -- '<type>:<hold id>': a hold resolves once
  type              TEXT        NOT NULL CHECK (type IN ('charge', 'release', 'expire')),
  hold_id           TEXT        NOT NULL,
  wallet            TEXT        NOT NULL,
  api_key_id        BIGINT      NOT NULL,
  model             TEXT,
  amount_usdc       BIGINT      NOT NULL,           -- charged (charge) or released (release, expire)
  cost_usd_micro    BIGINT      NOT NULL DEFAULT 0, -- provider cost of a charge
  prompt_tokens     INTEGER     NOT NULL DEFAULT 0,
  completion_tokens INTEGER     NOT NULL DEFAULT 0,
  occurred_at       TIMESTAMPTZ NOT NULL,
  recorded_at       TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ledger_events_wallet ON ledger_events (wallet) WHERE type = 'charge';
CREATE INDEX ledger_events_key ON ledger_events (api_key_id) WHERE type = 'charge';
