// API.md "Users": login, extend, logout, password, and /users management.
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createUser,
  del,
  expectFail,
  expectStatus,
  filesContaining,
  get,
  patch,
  post,
  put,
  request,
  unique,
} from '../helpers/http.js';
import { ADMIN, login, metadataText, startServer, type TestServer } from '../helpers/server.js';

const ALL = ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'ADMIN', 'READ'];
const DATE = /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?$/;

let srv: TestServer;
let base: string;
let admin: string;

/** 200 while the token is valid, 401 once it is not. */
const whoProbe = (token: string, username: string) => get(base, `/users/${username}`, { token });

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
});

afterAll(async () => {
  await srv?.close();
});

describe('POST /users/login', () => {
  it('200 with status, message, username, auth_token', async () => {
    const res = await post(base, '/users/login', { json: ADMIN });
    expectStatus(res, 200);
    expect(res.body).toEqual({
      status: 'success',
      message: expect.any(String),
      username: ADMIN.username,
      auth_token: expect.any(String),
    });
    expect(res.body.auth_token.split('.')).toHaveLength(3);
  });

  it('unknown user and wrong password → 401 with the same message', async () => {
    const wrong = await post(base, '/users/login', {
      json: { username: ADMIN.username, password: 'wrong-password' },
    });
    const unknown = await post(base, '/users/login', {
      json: { username: 'no-such-user', password: 'wrong-password' },
    });
    expectFail(wrong, 401);
    expectFail(unknown, 401);
    expect(wrong.body.message).toBe(unknown.body.message);
  });

  it('a body that is not an object, or does not parse → 400', async () => {
    for (const body of ['[]', '"admin"', '42', 'null', '{"username":', 'username=admin']) {
      const res = await request(base, 'POST', '/users/login', {
        body,
        headers: { 'content-type': 'application/json' },
      });
      expectFail(res, 400);
    }
  });

  it('the first-start admin holds every permission', async () => {
    const res = await get(base, '/whoami', { token: admin });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({ username: ADMIN.username, permissions: ALL });
  });
});

describe('POST /users/extend', () => {
  it('returns a new token; the old one stays valid', async () => {
    const old = await login(base, ADMIN.username, ADMIN.password);
    const res = await post(base, '/users/extend', { token: old });
    expectStatus(res, 200);
    expect(res.body).toEqual({
      status: 'success',
      message: expect.any(String),
      username: ADMIN.username,
      auth_token: expect.any(String),
    });
    expect(res.body.auth_token).not.toBe(old);
    expectStatus(await whoProbe(old, ADMIN.username), 200);
    expectStatus(await whoProbe(res.body.auth_token, ADMIN.username), 200);
  });

  it('anonymous → 401, bad token → 401', async () => {
    expectFail(await post(base, '/users/extend'), 401);
    expectFail(await post(base, '/users/extend', { token: 'x.y.z' }), 401);
  });
});

describe('POST /users/logout', () => {
  it('revokes the token: 200, then the token is refused with 401', async () => {
    const user = await createUser(base, admin, ['READ']);
    const res = await post(base, '/users/logout', {
      token: user.token,
      json: { token: user.token },
    });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    expectFail(await whoProbe(user.token, user.username), 401);
    expectFail(await post(base, '/users/extend', { token: user.token }), 401);
  });

  it('can revoke another token of the same user; the calling token stays valid', async () => {
    const user = await createUser(base, admin, ['READ']);
    const second = await login(base, user.username, user.password);
    expectStatus(
      await post(base, '/users/logout', { token: user.token, json: { token: second } }),
      200,
    );
    expectFail(await whoProbe(second, user.username), 401);
    expectStatus(await whoProbe(user.token, user.username), 200);
  });

  it('missing token → 400', async () => {
    expectFail(await post(base, '/users/logout', { token: admin, json: {} }), 400);
  });

  it('invalid token → 400', async () => {
    expectFail(
      await post(base, '/users/logout', { token: admin, json: { token: 'not-a-jwt' } }),
      400,
    );
    expectFail(await post(base, '/users/logout', { token: admin, json: { token: 'a.b.c' } }), 400);
  });

  it('already revoked token → 400', async () => {
    const user = await createUser(base, admin, ['READ']);
    const spare = await login(base, user.username, user.password);
    expectStatus(
      await post(base, '/users/logout', { token: user.token, json: { token: spare } }),
      200,
    );
    expectFail(
      await post(base, '/users/logout', { token: user.token, json: { token: spare } }),
      400,
    );
  });

  it("another user's token → 403 unless the caller has ADMIN", async () => {
    const alice = await createUser(base, admin, ['READ']);
    const bob = await createUser(base, admin, ['READ']);
    expectFail(
      await post(base, '/users/logout', { token: alice.token, json: { token: bob.token } }),
      403,
    );
    expectStatus(await whoProbe(bob.token, bob.username), 200);
    expectStatus(
      await post(base, '/users/logout', { token: admin, json: { token: bob.token } }),
      200,
    );
    expectFail(await whoProbe(bob.token, bob.username), 401);
  });

  it('anonymous → 401', async () => {
    const token = await login(base, ADMIN.username, ADMIN.password);
    expectFail(await post(base, '/users/logout', { json: { token } }), 401);
    expectStatus(await whoProbe(token, ADMIN.username), 200);
  });

  it('a body that is not an object → 400', async () => {
    expectFail(await post(base, '/users/logout', { token: admin, json: ['x'] }), 400);
    expectFail(
      await request(base, 'POST', '/users/logout', {
        token: admin,
        body: '{',
        headers: { 'content-type': 'application/json' },
      }),
      400,
    );
  });
});

describe('POST /users/password', () => {
  it('changes the password: 200; the new one works, the old one no longer does', async () => {
    const user = await createUser(base, admin, ['READ']);
    const res = await post(base, '/users/password', {
      token: user.token,
      json: { old: user.password, new: 'brand-new-password-1' },
    });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    expectFail(
      await post(base, '/users/login', {
        json: { username: user.username, password: user.password },
      }),
      401,
    );
    await login(base, user.username, 'brand-new-password-1');
  });

  it('wrong old password → 403 and nothing changes', async () => {
    const user = await createUser(base, admin, ['READ']);
    expectFail(
      await post(base, '/users/password', {
        token: user.token,
        json: { old: 'wrong', new: 'whatever-123' },
      }),
      403,
    );
    await login(base, user.username, user.password);
  });

  it('either field missing → 400', async () => {
    const user = await createUser(base, admin, ['READ']);
    expectFail(
      await post(base, '/users/password', { token: user.token, json: { old: user.password } }),
      400,
    );
    expectFail(
      await post(base, '/users/password', { token: user.token, json: { new: 'x-123456' } }),
      400,
    );
    expectFail(await post(base, '/users/password', { token: user.token, json: {} }), 400);
    await login(base, user.username, user.password);
  });

  it('anonymous → 401', async () => {
    expectFail(await post(base, '/users/password', { json: { old: 'a', new: 'b' } }), 401);
  });
});

describe('GET /users/<name>', () => {
  it('the user itself: username, permissions (canonical order), register_date, never a password', async () => {
    const user = await createUser(base, admin, ['READ', 'CREATE', 'LIST']);
    const res = await get(base, `/users/${user.username}`, { token: user.token });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({
      username: user.username,
      permissions: ['CREATE', 'LIST', 'READ'],
      register_date: expect.stringMatching(DATE),
    });
    const keys = Object.keys(res.body).filter((k) => k !== 'status');
    expect(keys.sort()).toEqual(['permissions', 'quota', 'register_date', 'used', 'username']);
    expect(res.text).not.toContain(user.password);
  });

  it('an ADMIN may read anyone', async () => {
    const user = await createUser(base, admin, ['READ']);
    const res = await get(base, `/users/${user.username}`, { token: admin });
    expectStatus(res, 200);
    expect(res.body.username).toBe(user.username);
  });

  it('another user → 403; a name that does not exist → 403 (even for an ADMIN)', async () => {
    const alice = await createUser(base, admin, ['READ', 'LIST', 'CREATE']);
    const bob = await createUser(base, admin, ['READ']);
    expectFail(await get(base, `/users/${bob.username}`, { token: alice.token }), 403);
    expectFail(await get(base, `/users/${ADMIN.username}`, { token: alice.token }), 403);
    expectFail(await get(base, '/users/no-such-user', { token: alice.token }), 403);
    expectFail(await get(base, '/users/no-such-user', { token: admin }), 403);
  });
});

describe('POST /users', () => {
  it('201 with status and url; permissions are stored in canonical order', async () => {
    const username = unique('new');
    const res = await post(base, '/users', {
      token: admin,
      json: {
        username,
        password: 'pw-123456',
        permissions: ['READ', 'ADMIN', 'LIST', 'LOCK', 'DELETE', 'MODIFY', 'CREATE'],
      },
    });
    expectStatus(res, 201);
    expect(res.body).toEqual({ status: 'success', url: `/users/${username}` });
    const got = await get(base, `/users/${username}`, { token: admin });
    expect(got.body.permissions).toEqual(ALL);
    await login(base, username, 'pw-123456');
  });

  it('a user with no permissions can be created and signs in', async () => {
    const user = await createUser(base, admin, []);
    const res = await get(base, `/users/${user.username}`, { token: user.token });
    expect(res.body.permissions).toEqual([]);
  });

  it('a name that exists → 409, and the existing user is unchanged', async () => {
    const user = await createUser(base, admin, ['READ']);
    expectFail(
      await post(base, '/users', {
        token: admin,
        json: { username: user.username, password: 'other-pw-1', permissions: ['ADMIN'] },
      }),
      409,
    );
    await login(base, user.username, user.password);
    const got = await get(base, `/users/${user.username}`, { token: admin });
    expect(got.body.permissions).toEqual(['READ']);
  });

  // Found from outside: `admin`, `Admin` and `ADMIN` could all exist at once, three accounts a
  // reader of any list takes for one. A name that differs from another user's only in case is
  // now taken; a user may still change the case of their own name; sign-in stays exact.
  it('a name that differs from an existing one only in case → 409, on create and on rename', async () => {
    const user = await createUser(base, admin, ['READ'], unique('CaseName'));
    const other = await createUser(base, admin, ['READ']);
    for (const variant of [user.username.toLowerCase(), user.username.toUpperCase()]) {
      const made = await post(base, '/users', {
        token: admin,
        json: { username: variant, password: 'other-pw-1', permissions: ['ADMIN'] },
      });
      expectFail(made, 409);
      expectFail(
        await patch(base, `/users/${other.username}`, {
          token: admin,
          json: { username: variant },
        }),
        409,
      );
    }
    expect(
      (await get(base, `/users/${other.username}`, { token: admin }).then((r) => r.body)).username,
    ).toBe(other.username);
    // Signing in is exact: the other case is no account.
    expectFail(
      await post(base, '/users/login', {
        json: { username: user.username.toUpperCase(), password: user.password },
      }),
      401,
    );
    // The user's own name in another case is still theirs to take.
    const recased = user.username.toUpperCase();
    expectStatus(
      await patch(base, `/users/${user.username}`, { token: admin, json: { username: recased } }),
      200,
    );
    await login(base, recased, user.password);
  });

  it('a missing field → 400', async () => {
    const bodies = [
      { password: 'pw-123456', permissions: [] },
      { username: unique('m'), permissions: [] },
      { username: unique('m'), password: 'pw-123456' },
      {},
    ];
    for (const json of bodies) expectFail(await post(base, '/users', { token: admin, json }), 400);
  });

  it('an unknown permission → 400 (names are upper-case)', async () => {
    for (const permissions of [['READ', 'FLY'], ['read'], 'READ', [1]]) {
      const username = unique('p');
      expectFail(
        await post(base, '/users', {
          token: admin,
          json: { username, password: 'pw-123456', permissions },
        }),
        400,
      );
      expectFail(await get(base, `/users/${username}`, { token: admin }), 403);
    }
  });

  it('unknown or read-only fields → 400', async () => {
    for (const extra of [{ bogus: 1 }, { register_date: '2020-01-01T00:00:00.000000' }]) {
      expectFail(
        await post(base, '/users', {
          token: admin,
          json: { username: unique('x'), password: 'pw-123456', permissions: [], ...extra },
        }),
        400,
      );
    }
  });

  it('a body that is not an object or does not parse → 400, never 500', async () => {
    for (const body of ['[]', '"x"', 'null', '{"username": "a",', '']) {
      expectFail(
        await request(base, 'POST', '/users', {
          token: admin,
          body,
          headers: { 'content-type': 'application/json' },
        }),
        400,
      );
    }
  });

  it('non-admin → 403', async () => {
    const user = await createUser(
      base,
      admin,
      ALL.filter((p) => p !== 'ADMIN'),
    );
    expectFail(
      await post(base, '/users', {
        token: user.token,
        json: { username: unique('z'), password: 'pw-123456', permissions: [] },
      }),
      403,
    );
  });
});

describe('PATCH /users/<name>', () => {
  it('changes permissions only', async () => {
    const user = await createUser(base, admin, ['READ']);
    const res = await patch(base, `/users/${user.username}`, {
      token: admin,
      json: { permissions: ['LIST', 'CREATE'] },
    });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    const got = await get(base, `/users/${user.username}`, { token: user.token });
    expect(got.body.permissions).toEqual(['CREATE', 'LIST']);
    await login(base, user.username, user.password);
  });

  it('changes the password only', async () => {
    const user = await createUser(base, admin, ['READ']);
    expectStatus(
      await patch(base, `/users/${user.username}`, {
        token: admin,
        json: { password: 'patched-pw-1' },
      }),
      200,
    );
    await login(base, user.username, 'patched-pw-1');
    const got = await get(base, `/users/${user.username}`, { token: admin });
    expect(got.body.permissions).toEqual(['READ']);
  });

  it('renames the user', async () => {
    const user = await createUser(base, admin, ['READ']);
    const renamed = unique('renamed');
    expectStatus(
      await patch(base, `/users/${user.username}`, { token: admin, json: { username: renamed } }),
      200,
    );
    await login(base, renamed, user.password);
    expectFail(await get(base, `/users/${user.username}`, { token: admin }), 403);
    const got = await get(base, `/users/${renamed}`, { token: admin });
    expect(got.body).toMatchObject({ username: renamed, permissions: ['READ'] });
  });

  it('unknown field, read-only field, unknown permission, non-object → 400', async () => {
    const user = await createUser(base, admin, ['READ']);
    for (const json of [
      { bogus: 1 },
      { register_date: '2020-01-01T00:00:00' },
      { permissions: ['NOPE'] },
      [1],
    ]) {
      expectFail(await patch(base, `/users/${user.username}`, { token: admin, json }), 400);
    }
    const got = await get(base, `/users/${user.username}`, { token: admin });
    expect(got.body.permissions).toEqual(['READ']);
  });

  it('unknown name → 404; non-admin → 403 (even on itself)', async () => {
    expectFail(
      await patch(base, '/users/no-such-user', { token: admin, json: { permissions: [] } }),
      404,
    );
    const user = await createUser(base, admin, ['READ']);
    expectFail(
      await patch(base, `/users/${user.username}`, {
        token: user.token,
        json: { permissions: ALL },
      }),
      403,
    );
  });
});

describe('PUT /users/<name>', () => {
  it('replaces username, password and permissions', async () => {
    const user = await createUser(base, admin, ['READ']);
    const name = unique('put');
    const res = await put(base, `/users/${user.username}`, {
      token: admin,
      json: { username: name, password: 'put-pw-123', permissions: ['LOCK', 'LIST'] },
    });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    const token = await login(base, name, 'put-pw-123');
    const got = await get(base, `/users/${name}`, { token });
    expect(got.body).toMatchObject({ username: name, permissions: ['LOCK', 'LIST'] });
  });

  it('any of the three missing → 400, and nothing changes', async () => {
    const user = await createUser(base, admin, ['READ']);
    for (const json of [
      { password: 'x-123456', permissions: [] },
      { username: user.username, permissions: [] },
      { username: user.username, password: 'x-123456' },
    ]) {
      expectFail(await put(base, `/users/${user.username}`, { token: admin, json }), 400);
    }
    await login(base, user.username, user.password);
  });

  it('unknown name → 404; non-admin → 403', async () => {
    expectFail(
      await put(base, '/users/no-such-user', {
        token: admin,
        json: { username: 'no-such-user', password: 'x-123456', permissions: [] },
      }),
      404,
    );
    const user = await createUser(base, admin, ['READ']);
    expectFail(
      await put(base, `/users/${user.username}`, {
        token: user.token,
        json: { username: user.username, password: 'x-123456', permissions: ALL },
      }),
      403,
    );
  });
});

describe('DELETE /users/<name>', () => {
  it('200; the user is gone, its login fails and a second delete → 404', async () => {
    const user = await createUser(base, admin, ['READ']);
    const res = await del(base, `/users/${user.username}`, { token: admin });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    expectFail(await get(base, `/users/${user.username}`, { token: admin }), 403);
    expectFail(
      await post(base, '/users/login', {
        json: { username: user.username, password: user.password },
      }),
      401,
    );
    expectFail(await del(base, `/users/${user.username}`, { token: admin }), 404);
    const list = await get(base, '/users?per_page=1000', { token: admin });
    expect(list.body.data.map((u: { username: string }) => u.username)).not.toContain(
      user.username,
    );
  });

  it('non-admin → 403, and the user survives', async () => {
    const victim = await createUser(base, admin, ['READ']);
    const user = await createUser(
      base,
      admin,
      ALL.filter((p) => p !== 'ADMIN'),
    );
    expectFail(await del(base, `/users/${victim.username}`, { token: user.token }), 403);
    await login(base, victim.username, victim.password);
  });
});

describe('GET /users', () => {
  it('lists users (paginated) without passwords', async () => {
    const user = await createUser(base, admin, ['READ']);
    const res = await get(base, '/users?per_page=1000', { token: admin });
    expectStatus(res, 200);
    expect(res.body).toMatchObject({ data: expect.any(Array), prev: null, next: null, pages: 1 });
    const names = res.body.data.map((u: { username: string }) => u.username);
    expect(names[0]).toBe(ADMIN.username);
    expect(names).toContain(user.username);
    for (const u of res.body.data) {
      expect(Object.keys(u).sort()).toEqual([
        'permissions',
        'quota',
        'register_date',
        'used',
        'username',
      ]);
    }
    expect(res.text).not.toContain(user.password);
    expect(res.text).not.toContain(ADMIN.password);
  });
});

describe('password storage', () => {
  it('the same password is stored differently for two users (salted)', async () => {
    const password = `same-${randomUUID()}`;
    const a = await createUser(base, admin, ['READ'], unique('salt-a'), password);
    const b = await createUser(base, admin, ['READ'], unique('salt-b'), password);
    // Every user record as the metadata holds it: an object of its own in db.json (snapshot),
    // in a db.journal entry (changes since), or a row of PostgreSQL's users table.
    const text = await metadataText(srv);
    const records: Array<Record<string, unknown>> = [];
    for (const name of [a.username, b.username]) {
      const quoted = JSON.stringify(name).replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
      for (const m of text.matchAll(new RegExp(`\\{[^{}]*"username":${quoted}[^{}]*\\}`, 'g')))
        records.push(JSON.parse(m[0]) as Record<string, unknown>);
    }
    expect(records).toHaveLength(2);
    const stored = (r: Record<string, unknown>) =>
      JSON.stringify(
        Object.entries(r).filter(
          ([k]) =>
            ![
              'id',
              'seq',
              'username',
              'permissions',
              'register_date',
              'token_gen',
              'quota',
              'legacy_tokens',
            ].includes(k),
        ),
      );
    const [ra, rb] = records as [Record<string, unknown>, Record<string, unknown>];
    expect(stored(ra)).not.toBe('[]');
    expect(stored(ra)).not.toBe(stored(rb));
    expect(stored(ra)).not.toContain(password);
  });

  it('no file in the data directory holds a password in plain text', async () => {
    const password = `plain-${randomUUID()}`;
    const user = await createUser(base, admin, ['READ'], unique('store'), password);
    const changed = `changed-${randomUUID()}`;
    expectStatus(
      await post(base, '/users/password', {
        token: user.token,
        json: { old: password, new: changed },
      }),
      200,
    );
    const patched = `patched-${randomUUID()}`;
    expectStatus(
      await patch(base, `/users/${user.username}`, { token: admin, json: { password: patched } }),
      200,
    );
    // The metadata (db.json and db.journal, or PostgreSQL's tables) explicitly, then every file.
    const db = await metadataText(srv);
    expect(db).toContain(user.username);
    for (const secret of [password, changed, patched, ADMIN.password]) {
      expect(db).not.toContain(secret);
      expect(await filesContaining(srv.dataDir, secret)).toEqual([]);
    }
  });
});

// A server whose last administrator lost ADMIN could never manage users or settings again: no
// request could give it back, and a restart only creates an administrator on an empty server.
describe('the last administrator', () => {
  let own: TestServer;
  let root: string;
  beforeAll(async () => {
    own = await startServer();
    root = await login(own.url, ADMIN.username, ADMIN.password);
  });
  afterAll(async () => {
    await own?.close();
  });

  const adminsOf = async (token = root) => {
    const res = await get(own.url, '/users?per_page=1000', { token });
    expectStatus(res, 200);
    return (res.body.data as { username: string; permissions: string[] }[])
      .filter((u) => u.permissions.includes('ADMIN'))
      .map((u) => u.username)
      .sort();
  };

  it('keeps ADMIN and cannot be deleted: 409 naming the reason, and nothing changes', async () => {
    const before = await get(own.url, `/users/${ADMIN.username}`, { token: root });
    const attempts = [
      () => patch(own.url, `/users/${ADMIN.username}`, { token: root, json: { permissions: [] } }),
      () =>
        patch(own.url, `/users/${ADMIN.username}`, {
          token: root,
          json: { permissions: ['READ', 'LIST'], password: 'a-new-password-1' },
        }),
      () =>
        put(own.url, `/users/${ADMIN.username}`, {
          token: root,
          json: { username: 'renamed-root', password: 'a-new-password-2', permissions: ['READ'] },
        }),
      () => del(own.url, `/users/${ADMIN.username}`, { token: root }),
    ];
    for (const attempt of attempts) {
      const res = await attempt();
      expectFail(res, 409);
      expect(res.body.message).toMatch(/without an administrator/);
    }
    // The same user, name, password and token as before.
    expect(await get(own.url, `/users/${ADMIN.username}`, { token: root })).toMatchObject({
      status: 200,
      body: before.body,
    });
    await login(own.url, ADMIN.username, ADMIN.password);
    expect(await adminsOf()).toEqual([ADMIN.username]);
  });

  it('two administrators removing each other at once: one goes, one stays (10 rounds)', async () => {
    let sole = { username: ADMIN.username, token: root };
    for (let round = 0; round < 10; round++) {
      const a = await createUser(own.url, sole.token, ['ADMIN', 'READ']);
      const b = await createUser(own.url, sole.token, ['ADMIN']);
      // Alone, taking ADMIN from one of two administrators is allowed.
      const demote = (who: string, by: string) =>
        patch(own.url, `/users/${who}`, { token: by, json: { permissions: ['READ'] } });
      expectStatus(await demote(sole.username, a.token), 200);
      // Now a and b are the only two. Each takes the other's ADMIN (or deletes the other).
      const [byA, byB] = await Promise.all(
        round % 2 === 0
          ? [demote(b.username, a.token), demote(a.username, b.token)]
          : [
              del(own.url, `/users/${b.username}`, { token: a.token }),
              del(own.url, `/users/${a.username}`, { token: b.token }),
            ],
      );
      // The loser was refused by the rule (409) or, if the winner came first, no longer had
      // ADMIN (403) or no longer existed (401). Never both 200: that left nobody.
      const won = [byA, byB].filter((r) => r.status === 200);
      expect(won, `round ${round}: ${byA.status} ${byB.status}`).toHaveLength(1);
      const lost = byA.status === 200 ? byB : byA;
      expect([401, 403, 409]).toContain(lost.status);
      sole = byA.status === 200 ? a : b;
      expect(await adminsOf(sole.token)).toEqual([sole.username]);
    }
  });
});
