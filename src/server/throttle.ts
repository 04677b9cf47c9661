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
  private readonly checking: Checking;
  /** The password checks of share links (counted in routes/links.ts), waited for the same way. */
  readonly linkChecks: Checking;

  constructor(
    make: (prefix: string, window: Window) => RateLimiterAbstract = (keyPrefix, w) =>
      new RateLimiterMemory({ keyPrefix, points: w.points, duration: w.seconds }),
    /** The counts are shared with other servers, whose attempts in flight this one cannot see. */
    shared = false,
  ) {
    this.checking = new Checking(shared);
    this.linkChecks = new Checking(shared);
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
   * nothing, while any of its counts is used up by failures. Counting first means attempts sent
   * together cannot all pass a count that only some of them may (30 at once used to be 30
   * guesses). A count used up only with the help of attempts still being checked is not yet a
   * refusal: the attempt waits for their outcomes (Checking), so sign-ins sent together with the
   * right password all get in (a CI matrix signing in at once used to get 429 for all but 10).
   */
  async attempt(username: string, address: string): Promise<Attempt> {
    const keys = this.limiters(username, address);
    const settle = await this.checking.admit(
      keys.map(([, key], i) => `${i}\0${key}`),
      () => this.take(keys),
    );
    return {
      // The password was right: the attempt is not a failure, and the caller's count is cleared.
      succeeded: async () => {
        await this.pair.delete(`${username}\0${address}`).catch(() => undefined);
        await this.account.reward(username, 1).catch(() => undefined);
        await this.address.reward(address, 1).catch(() => undefined);
        settle();
      },
      failed: settle,
      // The password was never checked (the server too busy): nothing was learnt, nothing counts.
      unchecked: async () => {
        for (const [limiter, key] of keys) await limiter.reward(key, 1).catch(() => undefined);
        settle();
      },
    };
  }

  /** Takes a point of each count, or none (ThrottledError) while one of them is used up. */
  private async take(keys: [RateLimiterAbstract, string][]): Promise<void> {
    const taken: [RateLimiterAbstract, string][] = [];
    try {
      for (const [limiter, key] of keys) {
        const wait = await countAttempt(limiter, key);
        if (wait > 0) throw new ThrottledError(Math.ceil(wait / 1000));
        taken.push([limiter, key]);
      }
    } catch (err) {
      for (const [limiter, key] of taken) await limiter.reward(key, 1).catch(() => undefined);
      throw err;
    }
  }
}

/**
 * Password checks between their counting and their outcome, per count key, in this process. An
 * attempt that finds a count full (ThrottledError) while checks on one of its keys are under way
 * is not refused yet: it waits for one of their outcomes and asks again, since a right password
 * gives its point back. With counts shared by several servers, whose checks this one cannot see,
 * a full count is asked again for up to SHARED_WAIT_MS. At most MAX_WAITING attempts wait; past
 * that, and once nothing is under way, a full count is the refusal.
 */
export class Checking {
  private readonly under = new Map<string, number>();
  /** Resolved, and replaced, each time a check has its outcome. */
  private settled = pulse();
  private waiting = 0;

  constructor(private readonly shared: boolean) {}

  /**
   * Runs `take` (which counts the attempt, or throws ThrottledError counting nothing) until it
   * counts; resolves to the function that says the check is over (call it exactly once).
   */
  async admit(keys: string[], take: () => Promise<void>): Promise<() => void> {
    // A monotonic clock: the windows' own clock (Date) may be set, as the tests do.
    const since = performance.now();
    for (;;) {
      try {
        await take();
        break;
      } catch (err) {
        if (!(err instanceof ThrottledError) || this.waiting >= MAX_WAITING) throw err;
        const here = keys.some((key) => (this.under.get(key) ?? 0) > 0);
        // Another server's checks may be what fills the count: it is asked again for a while.
        const elsewhere = this.shared && performance.now() - since < SHARED_WAIT_MS;
        if (!here && !elsewhere) throw err;
        this.waiting++;
        try {
          if (here) await this.settled.promise;
          else await new Promise((resolve) => setTimeout(resolve, SHARED_POLL_MS));
        } finally {
          this.waiting--;
        }
      }
    }
    for (const key of keys) this.under.set(key, (this.under.get(key) ?? 0) + 1);
    let open = true;
    return () => {
      if (!open) return;
      open = false;
      for (const key of keys) {
        const left = (this.under.get(key) ?? 1) - 1;
        if (left > 0) this.under.set(key, left);
        else this.under.delete(key);
      }
      const { resolve } = this.settled;
      this.settled = pulse();
      resolve();
    };
  }
}

/** A counted sign-in attempt, told its outcome exactly once. */
export interface Attempt {
  succeeded(): Promise<void>;
  failed(): void;
  unchecked(): Promise<void>;
}

/**
 * Attempts that wait for others' outcomes (LoginThrottle.attempt); past this many, a refused
 * count is a 429 at once.
 */
const MAX_WAITING = 64;
/** With counts shared by several servers: how long, and how often, a refused count is asked again. */
const SHARED_WAIT_MS = 2000;
const SHARED_POLL_MS = 150;

/** A promise and its resolve (Promise.withResolvers is Node 22's). */
function pulse(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
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
