// API.md "Users" (additive): GET /users/<name> has an ETag, and PATCH/PUT with If-Match apply
// only to the user as it was read. Found broken: an administrator's read-modify-write (`fshare
// users perms bob +READ`, read the permissions, add one, PATCH them all back) overwrote another
// administrator's change made in between, and both were told 200: the server had no way to say
// "this user changed since you read it".
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createUser, del, expectFail, expectStatus, get, patch, put } from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

let srv: TestServer;
let admin: string;

beforeAll(async () => {
  srv = await startServer();
  admin = await login(srv.url, ADMIN.username, ADMIN.password);
});
afterAll(async () => {
  await srv?.close();
});

async function read(name: string): Promise<{ tag: string; permissions: string[] }> {
  const res = await get(srv.url, `/users/${name}`, { token: admin });
  expectStatus(res, 200);
  const tag = res.headers.etag;
  expect(tag).toMatch(/^"[^"]+"$/);
  return { tag: tag!, permissions: res.body.permissions };
}

describe('If-Match on PATCH and PUT /users/<name>', () => {
  it('a write with the ETag read applies; one with a stale ETag is 412 and changes nothing', async () => {
    const bob = await createUser(srv.url, admin, ['READ']);
    const first = await read(bob.username);

    // Another administrator's change in between: the first read is stale now.
    const other = await patch(srv.url, `/users/${bob.username}`, {
      token: admin,
      json: { permissions: ['LIST', 'READ'] },
    });
    expectStatus(other, 200);
    const second = await read(bob.username);
    expect(second.tag).not.toBe(first.tag);

    const stale = await patch(srv.url, `/users/${bob.username}`, {
      token: admin,
      json: { permissions: ['CREATE', 'READ'] },
      headers: { 'if-match': first.tag },
    });
    expectFail(stale, 412);
    expect(stale.body.message).toMatch(/changed since you read it/);
    expect((await read(bob.username)).permissions).toEqual(['LIST', 'READ']);
    const stalePut = await put(srv.url, `/users/${bob.username}`, {
      token: admin,
      json: { username: bob.username, password: 'another-pw', permissions: [] },
      headers: { 'if-match': first.tag },
    });
    expectFail(stalePut, 412);
    // The password did not change either.
    expectStatus(await get(srv.url, `/users/${bob.username}`, { token: bob.token }), 200);

    // The current tag (alone or in a list) applies, and the tag moves on.
    const fresh = await patch(srv.url, `/users/${bob.username}`, {
      token: admin,
      json: { permissions: ['CREATE', 'LIST', 'READ'] },
      headers: { 'if-match': `"elsewhere", ${second.tag}` },
    });
    expectStatus(fresh, 200);
    const third = await read(bob.username);
    expect(third.permissions).toEqual(['CREATE', 'LIST', 'READ']);
    expect(third.tag).not.toBe(second.tag);

    // `*` is any current user; a quota change moves the tag too.
    expectStatus(
      await patch(srv.url, `/users/${bob.username}`, {
        token: admin,
        json: { quota: 1000 },
        headers: { 'if-match': '*' },
      }),
      200,
    );
    expect((await read(bob.username)).tag).not.toBe(third.tag);

    // Without If-Match, writes are unconditional, as before.
    expectStatus(
      await patch(srv.url, `/users/${bob.username}`, { token: admin, json: { quota: null } }),
      200,
    );
  });

  // The condition holds at the moment of writing, not only when the request began: a PATCH with
  // a password (whose hash takes a while) and If-Match, raced by another administrator's change,
  // never lands over that change (on PostgreSQL the check is in the UPDATE's WHERE, so it holds
  // through two servers too).
  it('a change made while an If-Match write is on its way is never overwritten', async () => {
    for (let round = 0; round < 3; round++) {
      const dave = await createUser(srv.url, admin, ['READ']);
      const { tag } = await read(dave.username);
      const slow = patch(srv.url, `/users/${dave.username}`, {
        token: admin,
        json: { password: 'a-new-password', permissions: ['CREATE'] },
        headers: { 'if-match': tag },
      });
      const fast = patch(srv.url, `/users/${dave.username}`, {
        token: admin,
        json: { permissions: ['LIST'] },
      });
      const [a, b] = await Promise.all([slow, fast]);
      expectStatus(b, 200);
      expect([200, 412]).toContain(a.status);
      // Either the conditional write came first (then LIST went over it) or it was refused: in
      // no order may CREATE be left over a change it never saw.
      expect((await read(dave.username)).permissions).toEqual(['LIST']);
    }
  });

  // Found from outside: the tag stood for the name, permissions and quota only, so a user deleted
  // and made again under the same name (or two users who swapped names) had the tag of the one
  // read, and an If-Match meant for the old account gave the new one ADMIN.
  it('a tag read from one account never applies to another of the same name', async () => {
    const ivan = await createUser(srv.url, admin, ['READ']);
    const { tag } = await read(ivan.username);
    expectStatus(await del(srv.url, `/users/${ivan.username}`, { token: admin }), 200);
    await createUser(srv.url, admin, ['READ'], ivan.username, 'other-person-pw');
    const again = await read(ivan.username);
    expect(again.tag).not.toBe(tag);
    const meant = await patch(srv.url, `/users/${ivan.username}`, {
      token: admin,
      json: { permissions: ['ADMIN', 'READ'] },
      headers: { 'if-match': tag },
    });
    expectFail(meant, 412);
    expect((await read(ivan.username)).permissions).toEqual(['READ']);

    // Names swapped: the tag read from gina does not reach hank, who is called gina now.
    const gina = await createUser(srv.url, admin, ['READ']);
    const hank = await createUser(srv.url, admin, ['READ']);
    const ginas = await read(gina.username);
    const aside = `${gina.username}-old`;
    for (const [from, to] of [
      [gina.username, aside],
      [hank.username, gina.username],
    ])
      expectStatus(
        await patch(srv.url, `/users/${from}`, { token: admin, json: { username: to } }),
        200,
      );
    const swapped = await patch(srv.url, `/users/${gina.username}`, {
      token: admin,
      json: { quota: 1 },
      headers: { 'if-match': ginas.tag },
    });
    expectFail(swapped, 412);
    const now = await get(srv.url, `/users/${gina.username}`, { token: admin });
    expect(now.body.quota ?? null).toBeNull();
  });

  it('the checks of API.md come first: 401/403 for the caller, 404 for an unknown user', async () => {
    const carol = await createUser(srv.url, admin, ['READ']);
    const { tag } = await read(carol.username);
    const asCarol = await patch(srv.url, `/users/${carol.username}`, {
      token: carol.token,
      json: { permissions: ['ADMIN'] },
      headers: { 'if-match': tag },
    });
    expectFail(asCarol, 403);
    const unknown = await patch(srv.url, '/users/no-such-user-here', {
      token: admin,
      json: { permissions: [] },
      headers: { 'if-match': tag },
    });
    expectFail(unknown, 404);
  });
});
