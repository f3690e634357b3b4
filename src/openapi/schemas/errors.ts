import { type TSchema, Type as T } from "@sinclair/typebox";
import { ERROR_STATUS } from "../../errors.ts";
import { closed, Enum, Micro, ref } from "./common.ts";

/** The error bodies: the one coded Error, the two 402s that carry amounts, and x402's bare `{error}` (PlainError). */

const ErrorCode = Enum(Object.keys(ERROR_STATUS), "Machine-readable code (see the error table)");

/** The error schemas, in the order the document lists them. */
export const ERROR_SCHEMAS = {
  Error: T.Object(
    { error: ErrorCode, message: T.String({ description: "Human-readable" }) },
    { description: "The error body of every endpoint but the top-up's plain errors" },
  ),
  InsufficientBalanceError: T.Intersect(
    [
      ref("Error"),
      T.Object({
        available_usdc: Micro("Available credit now"),
        required_usdc: Micro("What the request reserves"),
        topup: T.Union(
          [
            T.Object(
              { endpoint: T.String(), method: T.String(), minimum_usd: T.Number() },
              { ...closed, description: "How to add credit: the top-up endpoint" },
            ),
            T.Object(
              { endpoint: T.Null(), message: T.String() },
              { ...closed, description: "A gateway that takes no payments: how its operator hands out credit" },
            ),
          ],
          { description: "How to add credit" },
        ),
        x402Version: T.Optional(T.Literal(1, { description: "x402 terms (when the gateway takes payments): pay and resend the request" })),
        accepts: T.Optional(
          T.Array(ref("PaymentRequirement"), {
            description: "x402 v1 terms for this request's URL: the shortfall rounded up to a cent, at least X402_CALL_MIN_USD",
          }),
        ),
      }),
    ],
    { description: "402 INSUFFICIENT_BALANCE (on a model endpoint of a gateway that takes payments, with x402 terms)" },
  ),
  KeyBudgetError: T.Intersect(
    [
      ref("Error"),
      T.Object({ key_budget_left_usdc: Micro("What the key's budget has left"), required_usdc: Micro("What the request reserves") }),
    ],
    { description: "402 KEY_BUDGET_EXCEEDED" },
  ),
  PlainError: T.Object(
    { error: T.String({ description: "Human-readable; match on the HTTP status" }) },
    {
      ...closed,
      description: "Top-up errors without a code: bad payment encoding, mismatched payment, facilitator unreachable",
    },
  ),
} satisfies Record<string, TSchema>;
