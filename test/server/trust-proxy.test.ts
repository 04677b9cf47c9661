import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser, expectFail, expectStatus, post } from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

/**
 * Behind a load balancer every client arrives from the balancer's address. With `trustProxy`
 * naming it, the client's own address (the balancer's X-Forwarded-For) is what failed sign-ins
 * are counted against, so one client's guessing does not lock everyone else out; without it,
 * X-Forwarded-For is ignored, so a client cannot dodge the limits by inventing addresses.
 */
const wrongTimes = async (url: string, username: string, forwardedFor: string, n: number) => {
  for (let i = 0; i < n; i++)
    expectFail(
      await post(url, '/users/login', {
        json: { username, password: `wrong-${i}` },
        headers: { 'x-forwarded-for': forwardedFor },
      }),
      401,
    );
};
const rightFrom = (url: string, user: { username: string; password: string }, from: string) =>
  post(url, '/users/login', {
    json: { username: user.username, password: user.password },
    headers: { 'x-forwarded-for': from },
  });

describe('client addresses behind a trusted proxy', () => {
  let trusting: TestServer;
  let plain: TestServer;
  let lines: string[];
  beforeAll(async () => {
    lines = [];
    trusting = await startServer({
      trustProxy: ['loopback'],
      requestLog: (e) => lines.push(`${e.remote} ${e.method} ${e.path}`),
    });
    plain = await startServer();
  });
  afterAll(async () => {
    await trusting.close();
    await plain.close();
  });

  it('counts failed sign-ins against the forwarded address, and logs it', async () => {
    const admin = await login(trusting.url, ADMIN.username, ADMIN.password);
    const user = await createUser(trusting.url, admin, ['READ']);
    await wrongTimes(trusting.url, user.username, '203.0.113.7', 10);
    expectFail(await rightFrom(trusting.url, user, '203.0.113.7'), 429);
    // Another client behind the same balancer is not locked out.
    expectStatus(await rightFrom(trusting.url, user, '198.51.100.20'), 200);
    expect(lines).toContain('203.0.113.7 POST /users/login');
    expect(lines).toContain('198.51.100.20 POST /users/login');
  });

  it('without trustProxy, X-Forwarded-For changes nothing: guesses cannot hide behind it', async () => {
    const admin = await login(plain.url, ADMIN.username, ADMIN.password);
    const user = await createUser(plain.url, admin, ['READ']);
    for (let i = 0; i < 10; i++) await wrongTimes(plain.url, user.username, `203.0.113.${i}`, 1);
    expectFail(await rightFrom(plain.url, user, '198.51.100.20'), 429);
  });
});
