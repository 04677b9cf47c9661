import type { RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Tokens } from './auth.js';
import type { ShareExpiry } from './expiry.js';
import type { Limits } from './limits.js';
import type { PasswordHasher } from './passwords.js';
import type { ContentStorage } from './storage/index.js';
import type { MetadataStore } from './store/index.js';
import type { LoginThrottle } from './throttle.js';

/** What every route module is built from. */
export interface Context {
  store: MetadataStore;
  storage: ContentStorage;
  tokens: Tokens;
  passwords: PasswordHasher;
  throttle: LoginThrottle;
  limits: Limits;
  /**
   * A rate limiter (points per window of `seconds`): in memory for the embedded store, in the
   * database with PostgreSQL, so that every server on it counts together.
   */
  limiter: (keyPrefix: string, points: number, seconds: number) => RateLimiterAbstract;
  /** Milliseconds since the epoch: expiry of shares and links (injectable for tests). */
  clock: () => number;
  expiry: ShareExpiry;
  /** Signs the short-lived grants a link's password form hands out. */
  linkKey: Buffer;
  /** Turns a caller's Idempotency-Key into the id of the share it creates. */
  idempotencyKey: Buffer;
  /** The base of link URLs when the server is reached through a proxy (`--public-url`). */
  publicUrl?: string;
  /** The server's notices (what went wrong outside any request's answer). */
  log: (line: string) => void;
}
