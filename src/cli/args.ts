import { parseSize } from '../shared/size.js';
import { UsageError } from './output.js';

/** A size for --chunk-size and the like: 512k, 8m, 1g or bytes; a usage error otherwise. */
export function parseChunkSize(text: string): number {
  const size = parseSize(text);
  if (size === null || size < 1)
    throw new UsageError(`not a size: ${text} (try 512k, 8m, 1g or bytes)`);
  return size;
}

export function parsePositiveInt(
  text: string,
  what: string,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const n = /^\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > max)
    throw new UsageError(`${what} must be a whole number from 1 to ${max}: ${text}`);
  return n;
}
