import { createHash, randomBytes } from 'node:crypto';
import { readdirSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HashWorker, INLINE_MAX } from '../../src/shared/hasher.js';
import { tempDir } from '../helpers/cli.js';

/**
 * Property: the hashing thread ends when it holds no hash and has nothing to do (so an idle
 * server gives its memory back), never while a hash is held, and a hash started after it ended
 * is right.
 */

const IDLE_MS = 100;
let file: string;
const data = randomBytes(3 * 1024 * 1024 + 17);
const expected = createHash('sha256').update(data).digest('hex');
const hasher = new HashWorker({ idleMs: IDLE_MS });

beforeAll(async () => {
  file = join(await tempDir('hasher'), 'data.bin');
  await writeFile(file, data);
});

afterAll(async () => {
  await hasher.close();
});

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function hashWhole(): Promise<string> {
  const hash = hasher.create();
  await hash.updateFromFile(file, 0, data.length);
  return hash.digest();
}

describe('the hashing thread ends when idle', () => {
  it('ends after its last digest, and a later hash starts it again, right', async () => {
    expect(await hashWhole()).toBe(expected);
    expect(hasher.running).toBe(true);
    await pause(IDLE_MS * 4);
    expect(hasher.running).toBe(false);
    expect(await hashWhole()).toBe(expected);
  });

  it('stays while a hash is held between updates, and the hash comes out right', async () => {
    const hash = hasher.create();
    await hash.updateFromFile(file, 0, 1_000_000);
    await pause(IDLE_MS * 4);
    expect(hasher.running).toBe(true);
    await hash.updateFromFile(file, 1_000_000, data.length);
    expect(await hash.digest()).toBe(expected);
    await pause(IDLE_MS * 4);
    expect(hasher.running).toBe(false);
  });

  it('a disposed hash no longer holds it', async () => {
    const hash = hasher.create();
    await hash.updateFromFile(file, 0, 1000);
    hash.dispose();
    await pause(IDLE_MS * 4);
    expect(hasher.running).toBe(false);
  });

  it('a hash started while the ended thread is still exiting is not failed by that exit', async () => {
    expect(await hashWhole()).toBe(expected);
    // Poll until the idle end has begun, then start at once, before the old thread's exit.
    while (hasher.running) await pause(5);
    const results = await Promise.all([hashWhole(), hashWhole()]);
    expect(results).toEqual([expected, expected]);
  });
});

/**
 * Property: a hash known to be small is computed on the calling thread (no thread is started for
 * it) with the thread's semantics: updates in the order asked, awaited or not; a copy goes on
 * from the state at the moment it was taken; a failed update fails the digest.
 */
describe('small hashes are computed without the thread', () => {
  const sha = (...parts: Buffer[]) => {
    const h = createHash('sha256');
    for (const p of parts) h.update(p);
    return h.digest('hex');
  };

  it('does not start the thread, and keeps the order of updates that were not awaited', async () => {
    const own = new HashWorker({ idleMs: IDLE_MS });
    try {
      const ring = new SharedArrayBuffer(64);
      const bytes = Buffer.from(ring);
      bytes.fill(7);
      const hash = own.create(1_000_000 + 64);
      hash.useRing(ring);
      const fromFile = hash.updateFromFile(file, 0, 1_000_000); // not awaited before the next
      const fromRing = hash.updateFromRing(0, 64);
      const copy = hash.copy(); // the state after both
      await Promise.all([fromFile, fromRing]);
      bytes.fill(9); // the slot is free again once its update resolved
      const whole = sha(data.subarray(0, 1_000_000), Buffer.alloc(64, 7));
      expect(await hash.digest()).toBe(whole);
      await copy.updateFromFile(file, 0, 10);
      expect(await copy.digest()).toBe(
        sha(data.subarray(0, 1_000_000), Buffer.alloc(64, 7), data.subarray(0, 10)),
      );
      expect(own.running).toBe(false);
    } finally {
      await own.close();
    }
  });

  it('many at once read their files one at a time (a push of thousands of small files)', async () => {
    const fds = () => readdirSync('/proc/self/fd').length;
    const before = fds();
    let most = before;
    const watch = setInterval(() => (most = Math.max(most, fds())), 0);
    const hashes = Array.from({ length: 200 }, () => hasher.create(data.length));
    const digests = await Promise.all(
      hashes.map(async (h) => {
        await h.updateFromFile(file, 0, data.length);
        return h.digest();
      }),
    );
    clearInterval(watch);
    expect(new Set(digests)).toEqual(new Set([expected]));
    expect(most - before).toBeLessThanOrEqual(2);
  });

  it('a file shorter than asked fails the digest, as on the thread', async () => {
    const small = hasher.create(INLINE_MAX);
    await expect(small.updateFromFile(file, 0, data.length + 5)).rejects.toThrow(/ended at byte/);
    await expect(small.digest()).rejects.toThrow();
  });

  it('a hash expected to be larger than INLINE_MAX uses the thread', async () => {
    const own = new HashWorker({ idleMs: IDLE_MS });
    try {
      const hash = own.create(INLINE_MAX + 1);
      await hash.updateFromFile(file, 0, data.length);
      expect(own.running).toBe(true);
      expect(await hash.digest()).toBe(expected);
    } finally {
      await own.close();
    }
  });
});

/**
 * Property: V8 flags the process keeps (shared/v8-flags.ts) hold again once the hashing thread
 * runs, though setting up the thread's V8 isolate raises the young generation's growth factor
 * back to 2. A child process, from the built modules, keeps a factor of 1, starts the thread,
 * waits for `ready()`, then keeps enough objects alive for long enough that a growing young
 * generation would reach its largest size (32 MB, measured without the flag).
 */
describe('V8 flags the process keeps', () => {
  /**
   * Runs `start` (which leaves a hash `hash` on a thread that is starting) in a child process
   * that keeps a growth factor of 1, awaits `ready()`, then keeps objects alive; the young
   * generation's size before and after, in bytes.
   */
  async function youngGeneration(start: string): Promise<{ before: number; after: number }> {
    const dist = pathToFileURL(join(import.meta.dirname, '..', '..', 'dist', 'shared')).href;
    const script = `
      import { getHeapSpaceStatistics } from 'node:v8';
      import { keepV8Flag } from '${dist}/v8-flags.js';
      import { HashWorker } from '${dist}/hasher.js';
      const pause = (ms) => new Promise((r) => setTimeout(r, ms));
      keepV8Flag('--semi-space-growth-factor=1');
      ${start}
      await hasher.ready();
      const young = () => getHeapSpaceStatistics().find((s) => s.space_name === 'new_space').space_size;
      const before = young();
      const keep = [];
      for (let i = 0; i < 2e6; i++) {
        keep.push({ i });
        if (keep.length > 200000) keep.splice(0, 100000);
      }
      hash.dispose();
      await hasher.close();
      console.log(JSON.stringify({ before, after: young() }));
    `;
    const { stdout } = await execa('node', ['--input-type=module', '-e', script]);
    return JSON.parse(stdout) as { before: number; after: number };
  }

  it('hold again once the hashing thread is ready', async () => {
    const { before, after } = await youngGeneration(`
      const hasher = new HashWorker();
      const hash = hasher.create();
    `);
    expect(after).toBeLessThanOrEqual(before);
  }, 30_000);

  // The thread that ended exits while the next one starts: its exit must not count as the new
  // one being up. The next one is asked for as soon as the first is let go, and `ready()` once
  // the first has gone from /proc/self/task and its exit has been handled.
  it('hold again when a thread starts while the one before it is still exiting', async () => {
    const { before, after } = await youngGeneration(`
      const { readdirSync } = await import('node:fs');
      const threads = () => readdirSync('/proc/self/task').length;
      const alone = threads();
      const hasher = new HashWorker({ idleMs: 1 });
      const first = hasher.create();
      await hasher.ready();
      first.dispose(); // the thread is let go 1 ms later
      while (hasher.running) await pause(0);
      const hash = hasher.create(); // a new thread, the first one still exiting
      while (threads() > alone + 1) await pause(1);
      await pause(1);
    `);
    expect(after).toBeLessThanOrEqual(before);
  }, 30_000);
});
