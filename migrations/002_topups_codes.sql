-- Top-ups live in `credits` (kind 'topup', tx_hash unique: one credit per settlement transaction).
-- Redeem codes and referral codes, issued by the operator's admin commands.

-- One-time codes that credit a wallet at key creation. Only the SHA-256 of a code is stored; the plaintext is
-- printed once by `admin redeem-codes create`. A code is spent by the UPDATE that sets redeemed_at (once).
CREATE TABLE redeem_codes (
  code_hash   TEXT        PRIMARY KEY,
  amount_usdc BIGINT      NOT NULL CHECK (amount_usdc > 0),
  batch       TEXT        NOT NULL,                 -- the admin run that created it
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  redeemed_by TEXT,
  redeemed_at TIMESTAMPTZ,
  CHECK ((redeemed_by IS NULL) = (redeemed_at IS NULL))
);

-- Referral codes: a code names its owner (the referrer). Not secret.
CREATE TABLE ref_codes (
  code       TEXT        PRIMARY KEY,               -- lower-case
  owner      TEXT        NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX ref_codes_owner ON ref_codes (owner);

-- A wallet is attributed to one referrer, at its first API key; never changed afterwards.
CREATE TABLE referrals (
  wallet     TEXT        PRIMARY KEY,
  ref_code   TEXT        NOT NULL REFERENCES ref_codes (code),
  referrer   TEXT        NOT NULL,
  created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX referrals_referrer ON referrals (referrer);
