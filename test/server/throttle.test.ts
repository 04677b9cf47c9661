// The counts behind sign-in and link-password throttling (server/throttle.ts), on the real
// rate-limiter-flexible memory store, with the clock it reads (Date) set by the test. Found from
// outside: right sign-ins whose check spanned the end of a window gave their point back into the
// next one, which began below zero (118 wrong passwords checked from one address, against 100);
// and attempts held waiting by one address, on checks of their own, used up the waiting places
// of every other client.
import { RateLimiterMemory } from 'rate-limiter-flexible';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { Checking, giveBack, takePoint, ThrottledError } from '../../src/server/throttle.js';

afterEach(() => {
  vi.useRealTimers();
});

/** A socket that never closes. */
const open = { destroyed: false, once: () => undefined, off: () => undefined };

describe('giving a point back', () => {
  it('after its window ended, leaves the next window at zero, not below', async () => {
    vi.useFakeTimers({ toFake: ['Date'], now: Date.now() });
    const count = new RateLimiterMemory({ points: 3, duration: 60 });
    await takePoint(count, 'k', 'k'); // a right password's check begins …
    vi.setSystemTime(Date.now() + 61_000);
    await giveBack(count, 'k'); // … and ends in the next window
    for (let i = 0; i < 3; i++) await takePoint(count, 'k', 'k');
    await expect(takePoint(count, 'k', 'k')).rejects.toBeInstanceOf(ThrottledError);
  });
});

describe('waiting for checks under way', () => {
  it('waits only on checks of the count that was full, and ends with them', async () => {
    const count = new RateLimiterMemory({ points: 2, duration: 60 });
    const checking = new Checking(false);
    const admit = (address: string) =>
      checking.admit(['k'], () => takePoint(count, 'k', 'k'), { address, socket: open });
    const first = await admit('a');
    const second = await admit('b');
    // Full with two checks under way: a third waits …
    let third: (() => void) | undefined;
    const waiting = admit('c').then((done) => (third = done));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(third).toBeUndefined();
    // … and gets in when one of them was right (its point given back).
    await giveBack(count, 'k');
    first();
    await waiting;
    expect(third).toBeDefined();
    // Both others wrong: the count is full of failures, and a fourth is refused at once.
    second();
    third!();
    await expect(admit('d')).rejects.toBeInstanceOf(ThrottledError);
  });

  it('holds at most 32 attempts of one address waiting; another address still waits', async () => {
    const count = new RateLimiterMemory({ points: 1, duration: 60 });
    const checking = new Checking(false);
    const admit = (address: string) =>
      checking.admit(['k'], () => takePoint(count, 'k', 'k'), { address, socket: open });
    const check = await admit('held');
    const held = Array.from({ length: 32 }, () => admit('held'));
    await new Promise((resolve) => setTimeout(resolve, 20));
    // The 33rd of that address is refused at once …
    await expect(admit('held')).rejects.toBeInstanceOf(ThrottledError);
    // … and another address's attempt still waits for the check, and gets in once it was right.
    let other: (() => void) | undefined;
    const waiting = admit('other').then((done) => (other = done));
    await new Promise((resolve) => setTimeout(resolve, 20));
    expect(other).toBeUndefined();
    await giveBack(count, 'k');
    check();
    // One of the 33 waiting gets the place: the rest wait on, until checks end.
    const settled = await Promise.race([waiting, ...held]);
    expect(typeof settled).toBe('function');
    (settled as () => void)();
    for (const p of [waiting, ...held]) p.catch(() => undefined);
  });

  it('an attempt whose client went away stops waiting, refused', async () => {
    const count = new RateLimiterMemory({ points: 1, duration: 60 });
    const checking = new Checking(false);
    const check = await checking.admit(['k'], () => takePoint(count, 'k', 'k'), {
      address: 'a',
      socket: open,
    });
    let close = () => {};
    const socket = {
      destroyed: false,
      once: (_: 'close', listener: () => void) => void (close = listener),
      off: () => undefined,
    };
    const waiting = checking.admit(['k'], () => takePoint(count, 'k', 'k'), {
      address: 'b',
      socket,
    });
    await new Promise((resolve) => setTimeout(resolve, 20));
    socket.destroyed = true;
    close();
    await expect(waiting).rejects.toBeInstanceOf(ThrottledError);
    check();
  });
});
