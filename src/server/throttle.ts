import { RateLimiterMemory, type RateLimiterAbstract } from 'rate-limiter-flexible';
import { LIMITS } from './limits.js';

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

  /** Throws ThrottledError while any of the counts for this attempt is used up. */
  async check(username: string, address: string): Promise<void> {
    let wait = 0;
    for (const [limiter, key] of this.limiters(username, address)) {
      const res = await limiter.get(key);
      if (res && res.consumedPoints >= limiter.points && res.msBeforeNext > 0)
        wait = Math.max(wait, res.msBeforeNext);
    }
    if (wait > 0) throw new ThrottledError(Math.ceil(wait / 1000));
  }

  async failed(username: string, address: string): Promise<void> {
    for (const [limiter, key] of this.limiters(username, address))
      await limiter.penalty(key, 1).catch(() => undefined);
  }

  async succeeded(username: string, address: string): Promise<void> {
    await this.pair.delete(`${username}\0${address}`).catch(() => undefined);
  }
}
