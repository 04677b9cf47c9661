import { createHash, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HashWorker } from '../../src/shared/hasher.js';
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
