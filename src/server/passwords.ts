import { randomBytes, scrypt, timingSafeEqual } from 'node:crypto';

/**
 * Password hashing (scrypt), one hash at a time on libuv's pool of four threads, which file reads
 * and writes also use: a flood of sign-ins holds one of them, and downloads go on with the other
 * three (hashes in parallel took all four, and downloads waited seconds). A thread of our own did
 * the same at the cost of a V8 isolate started for every burst of sign-ins (about 30 ms of CPU,
 * 10 MB while it ran, and 1–3 MB of its allocator's pages left resident once it ended). At most
 * `maxQueued` wait at once: beyond that the server is busy (BusyError, answered 503 with
 * Retry-After), so a flood costs the attacker, not the queue.
 */
/**
 * N = 2^15, r = 8: 32 MiB per hash. Besides being stronger than 0.1's 2^14, a buffer above
 * 32 MiB is one glibc always maps and unmaps (its dynamic mmap threshold stops at 32 MiB), so no
 * sign-in leaves memory behind; 16 MiB buffers raised that threshold and left ~25 MB resident.
 * Hashes with other parameters still verify and are replaced at the next sign-in.
 */
const SCRYPT = { N: 32768, r: 8, p: 1, maxmem: 64 * 1024 * 1024 };
const KEYLEN = 64;

/** Too many password hashes are waiting: try again in a moment. */
export class BusyError extends Error {
  constructor() {
    super('The server is busy checking passwords; try again in a moment');
  }
}

interface Params {
  N: number;
  r: number;
  p: number;
  maxmem: number;
}

export class PasswordHasher {
  private queued = 0;
  private last: Promise<unknown> = Promise.resolve();
  private dummy: Promise<string> | null = null;

  constructor(private readonly maxQueued = 32) {}

  private derive(password: string, salt: Buffer, keylen: number, params: Params): Promise<Buffer> {
    if (this.queued >= this.maxQueued) return Promise.reject(new BusyError());
    this.queued++;
    const run = () =>
      new Promise<Buffer>((resolve, reject) =>
        scrypt(password, salt, keylen, params, (err, key) => (err ? reject(err) : resolve(key))),
      );
    // Chained: one hash at a time, whatever became of the one before.
    const result = this.last.then(run, run);
    this.last = result.catch(() => undefined);
    return result.finally(() => this.queued--);
  }

  /** `scrypt$N$r$p$salt$hash`, base64 parts: a slow salted hash, parameters kept for later changes. */
  async hash(password: string): Promise<string> {
    const salt = randomBytes(16);
    const hash = await this.derive(password, salt, KEYLEN, SCRYPT);
    return [
      'scrypt',
      SCRYPT.N,
      SCRYPT.r,
      SCRYPT.p,
      salt.toString('base64'),
      hash.toString('base64'),
    ].join('$');
  }

  /**
   * Checks a password against a stored hash. With no stored hash (no such user) the same work is
   * done against a dummy one, so "no such user" takes as long as "wrong password".
   */
  async verify(password: string, stored: string | undefined): Promise<boolean> {
    this.dummy ??= this.hash(randomBytes(16).toString('hex')).catch((err: unknown) => {
      this.dummy = null; // busy this time: try again next time
      throw err;
    });
    const [scheme, n, r, p, salt, hash] = (stored ?? (await this.dummy)).split('$');
    if (scheme !== 'scrypt' || !salt || !hash) return false;
    const expected = Buffer.from(hash, 'base64');
    const actual = await this.derive(password, Buffer.from(salt, 'base64'), expected.length, {
      N: Number(n),
      r: Number(r),
      p: Number(p),
      maxmem: SCRYPT.maxmem,
    });
    return timingSafeEqual(actual, expected) && stored !== undefined;
  }

  /** True when a stored hash was made with other parameters than new hashes get. */
  outdated(stored: string): boolean {
    const [scheme, n, r, p] = stored.split('$');
    return (
      scheme !== 'scrypt' ||
      Number(n) !== SCRYPT.N ||
      Number(r) !== SCRYPT.r ||
      Number(p) !== SCRYPT.p
    );
  }

  async close(): Promise<void> {
    await this.last;
  }
}
