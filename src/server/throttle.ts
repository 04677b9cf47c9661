import type { RateLimiterAbstract } from 'rate-limiter-flexible';
import { LIMITS } from './limits.js';
import { limiterClass } from './limiters.js';

const RateLimiterMemory = limiterClass('RateLimiterMemory');
const RateLimiterRes = limiterClass('RateLimiterRes');

/** Too many failed sign-ins: `retryAfter` seconds until the next attempt is considered. */
export class ThrottledError extends Error {
  constructor(readonly retryAfter: number) {
    super(`Too many failed sign-ins; try again in ${retryAfter} s`);
  }
}

interface Window {
  points: number;
  seconds: number;
}

/**
 * Failed password checks are counted per account and client address, per account, and per
 * address, each in a fixed window (docs/API.md, "Limits"). While a count is used up, attempts
 * are refused before the password is even checked (so guessing gains nothing) with 429 and
 * Retry-After; the window then ends and a correct password works again. A success clears the
 * account-and-address count, so a user's own typos never add up.
 *
 * The counts live in rate-limiter-flexible limiters; the memory store is the default, and a
 * shared store (PostgreSQL) can be given for several servers.
 */
export class LoginThrottle {
  private readonly pair: RateLimiterAbstract;
  private readonly account: RateLimiterAbstract;
  private readonly address: RateLimiterAbstract;

  constructor(
    make: (prefix: string, window: Window) => RateLimiterAbstract = (keyPrefix, w) =>
      new RateLimiterMemory({ keyPrefix, points: w.points, duration: w.seconds }),
  ) {
    this.pair = make('login-pair', LIMITS.loginFailuresPerAccountAndAddress);
    this.account = make('login-account', LIMITS.loginFailuresPerAccount);
    this.address = make('login-address', LIMITS.loginFailuresPerAddress);
  }

  private limiters(username: string, address: string): [RateLimiterAbstract, string][] {
    return [
      [this.pair, `${username}\0${address}`],
      [this.account, username],
      [this.address, address],
    ];
  }

  /**
   * Counts a sign-in attempt before its password is checked; throws ThrottledError, counting
   * nothing, while any of its counts is used up. Counting first means attempts sent together
   * cannot all pass a count that only some of them may (30 at once used to be 30 guesses).
   */
  async attempt(username: string, address: string): Promise<void> {
    const taken: [RateLimiterAbstract, string][] = [];
    try {
      for (const [limiter, key] of this.limiters(username, address)) {
        const wait = await countAttempt(limiter, key);
        if (wait > 0) throw new ThrottledError(Math.ceil(wait / 1000));
        taken.push([limiter, key]);
      }
    } catch (err) {
      for (const [limiter, key] of taken) await limiter.reward(key, 1).catch(() => undefined);
      throw err;
    }
  }

  /** The password was right: the attempt is not a failure, and the caller's count is cleared. */
  async succeeded(username: string, address: string): Promise<void> {
    await this.pair.delete(`${username}\0${address}`).catch(() => undefined);
    await this.account.reward(username, 1).catch(() => undefined);
    await this.address.reward(address, 1).catch(() => undefined);
  }
}

/**
 * Takes one point of `key`'s count for an attempt about to be checked (a right password gives it
 * back). Resolves to 0, or, while the count is used up, to the milliseconds until it starts over,
 * having counted nothing. A failing store (the database down) rejects.
 */
export async function countAttempt(limiter: RateLimiterAbstract, key: string): Promise<number> {
  try {
    await limiter.consume(key, 1);
    return 0;
  } catch (err) {
    if (!(err instanceof RateLimiterRes)) throw err;
    await limiter.reward(key, 1).catch(() => undefined);
    return Math.max(1, err.msBeforeNext);
  }
}
