import type { RateLimiterAbstract } from 'rate-limiter-flexible';
import { LIMITS } from './limits.js';
import { limiterClass } from './limiters.js';

const RateLimiterMemory = limiterClass('RateLimiterMemory');
const RateLimiterRes = limiterClass('RateLimiterRes');

/** Too many failed sign-ins: `retryAfter` seconds until the next attempt is considered. */
export class ThrottledError extends Error {
  constructor(
    readonly retryAfter: number,
    /** The count that was full, by its key as Checking knows it. */
    readonly full?: { key: string },
  ) {
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

  /**
   * The address's count first: one that is full refuses before a record is made for the account
   * or the pair (found from outside: a flood of new user names from a blocked address made two
   * records each, held 5 minutes, and grew the server by gigabytes).
   */
  private limiters(username: string, address: string): [RateLimiterAbstract, string][] {
    return [
      [this.address, address],
      [this.account, username],
      [this.pair, `${username}\0${address}`],
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
  async attempt(username: string, address: string, socket?: Connection): Promise<Attempt> {
    const keys = this.limiters(username, address);
    const names = keys.map(([, key], i) => `${i}\0${key}`);
    const settle = await this.checking.admit(names, () => this.take(keys, names), {
      address,
      socket,
    });
    return {
      // The password was right: the attempt is not a failure, and the caller's count is cleared.
      succeeded: async () => {
        await this.pair.delete(`${username}\0${address}`).catch(() => undefined);
        await giveBack(this.account, username);
        await giveBack(this.address, address);
        settle();
      },
      failed: settle,
      // The password was never checked (the server too busy): nothing was learnt, nothing counts.
      unchecked: async () => {
        for (const [limiter, key] of keys) await giveBack(limiter, key);
        settle();
      },
    };
  }

  /** Takes a point of each count, or none (ThrottledError) while one of them is used up. */
  private async take(keys: [RateLimiterAbstract, string][], names: string[]): Promise<void> {
    const taken: [RateLimiterAbstract, string][] = [];
    try {
      for (const [i, [limiter, key]] of keys.entries()) {
        await takePoint(limiter, key, names[i]!);
        taken.push([limiter, key]);
      }
    } catch (err) {
      for (const [limiter, key] of taken) await giveBack(limiter, key);
      throw err;
    }
  }
}

/**
 * Password checks between their counting and their outcome, per count key, in this process. An
 * attempt that finds a count full (ThrottledError) is not refused yet when checks of that count
 * are under way: it waits for one of their outcomes and asks again, since a right password gives
 * its point back (a wrong one keeps it, and the count stays full). A count full with no check of
 * it under way is the refusal at once. With counts shared by several servers, whose checks this
 * one cannot see, a full count is asked again for up to SHARED_WAIT_MS. At most
 * MAX_WAITING_PER_ADDRESS attempts
 * of one client address wait, MAX_WAITING in all, and none whose client went away (found from
 * outside: 64 attempts held waiting by one address, on checks of their own, made every other
 * account's sign-ins sent at once get 429 again).
 */
export class Checking {
  private readonly under = new Map<string, number>();
  /** Resolved, and replaced, each time a check has its outcome. */
  private settled = pulse();
  private waiting = 0;
  private readonly waitingBy = new Map<string, number>();
  /** How many checks have ended so far. */
  private outcomes = 0;

  constructor(private readonly shared: boolean) {}

  /**
   * Runs `take` (which counts the attempt, or throws ThrottledError counting nothing) until it
   * counts; resolves to the function that says the check is over (call it exactly once).
   */
  async admit(
    keys: string[],
    take: () => Promise<void>,
    options: { address: string; socket?: Connection },
  ): Promise<() => void> {
    const { address, socket } = options;
    const gone = () => socket?.destroyed === true;
    // A monotonic clock: the windows' own clock (Date) may be set, as the tests do.
    const since = performance.now();
    let askedAgain = 0;
    for (;;) {
      const before = this.outcomes;
      try {
        await take();
        break;
      } catch (err) {
        if (!(err instanceof ThrottledError) || gone()) throw err;
        // A check ended while the count was asked: ask again, now that it may have room.
        if (this.outcomes !== before && askedAgain++ < ASK_AGAIN_MAX) continue;
        if (this.waiting >= MAX_WAITING) throw err;
        if ((this.waitingBy.get(address) ?? 0) >= MAX_WAITING_PER_ADDRESS) throw err;
        // Checks under way of the count that was full (not of the attempt's other counts, which
        // one who holds a check under way on them could use to keep attempts waiting).
        const here = err.full !== undefined && (this.under.get(err.full.key) ?? 0) > 0;
        // Another server's checks may be what fills the count: it is asked again for a while.
        const elsewhere = this.shared && performance.now() - since < SHARED_WAIT_MS;
        if (!here && !elsewhere) throw err;
        this.waiting++;
        this.waitingBy.set(address, (this.waitingBy.get(address) ?? 0) + 1);
        try {
          let stop = () => {};
          await new Promise<void>((resolve) => {
            const timer = here ? undefined : setTimeout(resolve, SHARED_POLL_MS);
            if (here) void this.settled.promise.then(resolve);
            const closed = () => resolve();
            socket?.once('close', closed);
            stop = () => {
              clearTimeout(timer);
              socket?.off('close', closed);
            };
          });
          stop();
        } finally {
          this.waiting--;
          const left = (this.waitingBy.get(address) ?? 1) - 1;
          if (left > 0) this.waitingBy.set(address, left);
          else this.waitingBy.delete(address);
        }
        if (gone()) throw err;
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
      this.outcomes++;
      const { resolve } = this.settled;
      this.settled = pulse();
      resolve();
    };
  }
}

/** A client's connection, as far as waiting for it goes. */
interface Connection {
  readonly destroyed: boolean;
  once(event: 'close', listener: () => void): unknown;
  off(event: 'close', listener: () => void): unknown;
}

/** A counted sign-in attempt, told its outcome exactly once. */
export interface Attempt {
  succeeded(): Promise<void>;
  failed(): void;
  unchecked(): Promise<void>;
}

/**
 * Attempts that wait for others' outcomes (Checking), in all and per client address; past
 * these, a full count is a 429 at once.
 */
const MAX_WAITING = 1024;
/** How often an attempt asks a full count again at once because a check ended meanwhile. */
const ASK_AGAIN_MAX = 16;
const MAX_WAITING_PER_ADDRESS = 32;
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
 * Takes one point of `key`'s count (`name`: the count as Checking knows it), or throws
 * ThrottledError, counting nothing, with how full the count was.
 */
export async function takePoint(
  limiter: RateLimiterAbstract,
  key: string,
  name: string,
): Promise<void> {
  try {
    await limiter.consume(key, 1);
  } catch (err) {
    if (!(err instanceof RateLimiterRes)) throw err;
    await limiter.reward(key, 1).catch(() => undefined);
    throw new ThrottledError(Math.ceil(Math.max(1, err.msBeforeNext) / 1000), { key: name });
  }
}

/**
 * Gives back the point an attempt took. A window that ended meanwhile would otherwise begin
 * below zero (found from outside: right sign-ins whose check spanned the end of a window let 118
 * wrong passwords be checked from one address in the next, against 100).
 */
export async function giveBack(limiter: RateLimiterAbstract, key: string): Promise<void> {
  try {
    const res = await limiter.reward(key, 1);
    if (res.consumedPoints < 0) await limiter.penalty(key, -res.consumedPoints);
  } catch {
    // the count stays as it is: at worst one attempt too many is refused
  }
}
