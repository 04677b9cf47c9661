import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';

/**
 * Keeps the memory of bodies already passed on from piling up.
 *
 * Node's HTTP parser copies each read of a request body (up to 64 KiB) into a new Buffer
 * outside V8's heap, and an S3 response body arrives the same way. Each is dead as soon as it
 * has been copied on, but V8 frees it only when it next collects its young generation, and the
 * few small objects of a streaming body fill that slowly: a 512 MiB upload raised the server
 * from 67 to 132 MB, and it stayed there afterwards (measured, bench/README.md). Collecting the
 * young generation after every `EVERY` bytes of body (about 1 ms each, 128 per 512 MiB) held the
 * peak at 98–107 MB, and the server's CPU time per upload did not grow (it fell: the same memory
 * is used again instead of fresh pages).
 */
const EVERY = 4 * 1024 * 1024;

setFlagsFromString('--expose-gc');
// The flag applies to contexts made after it is set; the main one keeps no `gc` global. A Node
// that ignores the flag at run time gives none: the bodies are then collected as V8 sees fit.
const exposed: unknown = runInNewContext('gc');
const collectYoung =
  typeof exposed === 'function'
    ? () => (exposed as (options: { type: 'minor' }) => void)({ type: 'minor' })
    : () => {};

let pending = 0;

/** Counts `bytes` of body passed on; collects the young generation every `EVERY` bytes. */
export function bodyPassedOn(bytes: number): void {
  pending += bytes;
  if (pending < EVERY) return;
  pending = 0;
  collectYoung();
}
