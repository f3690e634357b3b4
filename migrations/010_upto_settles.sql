-- x402 `upto` on the model endpoints (docs/payments.md): a keyless call's authorization is credited at its signed
-- maximum (kind 'upto') before the call, held and charged like any call, then settled down to the charge (the credit's
-- amount becomes it; 0 when the call cost nothing, with no transaction) and the chain asked for exactly that.
ALTER TABLE credits DROP CONSTRAINT credits_kind_check;
ALTER TABLE credits ADD CONSTRAINT credits_kind_check CHECK (kind IN ('topup', 'grant', 'redeem', 'upto'));
ALTER TABLE credits DROP CONSTRAINT credits_amount_usdc_check;
ALTER TABLE credits ADD CONSTRAINT credits_amount_usdc_check CHECK (amount_usdc > 0 OR (kind = 'upto' AND amount_usdc = 0));

-- One row per `upto` authorization, written with its credit before the call is served: what the chain still owes.
-- serving: the call runs (its charge not known here yet); charged: the credit is settled down to the charge, the
-- on-chain settlement not yet made (retried by the repair job; `admin audit` lists them); settled: done.
CREATE TABLE upto_settles (
  id           TEXT        PRIMARY KEY,                 -- the credit's event id: 'upto:<sha256 of the signature>'
  wallet       TEXT        NOT NULL,                    -- the ledger wallet held and charged ('upto:<payer>')
  payer        TEXT        NOT NULL,                    -- lower-case
  hold_id      TEXT        NOT NULL,
  max_usdc     BIGINT      NOT NULL CHECK (max_usdc > 0),
  charge_usdc  BIGINT      CHECK (charge_usdc >= 0),    -- NULL until the call's charge is known
  payload      JSONB       NOT NULL,                    -- the x402 payment payload, as the facilitator takes it
  requirements JSONB       NOT NULL,                    -- our `upto` terms it answered (amount: the maximum)
  state        TEXT        NOT NULL DEFAULT 'serving' CHECK (state IN ('serving', 'charged', 'settled')),
  tx_hash      TEXT,
  attempts     INTEGER     NOT NULL DEFAULT 0,
  last_error   TEXT,
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX upto_settles_open ON upto_settles (updated_at) WHERE state <> 'settled';
