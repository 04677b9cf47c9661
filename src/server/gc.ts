import { getHeapStatistics, setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { dropSparePieces } from '../shared/copy.js';
import { keepV8Flag } from '../shared/v8-flags.js';

/**
 * Collections the server asks V8 for, so that its memory follows its work.
 *
 * - While bodies stream in. Node's HTTP parser copies each read of a request body (up to
 *   64 KiB) into a new Buffer outside V8's heap, and an S3 response body arrives the same way.
 *   Each is dead as soon as it has been copied on, but V8 frees it only when it next collects
 *   its young generation, and the few small objects of a streaming body fill that slowly: a
 *   512 MiB upload raised the server from 67 to 132 MB (measured, bench/README.md). Collecting
 *   the young generation after every `BODY_BYTES` of body (about 1 ms each, 128 per 512 MiB)
 *   held the peak at 98–107 MB, and the server's CPU time per upload did not grow (it fell: the
 *   same memory is used again instead of fresh pages).
 * - Once idle. V8 did not shrink the heap after an upload by itself: the server stayed at
 *   92–93 MB. Five seconds after the last request ends, when bodies have streamed or the heap
 *   has grown since the last such collection, the heap is collected whole once: 76–86 MB.
 * - The young generation keeps the size it has at start. V8 doubles it (up to 16 MiB per
 *   semi-space) each time as much as it holds has survived collections since it last grew; under
 *   a long transfer, or transfers back to back, the few objects each collection keeps add up,
 *   and it grew from 4 to 22–32 MB, nearly all of it empty. That was the server's peak during a
 *   transfer creeping up (bench/README.md): 112–125 MB in the benchmark's three rounds of
 *   512 MiB, 100–104 MB with the growth turned off, at the same speed. Node reads
 *   `--max-semi-space-size` only at start; the growth factor is read each time V8 would grow.
 *   Starting the hashing thread sets the factor back, so it is set again once that thread runs,
 *   and bodies wait for that (shared/hasher.ts `ready`). An operator who sets either flag
 *   (`NODE_OPTIONS`) is left to it.
 * - When body Buffers outlive the young generation. A Buffer still queued in a request's streams
 *   at two young collections moves to the old generation, and is freed only by a whole
 *   collection, which V8 starts by itself once such memory has grown by 64 MiB. With more
 *   requests receiving at once (the client that keeps chunks going while earlier ones wait for
 *   their answers, `--parallel` 4: up to 7 requests), each body's Buffers wait longer and more of
 *   them move: 30 MB of dead Buffers were held at the peak of the third 512 MiB upload in a row,
 *   and the server's peak went from 103–104 MB (4 requests at once) to 116–121 MB. When a young
 *   collection leaves the memory outside the heap more than `STRAY_BYTES` above what the last
 *   such whole collection left, the heap is collected whole (2–17 ms, about once per 512 MiB in
 *   a row; none while nothing strays): 104 MB through five such uploads in a row, at the same
 *   speed (bench/README.md).
 */
const BODY_BYTES = 4 * 1024 * 1024;
/** Growth of the memory outside V8's heap (mostly body Buffers) that is worth a whole collection. */
const STRAY_BYTES = 8 * 1024 * 1024;
const QUIET_MS = 5000;
/** Growth of the heap since the last idle collection that is worth another. */
const GROWN = 1024 * 1024;

setFlagsFromString('--expose-gc');
// The flag applies to contexts made after it is set; the main one keeps no `gc` global. A Node
// that ignores the flag at run time gives none: V8 then collects as it sees fit.
const exposed: unknown = runInNewContext('gc');
const gc =
  typeof exposed === 'function' ? (exposed as (options?: { type: 'minor' }) => void) : () => {};

const operatorFlags = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].join(' ');
if (!/semi[-_]space/.test(operatorFlags)) keepV8Flag('--semi-space-growth-factor=1');

let pending = 0;
/** Memory outside the heap after the last whole collection for stray Buffers, or less since. */
let outsideKept = 0;
/** Bytes of body passed on since the last idle collection. */
let streamed = 0;

/** Counts `bytes` of body passed on; collects the young generation every `BODY_BYTES`. */
export function bodyPassedOn(bytes: number): void {
  streamed += bytes;
  pending += bytes;
  if (pending < BODY_BYTES) return;
  pending = 0;
  gc({ type: 'minor' });
  // Against what the last whole collection left (or less, since): memory held for good, such as
  // the pieces of many downloads at once, does not make every later young collection a whole one.
  const outside = getHeapStatistics().external_memory;
  if (outside < outsideKept) outsideKept = outside;
  else if (outside - outsideKept > STRAY_BYTES) {
    gc();
    outsideKept = getHeapStatistics().external_memory;
  }
}

let inFlight = 0;
let quietTimer: NodeJS.Timeout | null = null;
let heapAfterCollecting = 0;

/** Counts a request in; call what it returns when the request is over (more calls do nothing). */
export function requestStarted(): () => void {
  inFlight++;
  if (quietTimer) clearTimeout(quietTimer);
  quietTimer = null;
  let ended = false;
  return () => {
    if (ended) return;
    ended = true;
    if (--inFlight > 0) return;
    quietTimer = setTimeout(() => {
      quietTimer = null;
      // A health check every few seconds costs nothing: only real work is worth collecting.
      if (streamed < BODY_BYTES && getHeapStatistics().used_heap_size < heapAfterCollecting + GROWN)
        return;
      dropSparePieces();
      gc(); // whole: Node 20's V8 takes { type: 'major' } for a young collection (tried)
      streamed = 0;
      heapAfterCollecting = getHeapStatistics().used_heap_size;
    }, QUIET_MS);
    quietTimer.unref();
  };
}
