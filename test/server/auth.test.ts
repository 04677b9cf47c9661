// API.md "Authentication and authorisation": the five rules, in order, and what happens when two
// of them apply to the same request.
import { randomUUID } from 'node:crypto';
import jwt from 'jsonwebtoken';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createShare,
  createShareWithContent,
  createUser,
  del,
  expectFail,
  expectStatus,
  get,
  patch,
  post,
  put,
  request,
  sendChunk,
  setDefaultPermissions,
  upload,
} from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const SECRET = `test-secret-${randomUUID()}`;
const LIFETIME = 3600;

let srv: TestServer;
let base: string;
let admin: string;

function b64url(value: unknown): string {
  return Buffer.from(JSON.stringify(value)).toString('base64url');
}

function sign(payload: object, options: jwt.SignOptions = {}, secret = SECRET): string {
  return jwt.sign({ jti: randomUUID(), ...payload }, secret, {
    algorithm: 'HS256',
    ...options,
  });
}

/** A probe that needs a valid token and never allows anonymous use. */
const probe = (token: string, username = ADMIN.username) =>
  get(base, `/users/${username}`, { token });

/** The identity claims of the admin's real tokens (user id and token generation), to forge with. */
let adminClaims: { sub: string; uid: string; gen: number };

beforeAll(async () => {
  srv = await startServer({ secret: SECRET, tokenLifetimeSeconds: LIFETIME });
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
  const { sub, uid, gen } = jwt.decode(admin) as { sub: string; uid: string; gen: number };
  adminClaims = { sub, uid, gen };
});

afterAll(async () => {
  await srv?.close();
});

describe('tokens the server issues', () => {
  it('are HS256 JWTs with sub, iat, exp (configured lifetime) and a unique jti', async () => {
    const a = await login(base, ADMIN.username, ADMIN.password);
    const b = await login(base, ADMIN.username, ADMIN.password);
    const decodedA = jwt.decode(a, { complete: true })!;
    const decodedB = jwt.decode(b, { complete: true })!;
    expect(decodedA.header.alg).toBe('HS256');
    const pa = decodedA.payload as jwt.JwtPayload;
    const pb = decodedB.payload as jwt.JwtPayload;
    expect(pa.sub).toBe(ADMIN.username);
    expect(typeof pa.iat).toBe('number');
    expect(pa.exp! - pa.iat!).toBe(LIFETIME);
    expect(typeof pa.jti).toBe('string');
    expect(pa.jti).not.toBe(pb.jti);
    // Signed with the configured secret (the option FSHARE_SECRET maps to).
    expect(() => jwt.verify(a, SECRET, { algorithms: ['HS256'] })).not.toThrow();
  });

  it('default to a lifetime of 7 days', async () => {
    const other = await startServer();
    try {
      const token = await login(other.url, ADMIN.username, ADMIN.password);
      const p = jwt.decode(token) as jwt.JwtPayload;
      expect(p.exp! - p.iat!).toBe(7 * 24 * 3600);
    } finally {
      await other.close();
    }
  });

  it('a token forged with the right secret and HS256 is accepted (control for the cases below)', async () => {
    const res = await probe(sign({ ...adminClaims }, { expiresIn: 600 }));
    expectStatus(res, 200);
    expect(res.body.username).toBe(ADMIN.username);
  });
});

describe('rule 1: malformed Authorization header → 401', () => {
  const headers = [
    'Basic YWRtaW46YWRtaW4tcGFzc3dvcmQtMTIz',
    'Token abc',
    'Bearer',
    'Bearer ',
    'abc.def.ghi',
    'Bearerabc.def.ghi',
  ];
  for (const value of headers) {
    it(`"${value}" on an endpoint that needs auth`, async () => {
      expectFail(
        await get(base, `/users/${ADMIN.username}`, { headers: { authorization: value } }),
        401,
      );
    });
  }

  it('even where anonymous use would be allowed (no fallback to anonymous)', async () => {
    await setDefaultPermissions(base, admin, ['LIST', 'READ', 'CREATE']);
    try {
      expectStatus(await get(base, '/files'), 200);
      expectFail(
        await get(base, '/files', { headers: { authorization: 'Basic Zm9vOmJhcg==' } }),
        401,
      );
      expectFail(
        await post(base, '/files', { json: {}, headers: { authorization: 'Token x' } }),
        401,
      );
    } finally {
      await setDefaultPermissions(base, admin, []);
    }
  });

  it('the scheme is case-insensitive', async () => {
    for (const scheme of ['bearer', 'BEARER', 'bEaReR']) {
      const res = await get(base, `/users/${ADMIN.username}`, {
        headers: { authorization: `${scheme} ${admin}` },
      });
      expectStatus(res, 200);
    }
  });
});

describe('rule 2: bad tokens → 401', () => {
  const cases: Array<[string, () => string]> = [
    ['garbage', () => 'not-a-jwt'],
    ['three garbage segments', () => 'aaa.bbb.ccc'],
    [
      'alg none',
      () =>
        `${b64url({ alg: 'none', typ: 'JWT' })}.${b64url({
          sub: ADMIN.username,
          iat: Math.floor(Date.now() / 1000),
          exp: Math.floor(Date.now() / 1000) + 600,
          jti: randomUUID(),
        })}.`,
    ],
    [
      'HS512 with the right secret',
      () => sign({ ...adminClaims }, { algorithm: 'HS512', expiresIn: 600 }),
    ],
    [
      'HS384 with the right secret',
      () => sign({ ...adminClaims }, { algorithm: 'HS384', expiresIn: 600 }),
    ],
    [
      'HS256 with another secret',
      () => sign({ ...adminClaims }, { expiresIn: 600 }, 'another-secret'),
    ],
    [
      'expired',
      () =>
        sign({
          ...adminClaims,
          iat: Math.floor(Date.now() / 1000) - 7200,
          exp: Math.floor(Date.now() / 1000) - 3600,
        }),
    ],
    [
      'for a user that does not exist',
      () => sign({ sub: 'nobody-here', uid: randomUUID(), gen: 0 }, { expiresIn: 600 }),
    ],
    [
      'payload changed after signing',
      () => {
        const [h, , s] = admin.split('.');
        const p = jwt.decode(admin) as jwt.JwtPayload;
        return `${h}.${b64url({ ...p, sub: 'someone-else' })}.${s}`;
      },
    ],
    [
      'signature stripped',
      () => {
        const [h, p] = admin.split('.');
        return `${h}.${p}.`;
      },
    ],
  ];
  for (const [name, make] of cases) {
    it(name, async () => {
      expectFail(await probe(make()), 401);
    });
  }

  it('a bad token is 401 even where anonymous use is allowed', async () => {
    await setDefaultPermissions(base, admin, ['LIST']);
    try {
      expectStatus(await get(base, '/files'), 200);
      expectFail(await get(base, '/files', { token: 'garbage' }), 401);
      expectFail(
        await get(base, '/files', {
          token: sign({ ...adminClaims }, { expiresIn: 600 }, 'x'),
        }),
        401,
      );
    } finally {
      await setDefaultPermissions(base, admin, []);
    }
  });

  it('a revoked token → 401', async () => {
    const token = await login(base, ADMIN.username, ADMIN.password);
    expectStatus(await probe(token), 200);
    expectStatus(await post(base, '/users/logout', { token, json: { token } }), 200);
    expectFail(await probe(token), 401);
    expectFail(await get(base, '/files', { token }), 401);
  });

  it('logout of an expired or badly signed token → 400', async () => {
    const expired = sign({
      ...adminClaims,
      iat: Math.floor(Date.now() / 1000) - 7200,
      exp: Math.floor(Date.now() / 1000) - 3600,
    });
    expectFail(await post(base, '/users/logout', { token: admin, json: { token: expired } }), 400);
    const foreign = sign({ ...adminClaims }, { expiresIn: 600 }, 'another-secret');
    expectFail(await post(base, '/users/logout', { token: admin, json: { token: foreign } }), 400);
    const hs512 = sign({ ...adminClaims }, { algorithm: 'HS512', expiresIn: 600 });
    expectFail(await post(base, '/users/logout', { token: admin, json: { token: hs512 } }), 400);
    expectStatus(await probe(admin), 200);
  });

  it("a deleted user's token → 401", async () => {
    const user = await createUser(base, admin, ['READ', 'LIST']);
    expectStatus(await get(base, '/files', { token: user.token }), 200);
    expectStatus(await del(base, `/users/${user.username}`, { token: admin }), 200);
    expectFail(await get(base, '/files', { token: user.token }), 401);
    expectFail(await probe(user.token, user.username), 401);
  });
});

describe('rule 3: anonymous', () => {
  it('without default_permissions → 401 on every permission-guarded endpoint', async () => {
    const id = await createShareWithContent(base, admin, 'a.txt', Buffer.from('abc'));
    const uid = randomUUID();
    const chunk = { dzuuid: uid, index: 0, total: 1, data: Buffer.from('x') };
    expectFail(await get(base, '/files'), 401);
    expectFail(await post(base, '/files', { json: {} }), 401);
    expectFail(await get(base, `/files/${id}`), 401);
    expectFail(await patch(base, `/files/${id}`, { json: { file_name: 'b' } }), 401);
    expectFail(
      await put(base, `/files/${id}`, { json: { file_name: 'b', owner_name: null } }),
      401,
    );
    expectFail(await del(base, `/files/${id}`), 401);
    expectFail(await post(base, `/files/${id}/lock`), 401);
    expectFail(await post(base, `/files/${id}/unlock`), 401);
    expectFail(await get(base, `/files/${id}/content`), 401);
    expectFail(await sendChunk(base, undefined, id, chunk, 'PUT'), 401);
    const fresh = await createShare(base, admin);
    expectFail(await sendChunk(base, undefined, fresh, chunk), 401);
    expectFail(await get(base, '/users'), 401);
    expectFail(
      await post(base, '/users', { json: { username: 'x', password: 'y', permissions: [] } }),
      401,
    );
    expectFail(await get(base, '/admin/settings'), 401);
    expectFail(await patch(base, '/admin/settings', { json: { default_permissions: [] } }), 401);
    expectFail(await put(base, '/admin/settings', { json: { default_permissions: [] } }), 401);
  });

  it('endpoints that never allow anonymous use → 401 even with every permission granted', async () => {
    await setDefaultPermissions(base, admin, [
      'CREATE',
      'MODIFY',
      'DELETE',
      'LOCK',
      'LIST',
      'ADMIN',
      'READ',
    ]);
    try {
      expectFail(await post(base, '/users/logout', { json: { token: admin } }), 401);
      expectFail(await post(base, '/users/extend'), 401);
      expectFail(await post(base, '/users/password', { json: { old: 'a', new: 'b' } }), 401);
      expectFail(await get(base, `/users/${ADMIN.username}`), 401);
      expectFail(await patch(base, `/users/${ADMIN.username}`, { json: { permissions: [] } }), 401);
      expectFail(
        await put(base, `/users/${ADMIN.username}`, {
          json: { username: ADMIN.username, password: 'x', permissions: [] },
        }),
        401,
      );
      expectFail(await del(base, `/users/${ADMIN.username}`), 401);
      // …while the others follow rule 3 and let anonymous in.
      expectStatus(await get(base, '/users'), 200);
      expectStatus(await get(base, '/admin/settings'), 200);
      expectStatus(await get(base, '/files'), 200);
    } finally {
      await setDefaultPermissions(base, admin, []);
    }
    // The admin is untouched by the attempts above.
    expectStatus(await probe(admin), 200);
  });

  it('GET /users/login, /users/extend, /users/logout are user look-ups: not authorized', async () => {
    for (const name of ['login', 'extend', 'logout', 'password']) {
      expectFail(await get(base, `/users/${name}`), 401);
    }
    const user = await createUser(base, admin, ['READ']);
    for (const name of ['login', 'extend', 'logout']) {
      expectFail(await get(base, `/users/${name}`, { token: user.token }), 403);
    }
  });
});

describe('rule 4: authenticated without the permission → 403', () => {
  it('each file endpoint checks its own permission', async () => {
    const all = ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'ADMIN', 'READ'];
    const owner = await createUser(base, admin, all);
    const id = await createShareWithContent(base, owner.token, 'a.txt', Buffer.from('abc'));
    const without = async (perm: string) => {
      const u = await createUser(
        base,
        admin,
        all.filter((p) => p !== perm),
      );
      return u.token;
    };
    const chunk = { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('x') };

    const noList = await without('LIST');
    expectFail(await get(base, '/files', { token: noList }), 403);

    const noCreate = await without('CREATE');
    expectFail(await post(base, '/files', { token: noCreate, json: {} }), 403);

    const noRead = await without('READ');
    expectFail(await get(base, `/files/${id}`, { token: noRead }), 403);
    expectFail(await get(base, `/files/${id}/content`, { token: noRead }), 403);

    const noDelete = await without('DELETE');
    expectFail(await del(base, `/files/${id}`, { token: noDelete }), 403);

    const noLock = await without('LOCK');
    expectFail(await post(base, `/files/${id}/lock`, { token: noLock }), 403);
    expectFail(await post(base, `/files/${id}/unlock`, { token: noLock }), 403);

    const noAdmin = await without('ADMIN');
    expectFail(await get(base, '/users', { token: noAdmin }), 403);
    expectFail(await get(base, '/admin/settings', { token: noAdmin }), 403);

    // The owner's MODIFY / CREATE are what count for the owner's own share.
    const ownerNoModify = await createUser(base, admin, ['CREATE', 'READ']);
    const own = await createShareWithContent(base, ownerNoModify.token, 'o.txt', Buffer.from('o'));
    expectFail(
      await patch(base, `/files/${own}`, { token: ownerNoModify.token, json: { file_name: 'p' } }),
      403,
    );
    expectFail(
      await put(base, `/files/${own}`, {
        token: ownerNoModify.token,
        json: { file_name: 'p', owner_name: null },
      }),
      403,
    );
    expectFail(await sendChunk(base, ownerNoModify.token, own, chunk, 'PUT'), 403);

    const ownerNoCreate = await createUser(base, admin, ['MODIFY', 'READ']);
    const share = await createShare(base, admin);
    // hand the share to the user, so only the missing CREATE can refuse the upload
    expectStatus(
      await patch(base, `/files/${share}`, {
        token: admin,
        json: { owner_name: ownerNoCreate.username },
      }),
      200,
    );
    expectFail(await sendChunk(base, ownerNoCreate.token, share, chunk), 403);

    // Nothing was changed by the refused requests.
    const after = await get(base, `/files/${id}`, { token: admin });
    expect(after.body).toMatchObject({ file_name: 'a.txt', locked: false, initialized: true });
  });

  it('ADMIN does not imply the others', async () => {
    const onlyAdmin = await createUser(base, admin, ['ADMIN']);
    expectFail(await get(base, '/files', { token: onlyAdmin.token }), 403);
    expectFail(await post(base, '/files', { token: onlyAdmin.token, json: {} }), 403);
    expectStatus(await get(base, '/users', { token: onlyAdmin.token }), 200);
  });

  it('anonymous with some default permissions but not the needed one → 401', async () => {
    await setDefaultPermissions(base, admin, ['READ']);
    try {
      expectFail(await get(base, '/files'), 401);
      expectFail(await post(base, '/files', { json: {} }), 401);
    } finally {
      await setDefaultPermissions(base, admin, []);
    }
  });
});

describe('rule 5 and collisions between rules', () => {
  it('no permission AND unknown share → 403, not 404', async () => {
    const u = await createUser(base, admin, ['LIST']);
    const ghost = randomUUID();
    expectFail(await get(base, `/files/${ghost}`, { token: u.token }), 403);
    expectFail(await get(base, `/files/${ghost}/content`, { token: u.token }), 403);
    expectFail(await del(base, `/files/${ghost}`, { token: u.token }), 403);
    expectFail(await post(base, `/files/${ghost}/lock`, { token: u.token }), 403);
    expectFail(
      await patch(base, `/files/${ghost}`, { token: u.token, json: { file_name: 'x' } }),
      403,
    );
  });

  it('anonymous without permission AND unknown share → 401, not 404', async () => {
    expectFail(await get(base, `/files/${randomUUID()}`), 401);
    expectFail(await get(base, '/files/not-a-uuid'), 401);
  });

  it('bad token AND unknown route-parameter → 401', async () => {
    expectFail(await get(base, `/files/${randomUUID()}`, { token: 'garbage' }), 401);
  });

  it('unknown share + bad body → 404, not 400', async () => {
    const ghost = randomUUID();
    expectFail(await patch(base, `/files/${ghost}`, { token: admin, json: { bogus: 1 } }), 404);
    expectFail(await put(base, `/files/${ghost}`, { token: admin, json: { nope: true } }), 404);
    expectFail(
      await request(base, 'PATCH', `/files/${ghost}`, {
        token: admin,
        body: '{not json',
        headers: { 'content-type': 'application/json' },
      }),
      404,
    );
    expectFail(await sendParts0(ghost, 'POST'), 404);
    expectFail(await sendParts0(ghost, 'PUT'), 404);
  });

  it('an unparsable body does not jump the queue: 401 and 403 come first', async () => {
    const broken = { body: '{"file_name": ', headers: { 'content-type': 'application/json' } };
    expectFail(await request(base, 'POST', '/files', broken), 401);
    expectFail(await request(base, 'POST', '/files', { ...broken, token: 'garbage' }), 401);
    const noCreate = await createUser(base, admin, ['READ']);
    expectFail(await request(base, 'POST', '/files', { ...broken, token: noCreate.token }), 403);
    expectFail(await request(base, 'POST', '/users', { ...broken, token: noCreate.token }), 403);
    expectFail(await request(base, 'PATCH', '/admin/settings', broken), 401);
  });

  it('unknown user + bad body → 404 for ADMIN; non-admin → 403 before 404', async () => {
    expectFail(await patch(base, '/users/no-such-user', { token: admin, json: { bogus: 1 } }), 404);
    expectFail(await put(base, '/users/no-such-user', { token: admin, json: {} }), 404);
    expectFail(await del(base, '/users/no-such-user', { token: admin }), 404);
    const u = await createUser(base, admin, ['READ']);
    expectFail(
      await patch(base, '/users/no-such-user', { token: u.token, json: { bogus: 1 } }),
      403,
    );
    expectFail(await del(base, '/users/no-such-user', { token: u.token }), 403);
  });

  it('not the owner AND locked → 403 (ownership before state)', async () => {
    const owner = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ', 'LOCK']);
    const other = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ']);
    const id = await createShareWithContent(base, owner.token, 'a.txt', Buffer.from('abc'));
    expectStatus(await post(base, `/files/${id}/lock`, { token: owner.token }), 200);
    expectFail(
      await patch(base, `/files/${id}`, { token: other.token, json: { file_name: 'x' } }),
      403,
    );
    expectFail(
      await put(base, `/files/${id}`, {
        token: other.token,
        json: { file_name: 'x', owner_name: null },
      }),
      403,
    );
    expectFail(
      await sendChunk(
        base,
        other.token,
        id,
        { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('z') },
        'PUT',
      ),
      403,
    );
    // The owner gets 423.
    expectFail(
      await patch(base, `/files/${id}`, { token: owner.token, json: { file_name: 'x' } }),
      423,
    );
  });

  it('locked AND bad body → 423, not 400', async () => {
    const id = await createShareWithContent(base, admin, 'a.txt', Buffer.from('abc'));
    expectStatus(await post(base, `/files/${id}/lock`, { token: admin }), 200);
    expectFail(
      await patch(base, `/files/${id}`, { token: admin, json: { share_id: 'x', bogus: 1 } }),
      423,
    );
    expectFail(await put(base, `/files/${id}`, { token: admin, json: {} }), 423);
    expectFail(await sendParts0(id, 'PUT'), 423);
    expectStatus(await post(base, `/files/${id}/unlock`, { token: admin }), 200);
  });

  it('wrong init state AND bad chunk fields → 423, not 400', async () => {
    const fresh = await createShare(base, admin);
    expectFail(await sendParts0(fresh, 'PUT'), 423);
    const done = await createShare(base, admin);
    await upload(base, admin, done, Buffer.from('done'));
    expectFail(await sendParts0(done, 'POST'), 423);
  });

  it('not the owner AND share already initialized (POST content) → 403', async () => {
    const owner = await createUser(base, admin, ['CREATE', 'READ']);
    const other = await createUser(base, admin, ['CREATE', 'READ']);
    const id = await createShareWithContent(base, owner.token, 'a.txt', Buffer.from('abc'));
    expectFail(
      await sendChunk(base, other.token, id, {
        dzuuid: randomUUID(),
        index: 0,
        total: 1,
        data: Buffer.from('z'),
      }),
      403,
    );
  });
});

/** A content request whose multipart body lacks every chunk field. */
function sendParts0(id: string, method: 'POST' | 'PUT') {
  return request(base, method, `/files/${id}/content`, {
    token: admin,
    body: '--b\r\nContent-Disposition: form-data; name="x"\r\n\r\ny\r\n--b--\r\n',
    headers: { 'content-type': 'multipart/form-data; boundary=b' },
  });
}
