/**
 * S3's rules for multipart uploads, which some S3 servers do not enforce (s3rver) and AWS does:
 * every part but the last has at least 5 MiB, none more than 5 GiB, at most 10,000 parts.
 */
export const MIN_PART = 5 * 1024 * 1024,
  MAX_PART = 5 * 1024 ** 3,
  MAX_PARTS = 10_000;

/** The largest object S3 holds: 5 TiB. */
export const MAX_OBJECT = 5 * 1024 ** 4;

const MIB = 1024 * 1024;
/** Parts of 8 MiB unless the object is too large for 10,000 of them. */
const PREFERRED_PART = 8 * MIB;

/**
 * Cuts an object of `totalBytes` bytes into parts obeying S3's rules: contiguous byte ranges
 * [start, end) covering it exactly, all of one size P but the last, with
 * P = max(8 MiB, ceil(total / 10,000) rounded up to a MiB). An empty object is one empty part.
 */
export function planParts(totalBytes: number): { start: number; end: number }[] {
  if (!Number.isSafeInteger(totalBytes) || totalBytes < 0)
    throw new RangeError(`An object's size must be a whole number of bytes, not ${totalBytes}`);
  if (totalBytes > MAX_OBJECT)
    throw new RangeError(`S3 holds objects of at most 5 TiB; this one has ${totalBytes} bytes`);
  if (totalBytes === 0) return [{ start: 0, end: 0 }];
  const size = Math.max(PREFERRED_PART, Math.ceil(Math.ceil(totalBytes / MAX_PARTS) / MIB) * MIB);
  const parts: { start: number; end: number }[] = [];
  for (let start = 0; start < totalBytes; start += size)
    parts.push({ start, end: Math.min(totalBytes, start + size) });
  return parts;
}
