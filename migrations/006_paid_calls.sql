-- A paid call (an x402 payment sent with a model request) credits the API key's owner, who need not be the payer:
-- the top-up row names the paying address, and a payment check names the wallet its recovery credits.
ALTER TABLE credits ADD COLUMN payer TEXT;                 -- lower-case; NULL: the wallet paid (top-ups before this)
ALTER TABLE payment_checks ADD COLUMN wallet TEXT;         -- lower-case wallet to credit; NULL: the payer

-- x402 payment-identifier idempotency: the first request with an id owns it; a resend of the same payload gets the
-- first result back (no second payment), any other payload under that id is 409. Scoped by route and, on the
-- model endpoints, by the wallet the payment credits.
CREATE TABLE payment_ids (
  scope       TEXT        NOT NULL,                      -- 'topup', or 'call:<wallet>'
  id          TEXT        NOT NULL,                      -- the client's payment-identifier id
  fingerprint TEXT        NOT NULL,                      -- SHA-256 of the exact payment payload
  state       TEXT        NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'done')),
  result      JSONB,                                     -- the first answer: status, headers, body (top-up) or receipt (call)
  created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
  PRIMARY KEY (scope, id)
);
