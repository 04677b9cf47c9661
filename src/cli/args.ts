import { shownArgument } from '../client/refs.js';
import { MAX_EXPIRY_SECONDS } from '../shared/duration.js';
import { parseSize } from '../shared/size.js';
import { UsageError } from './output.js';

/** A size for --chunk-size and the like: 512k, 8m, 1g or bytes; a usage error otherwise. */
export function parseChunkSize(text: string): number {
  const size = parseSize(text);
  if (size === null || size < 1)
    throw new UsageError(`not a size: ${shownArgument(text)} (try 512k, 8m, 1g or bytes)`);
  return size;
}

export function parsePositiveInt(
  text: string,
  what: string,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const n = /^\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > max)
    throw new UsageError(`${what} must be a whole number from 1 to ${max}: ${shownArgument(text)}`);
  return n;
}

const DURATION_UNITS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };

/**
 * A duration for --expires and the like: 90s, 30m, 12h, 7d, 2w (or a number of seconds); with
 * `never`, the word never (or none) gives null. A usage error otherwise.
 */
export function parseDuration(
  text: string,
  what: string,
  never = false,
  neverWord = 'never',
): number | null {
  const t = text.trim().toLowerCase();
  if (never && (t === 'never' || t === 'none')) return null;
  const m = /^(\d{1,10})\s*([smhdw]?)$/.exec(t);
  const seconds = m ? Number(m[1]) * DURATION_UNITS[m[2] || 's']! : NaN;
  if (!Number.isSafeInteger(seconds) || seconds < 1)
    throw new UsageError(
      `${what} must be a duration such as 30m, 12h, 7d or 2w${never ? `, or ${neverWord}` : ''}: ${shownArgument(text)}`,
    );
  return seconds;
}

/**
 * An expiry (--expires, --max-expiry, `expire`): a duration as above, at most the ten years a
 * server takes. Beyond them, a usage error here (exit 2), not the server's 400 in seconds.
 */
export function parseExpiry(
  text: string,
  what: string,
  never = false,
  neverWord = 'never',
): number | null {
  const seconds = parseDuration(text, what, never, neverWord);
  if (seconds !== null && seconds > MAX_EXPIRY_SECONDS)
    throw new UsageError(
      `${what} must be at most ${MAX_EXPIRY_SECONDS / 86400}d (ten years): ${shownArgument(text)}`,
    );
  return seconds;
}
