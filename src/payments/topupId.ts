/**
 * The credit id of a top-up: its settlement transaction on its network (CAIP-2), so a payment credits once
 * whichever path sees it first (the top-up request, or recovery reading the chain later).
 */
export function topupEventId(network: string, tx: string): string {
  return `topup:${network}:${tx}`;
}
