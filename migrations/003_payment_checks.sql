-- Payments whose settlement the gateway could not confirm: the facilitator timed out, was unreachable, or
-- answered a failure after its transaction may already have been sent. The money may have moved on chain, so the
-- recovery job (src/payments/recovery.ts) asks the chain and credits what moved, through the same idempotent
-- credit as a normal top-up (event id by settlement transaction), or voids the check once nothing can move.
CREATE TABLE payment_checks (
  id           BIGSERIAL   PRIMARY KEY,
  network      TEXT        NOT NULL,                 -- CAIP-2
  asset        TEXT        NOT NULL,                 -- token contract, lower-case
  payer        TEXT        NOT NULL,                 -- lower-case; the wallet to credit
  pay_to       TEXT        NOT NULL,                 -- lower-case; the recipient the payment was for
  amount_usdc  BIGINT      NOT NULL CHECK (amount_usdc > 0),
  atomic       TEXT        NOT NULL,                 -- the transfer in the asset's own units
  method       TEXT        NOT NULL CHECK (method IN ('eip3009', 'permit')),
  nonce        TEXT,                                 -- EIP-3009 authorization nonce
  valid_before BIGINT,                               -- EIP-3009: unix s after which an unused authorization is dead
  tx_hash      TEXT,                                 -- the transfer transaction, when the relayer knows it (permit)
  from_block   BIGINT,                               -- chain height when the check was opened (log search start)
  state        TEXT        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'credited', 'void')),
  reason       TEXT        NOT NULL,                 -- why it was opened, then how it ended
  created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
  resolved_at  TIMESTAMPTZ
);
-- One check per authorization: concurrent replays of one payment open it once.
CREATE UNIQUE INDEX payment_checks_authorization ON payment_checks (asset, payer, nonce) WHERE nonce IS NOT NULL;
CREATE UNIQUE INDEX payment_checks_tx ON payment_checks (tx_hash) WHERE tx_hash IS NOT NULL;
CREATE INDEX payment_checks_pending ON payment_checks (id) WHERE state = 'pending';
