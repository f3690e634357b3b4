// CRC16/XMODEM, the checksum Redis Cluster maps keys to its 16384 slots with (cluster spec, "Keys distribution model").
const TABLE = new Uint16Array(256);
for (let i = 0; i < 256; i++) {
  let c = i << 8;
  for (let b = 0; b < 8; b++) c = c & 0x8000 ? ((c << 1) ^ 0x1021) & 0xffff : (c << 1) & 0xffff;
  TABLE[i] = c;
}

/** Number of hash slots of a Redis Cluster. */
export const SLOTS = 16384;

/** The part of a key that decides its slot: the first non-empty `{…}` hash tag, else the whole key. */
export function hashTagOf(key: string): string {
  const open = key.indexOf("{");
  if (open >= 0) {
    const close = key.indexOf("}", open + 1);
    if (close > open + 1) return key.slice(open + 1, close);
  }
  return key;
}

/**
 * The cluster slot of a key (what `CLUSTER KEYSLOT` answers). The gateway routes its hot-path commands itself
 * (per-master connections), and picks shard hash tags that spread evenly over the slot space.
 */
export function keySlot(key: string): number {
  const tag = hashTagOf(key);
  let crc = 0;
  for (const byte of Buffer.from(tag, "utf8")) crc = ((crc << 8) & 0xffff) ^ TABLE[((crc >> 8) ^ byte) & 0xff]!;
  return crc % SLOTS;
}
