// Identity that cannot be confused (issue 9): users have an immutable id; tokens carry it and a
// per-user generation, so a deleted user's token never comes back to life with a new user of the
// same name, a password change or "sign out everywhere" ends every older token, and shares are
// owned by id. Changes to users are serialised: two users of one name can never exist.
import { randomBytes, randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createShare,
  createUser,
  del,
  expectFail,
  expectStatus,
  get,
  getShare,
  patch,
  post,
  setDefaultPermissions,
  stalledChunk,
  unique,
  until,
} from '../helpers/http.js';
import {
  ADMIN,
  chunkArriving,
  login,
  startServer,
  storedUploads,
  type TestServer,
} from '../helpers/server.js';

let srv: TestServer;
let base: string;
let admin: string;
beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
});
afterAll(() => srv.close());

const MiB = 1024 * 1024;

const whoami = async (token: string) => (await get(base, '/whoami', { token })).body;

describe('a deleted user', () => {
  it('their token stays dead when a new user takes the name, who inherits nothing', async () => {
    const name = unique('y');
    const old = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ', 'LIST'], name);
    const share = await createShare(base, old.token, 'of-the-old-y.txt');
    expectStatus(await del(base, `/users/${name}`, { token: admin }), 200);
    expectFail(await get(base, '/whoami', { token: old.token }), 401);

    const fresh = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ', 'LIST'], name);
    // The old token is still refused: it names the old user's id, not the name.
    expectFail(await get(base, '/whoami', { token: old.token }), 401);
    expect(await whoami(fresh.token)).toMatchObject({ username: name });
    // The share was the old user's: the new one may not change it, and it says so.
    const shown = await getShare(base, fresh.token, share);
    expect(shown.owner_name).toBe(`${name} (deleted)`);
    expectFail(
      await patch(base, `/files/${share}`, { token: fresh.token, json: { file_name: 'mine' } }),
      403,
    );
    expectFail(await post(base, `/files/${share}/content`, { token: fresh.token, body: 'x' }), 403);
  });
});

describe('a caller that changed while its chunk streamed in', () => {
  // A chunk is committed only for a caller who still may send it. Found broken: a chunk whose
  // request began before its user was deleted, signed out everywhere or stripped of CREATE was
  // still committed (201), and a deleted user's share took content after the deletion.
  it('deleted (401), signed out everywhere (401) or without CREATE (403): nothing is committed', async () => {
    for (const [change, status] of [
      ['delete', 401],
      ['signout', 401],
      ['permissions', 403],
    ] as const) {
      const user = await createUser(base, admin, ['CREATE', 'READ']);
      const share = await createShare(base, user.token, `${change}.bin`);
      const fields = { dzuuid: randomUUID(), dzchunkindex: 0, dztotalchunks: 1 };
      const slow = await stalledChunk(base, user.token, share, fields, randomBytes(100_000), 1000);
      await new Promise((r) => setTimeout(r, 200)); // the server has checked the caller, and waits
      const path = `/users/${user.username}`;
      if (change === 'delete') expectStatus(await del(base, path, { token: admin }), 200);
      if (change === 'signout')
        expectStatus(await del(base, `${path}/tokens`, { token: admin }), 200);
      if (change === 'permissions')
        expectStatus(
          await patch(base, path, { token: admin, json: { permissions: ['READ'] } }),
          200,
        );
      expectFail(await slow.finish(), status);
      expect(await getShare(base, admin, share)).toMatchObject({ initialized: false, size: null });
    }
  });
});

describe('a caller that changed while its chunk streamed in, on another server', () => {
  // Found from outside on two servers: a chunk streaming into server B whose token was signed
  // out with POST /users/logout on server A (the token then got 401 on B at once) was still
  // committed once its body arrived (201), as was an anonymous chunk whose CREATE an ADMIN had
  // taken out of default_permissions meanwhile. Both are now 401, and nothing is committed.
  it('its token revoked by a logout (401): nothing is committed', async () => {
    const user = await createUser(base, admin, ['CREATE', 'READ']);
    const share = await createShare(base, user.token, 'logout.bin');
    const fields = { dzuuid: randomUUID(), dzchunkindex: 0, dztotalchunks: 2 };
    const slow = await stalledChunk(base, user.token, share, fields, randomBytes(3 * MiB), 2 * MiB);
    await until(() => chunkArriving(srv, share), 'the chunk to reach the server');
    expectStatus(
      await post(base, '/users/logout', { token: user.token, json: { token: user.token } }),
      200,
    );
    expectFail(await slow.finish(), 401);
    expect(await storedUploads(srv, share)).toEqual([]);
  });

  it('anonymous, its permission taken out of default_permissions (401): nothing is committed', async () => {
    await setDefaultPermissions(base, admin, ['CREATE', 'READ']);
    try {
      const share = await createShare(base, undefined, 'anonymous.bin');
      const fields = { dzuuid: randomUUID(), dzchunkindex: 0, dztotalchunks: 2 };
      const slow = await stalledChunk(
        base,
        undefined,
        share,
        fields,
        randomBytes(3 * MiB),
        2 * MiB,
      );
      await until(() => chunkArriving(srv, share), 'the chunk to reach the server');
      await setDefaultPermissions(base, admin, ['READ']);
      expectFail(await slow.finish(), 401);
      expect(await storedUploads(srv, share)).toEqual([]);
    } finally {
      await setDefaultPermissions(base, admin, []);
    }
  });
});

describe('token generations', () => {
  // The caller's own token survives its password change. Found from outside with the reference
  // server's browser client (sachet-ui), which keeps the token it signed in with: after "Change
  // password" every request it made got 401 ("Log out" threw), although the answer said "every
  // other token was revoked". The reference server keeps the caller's token.
  it("a password change ends every other token at once; the caller's goes on, and the answer carries a new one", async () => {
    const user = await createUser(base, admin, ['READ']);
    const second = await login(base, user.username, user.password);
    const res = await post(base, '/users/password', {
      token: user.token,
      json: { old: user.password, new: 'a new password' },
    });
    expectStatus(res, 200);
    expect(res.body.message).toBe('Password changed; every other token was revoked');
    expectFail(await get(base, '/whoami', { token: second }), 401);
    for (const t of [user.token, res.body.auth_token])
      expect(await whoami(t)).toMatchObject({ username: user.username });
    // It is the caller's token, still able to do what a token does, logout included.
    expectStatus(await post(base, '/users/extend', { token: user.token }), 200);
    expectStatus(
      await post(base, '/users/logout', { token: user.token, json: { token: user.token } }),
      200,
    );
    expectFail(await get(base, '/whoami', { token: user.token }), 401);
    expect(await whoami(res.body.auth_token)).toMatchObject({ username: user.username });
  });

  it('the token a password change kept ends with the next end of tokens that does not keep it', async () => {
    // Sign out everywhere.
    const a = await createUser(base, admin, ['READ']);
    expectStatus(
      await post(base, '/users/password', {
        token: a.token,
        json: { old: a.password, new: 'pw-2' },
      }),
      200,
    );
    expectStatus(await del(base, `/users/${a.username}/tokens`, { token: admin }), 200);
    expectFail(await get(base, '/whoami', { token: a.token }), 401);

    // A second password change, made with another token: only that one is kept.
    const b = await createUser(base, admin, ['READ']);
    const first = await post(base, '/users/password', {
      token: b.token,
      json: { old: b.password, new: 'pw-2' },
    });
    expectStatus(first, 200);
    const other = await login(base, b.username, 'pw-2');
    expectStatus(
      await post(base, '/users/password', { token: other, json: { old: 'pw-2', new: 'pw-3' } }),
      200,
    );
    for (const t of [b.token, first.body.auth_token])
      expectFail(await get(base, '/whoami', { token: t }), 401);
    expect(await whoami(other)).toMatchObject({ username: b.username });

    // The kept token changing the password again stays kept; an administrator's reset ends it.
    const c = await createUser(base, admin, ['READ']);
    for (const [old, next] of [
      [c.password, 'pw-2'],
      ['pw-2', 'pw-3'],
    ])
      expectStatus(
        await post(base, '/users/password', { token: c.token, json: { old, new: next } }),
        200,
      );
    expect(await whoami(c.token)).toMatchObject({ username: c.username });
    expectStatus(
      await patch(base, `/users/${c.username}`, { token: admin, json: { password: 'reset!' } }),
      200,
    );
    expectFail(await get(base, '/whoami', { token: c.token }), 401);
  });

  it("an administrator setting a password ends the user's tokens too", async () => {
    const user = await createUser(base, admin, ['READ']);
    expectStatus(
      await patch(base, `/users/${user.username}`, { token: admin, json: { password: 'reset!' } }),
      200,
    );
    expectFail(await get(base, '/whoami', { token: user.token }), 401);
    await login(base, user.username, 'reset!');
  });

  it('sign out everywhere: the user or an administrator; nobody else', async () => {
    const user = await createUser(base, admin, ['READ']);
    const other = await createUser(base, admin, ['READ']);
    expectFail(await del(base, `/users/${user.username}/tokens`, { token: other.token }), 403);
    expect(await whoami(user.token)).toMatchObject({ username: user.username });
    const again = await login(base, user.username, user.password);
    expectStatus(await del(base, `/users/${user.username}/tokens`, { token: user.token }), 200);
    for (const t of [user.token, again]) expectFail(await get(base, '/whoami', { token: t }), 401);
    const fresh = await login(base, user.username, user.password);
    expectStatus(await del(base, `/users/${user.username}/tokens`, { token: admin }), 200);
    expectFail(await get(base, '/whoami', { token: fresh }), 401);
    // Other users' tokens are untouched.
    expect(await whoami(other.token)).toMatchObject({ username: other.username });
  });

  // A password change ends every token issued before it, even when "sign out everywhere" runs
  // during it. Found broken: both wrote back the generation they had read plus one, so the
  // change (reading 0 before its slow hash) wrote 1 over the sign-out's 1, and a token signed in
  // with the OLD password between the two (generation 1) kept working after the change.
  it('a password change racing "sign out everywhere" still ends the tokens issued between them', async () => {
    for (const by of ['self', 'admin'] as const) {
      const user = await createUser(base, admin, ['READ']);
      const change =
        by === 'self'
          ? post(base, '/users/password', {
              token: user.token,
              json: { old: user.password, new: 'the new password' },
            })
          : patch(base, `/users/${user.username}`, {
              token: admin,
              json: { password: 'the new password' },
            });
      await new Promise((r) => setTimeout(r, 20)); // the change is hashing its new password
      expectStatus(await del(base, `/users/${user.username}/tokens`, { token: admin }), 200);
      const between = post(base, '/users/login', {
        json: { username: user.username, password: user.password },
      });
      const [changed, signedIn] = await Promise.all([change, between]);
      expectStatus(changed, 200);
      if (signedIn.status === 200) {
        const res = await get(base, '/whoami', { token: signedIn.body.auth_token });
        expectFail(res, 401);
      } else expectFail(signedIn, 401);
      if (by === 'self')
        expect(await whoami(changed.body.auth_token)).toMatchObject({ username: user.username });
      await login(base, user.username, 'the new password');
    }
  });

  // A token ended by "sign out everywhere" cannot be renewed by an extend already on its way.
  // Found broken on PostgreSQL and two servers: extend checked the token, then read the user
  // again and issued a token of the user's NEW generation, so a thief renewing a stolen token in
  // a loop kept a working token after the owner signed out everywhere (6-9 of 10 rounds).
  it('an extend racing "sign out everywhere" never hands out a token that outlives it', async () => {
    for (let round = 0; round < 10; round++) {
      const user = await createUser(base, admin, ['READ']);
      const issued: string[] = [];
      let stop = false;
      const renew = async () => {
        while (!stop) {
          const res = await post(base, '/users/extend', { token: user.token });
          if (res.status !== 200) return expectFail(res, 401);
          issued.push(res.body.auth_token);
        }
      };
      const renewing = Array.from({ length: 6 }, renew);
      await new Promise((r) => setTimeout(r, 30));
      expectStatus(await del(base, `/users/${user.username}/tokens`, { token: admin }), 200);
      await new Promise((r) => setTimeout(r, 30));
      stop = true;
      await Promise.all(renewing);
      for (const token of issued) expectFail(await get(base, '/whoami', { token }), 401);
    }
  });

  it('tokens carry the user id and generation; a token forged for a new generation is refused', async () => {
    const user = await createUser(base, admin, ['READ']);
    const claims = jwt.decode(user.token) as { uid: string; gen: number; sub: string };
    expect(claims).toMatchObject({ sub: user.username, gen: 0 });
    expect(typeof claims.uid).toBe('string');
  });
});

describe('renames', () => {
  it('tokens and shares follow the user, not the name', async () => {
    const user = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ']);
    const share = await createShare(base, user.token, 'kept.txt');
    const renamed = unique('renamed');
    expectStatus(
      await patch(base, `/users/${user.username}`, { token: admin, json: { username: renamed } }),
      200,
    );
    expect(await whoami(user.token)).toMatchObject({ username: renamed });
    expect((await getShare(base, user.token, share)).owner_name).toBe(renamed);
    expectStatus(
      await patch(base, `/files/${share}`, {
        token: user.token,
        json: { file_name: 'still mine' },
      }),
      200,
    );
    // A new user with the old name gets nothing of it.
    const newcomer = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ'], user.username);
    expectFail(
      await patch(base, `/files/${share}`, { token: newcomer.token, json: { file_name: 'no' } }),
      403,
    );
  });

  it('a rename racing a create of the same name never makes two users of one name (50 races)', async () => {
    const winners = { rename: 0, create: 0 };
    for (let i = 0; i < 50; i++) {
      const target = `race-${randomUUID().slice(0, 8)}`;
      const reader = await createUser(base, admin, ['READ']);
      // Both hash a password between checking the name and writing it (the window in which
      // 0.1 made two users of one name); each one starts first in turn, the other a little later.
      const later = (ms: number) => new Promise((r) => setTimeout(r, ms));
      const renameFirst = i % 2 === 0;
      const [renamed, created] = await Promise.all([
        later(renameFirst ? 0 : Math.random() * 30).then(() =>
          patch(base, `/users/${reader.username}`, {
            token: admin,
            json: { username: target, password: reader.password },
          }),
        ),
        later(renameFirst ? Math.random() * 30 : 0).then(() =>
          post(base, '/users', {
            token: admin,
            json: { username: target, password: 'pw-admin-ish', permissions: ['ADMIN', 'READ'] },
          }),
        ),
      ]);
      // Exactly one of the two got the name; the other was refused with 409.
      if (renamed.status === 200) {
        expect(created.status).toBe(409);
        winners.rename++;
      } else {
        expect([renamed.status, created.status]).toEqual([409, 201]);
        winners.create++;
      }
      // A password set by PATCH ends the old tokens: sign in again, by whatever name it has.
      const name = renamed.status === 200 ? target : reader.username;
      const me = await whoami(await login(base, name, reader.password));
      expect(me).toEqual({ username: name, permissions: ['READ'] });
    }
    expect(winners.rename, 'the rename won some races').toBeGreaterThan(0);
    expect(winners.create, 'the create won some races').toBeGreaterThan(0);
    const users = await get(base, '/users?per_page=1000', { token: admin });
    const names = users.body.data.map((u: { username: string }) => u.username);
    expect(new Set(names).size).toBe(names.length);
  }, 180_000); // 200 password hashes: 60 s was once too short beside 8 other files
});

it('after a restart, every token still speaks for the same user with the same permissions', async () => {
  const own = await startServer();
  const a = await login(own.url, ADMIN.username, ADMIN.password);
  const readers = [];
  for (let i = 0; i < 5; i++) readers.push(await createUser(own.url, a, ['READ']));
  // Rename them into each other's former names, in a cycle through a free name.
  const names = readers.map((r) => r.username);
  const temp = unique('tmp');
  expectStatus(
    await patch(own.url, `/users/${names[0]}`, { token: a, json: { username: temp } }),
    200,
  );
  for (let i = 1; i < names.length; i++)
    expectStatus(
      await patch(own.url, `/users/${names[i]}`, { token: a, json: { username: names[i - 1] } }),
      200,
    );
  await own.server.close();
  const again = await startServer({ dataDir: own.dataDir });
  try {
    const whoamiAt = async (t: string) => (await get(again.url, '/whoami', { token: t })).body;
    expect(await whoamiAt(readers[0]!.token)).toEqual({ username: temp, permissions: ['READ'] });
    for (let i = 1; i < readers.length; i++)
      expect(await whoamiAt(readers[i]!.token)).toEqual({
        username: names[i - 1],
        permissions: ['READ'],
      });
    expect((await whoamiAt(a)).permissions).toContain('ADMIN');
  } finally {
    await again.close();
  }
});
