-- Charges of served answers whose settle could not reach Redis for about a minute. The repair job posts them
-- (settle-5 charges even after the sweeper expired the hold) and deletes the row; the hold id makes a replay
-- safe, and the outbox event it produces reaches ledger_events like any charge.
CREATE TABLE pending_settles (
  hold_id           TEXT        PRIMARY KEY,
  wallet            TEXT        NOT NULL,
  api_key_id        BIGINT      NOT NULL,
  charge_usdc       BIGINT      NOT NULL,
  prompt_tokens     INTEGER     NOT NULL,
  completion_tokens INTEGER     NOT NULL,
  cost_usd_micro    BIGINT      NOT NULL,
  model             TEXT        NOT NULL,
  created_at        TIMESTAMPTZ NOT NULL DEFAULT now()
);
