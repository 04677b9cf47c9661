import { createRequire } from 'node:module';
import type * as Flexible from 'rate-limiter-flexible';

const load = createRequire(import.meta.url);

/**
 * One of rate-limiter-flexible's classes, from its own module: the package's index loads every
 * store it supports (about 30 modules, 1 MB of heap held for the server's life), where the server
 * needs the memory store, and PostgreSQL's with that store.
 */
export const limiterClass = <
  K extends 'RateLimiterMemory' | 'RateLimiterRes' | 'RateLimiterPostgres',
>(
  name: K,
): (typeof Flexible)[K] => load(`rate-limiter-flexible/lib/${name}.js`);
