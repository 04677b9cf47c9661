// API.md "Shares": the share object, POST/GET/PATCH/PUT/DELETE /files/<id>, lock and unlock.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allShares,
  content,
  createShare,
  createShareWithContent,
  createUser,
  del,
  expectFail,
  expectStatus,
  filesContaining,
  get,
  getShare,
  ISO_NO_ZONE,
  patch,
  post,
  put,
  request,
  sendChunk,
  upload,
  UUID,
} from '../helpers/http.js';
import {
  ADMIN,
  login,
  startServer,
  storedContent,
  storedUploads,
  type TestServer,
} from '../helpers/server.js';

const ALL = ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'ADMIN', 'READ'];
const SHARE_KEYS = [
  'create_date',
  'expires',
  'file_name',
  'initialized',
  'locked',
  'owner_name',
  'sha256',
  'share_id',
  'size',
];

let srv: TestServer;
let base: string;
let admin: string;
let alice: { username: string; token: string };
let bob: { username: string; token: string };

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
  const perms = ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'READ'];
  alice = await createUser(base, admin, perms);
  bob = await createUser(base, admin, perms);
});

afterAll(async () => {
  await srv?.close();
});

describe('POST /files', () => {
  it('201 with status, url and a Location header; the share is empty and owned by the caller', async () => {
    const before = Date.now();
    const res = await post(base, '/files', {
      token: alice.token,
      json: { file_name: 'report.pdf' },
    });
    const after = Date.now();
    expectStatus(res, 201);
    expect(res.body).toEqual({
      status: 'success',
      url: expect.stringMatching(/^\/files\/[0-9a-f-]{36}$/i),
    });
    const id = res.body.url.slice('/files/'.length);
    expect(id).toMatch(UUID);
    const location = res.headers.location;
    expect(location, 'Location header').toBeDefined();
    expect(new URL(location!, base).pathname).toBe(res.body.url);

    const got = await get(base, res.body.url, { token: alice.token });
    expectStatus(got, 200);
    const share = got.body;
    expect(
      Object.keys(share)
        .filter((k) => k !== 'status')
        .sort(),
    ).toEqual(SHARE_KEYS);
    expect(share).toMatchObject({
      share_id: id,
      file_name: 'report.pdf',
      owner_name: alice.username,
      initialized: false,
      locked: false,
      size: null,
    });
    expect(share.create_date).toMatch(ISO_NO_ZONE);
    // Zone-less but UTC: it parses back to the moment of the request.
    const created = Date.parse(`${share.create_date}Z`);
    expect(created).toBeGreaterThanOrEqual(before - 1000);
    expect(created).toBeLessThanOrEqual(after + 1000);
  });

  it('file_name defaults to the share id', async () => {
    const id = await createShare(base, alice.token);
    expect((await getShare(base, alice.token, id)).file_name).toBe(id);
  });

  it('each share gets a distinct id', async () => {
    const a = await createShare(base, alice.token, 'same.txt');
    const b = await createShare(base, alice.token, 'same.txt');
    expect(a).not.toBe(b);
  });

  it('read-only fields → 400 and no share is created', async () => {
    const before = await get(base, '/files?per_page=1000', { token: admin });
    for (const field of [
      { share_id: randomUUID() },
      { initialized: true },
      { locked: true },
      { create_date: '2020-01-01T00:00:00.000000' },
      { size: 10 },
    ]) {
      expectFail(
        await post(base, '/files', { token: alice.token, json: { file_name: 'x', ...field } }),
        400,
      );
    }
    const after = await get(base, '/files?per_page=1000', { token: admin });
    expect(after.body.data.length).toBe(before.body.data.length);
  });

  it('unknown fields and a non-string file_name → 400', async () => {
    expectFail(
      await post(base, '/files', { token: alice.token, json: { file_name: 'x', color: 'red' } }),
      400,
    );
    expectFail(await post(base, '/files', { token: alice.token, json: { file_name: 5 } }), 400);
  });

  it('a body that is not an object, or does not parse → 400 (never 500)', async () => {
    for (const body of [
      '[]',
      '[{"file_name":"x"}]',
      '"x.txt"',
      '7',
      'null',
      'true',
      '{"file_name": "x"',
      '{]',
    ]) {
      const res = await request(base, 'POST', '/files', {
        token: alice.token,
        body,
        headers: { 'content-type': 'application/json' },
      });
      expectFail(res, 400);
      // JSON that is not an object is called that, not "not valid JSON".
      let json = true;
      try {
        JSON.parse(body);
      } catch {
        json = false;
      }
      expect((res.body as { message: string }).message, body).toBe(
        json ? 'The body must be a JSON object' : 'The request body is not valid JSON',
      );
    }
  });
});

// Additive: Idempotency-Key on POST /files. A client whose create lost its answer sends it again
// with the same key and gets the share the first one made, never a second.
describe('POST /files with an Idempotency-Key', () => {
  const create = (token: string | undefined, key: string, json: object = {}) =>
    post(base, '/files', { token, json, headers: { 'idempotency-key': key } });
  const sharesNamed = async (name: string) =>
    (await allShares(base, admin)).filter((s) => s.file_name === name);

  it('the same key from the same caller names one share: 201 again, Idempotent-Replayed', async () => {
    const key = randomUUID();
    const name = `idem-${key}.txt`;
    const first = await create(alice.token, key, { file_name: name });
    expectStatus(first, 201);
    expect(first.headers['idempotent-replayed']).toBe('false');
    const again = await create(alice.token, key, { file_name: name });
    expectStatus(again, 201);
    expect(again.body).toEqual(first.body);
    expect(again.headers.location).toBe(first.headers.location);
    expect(again.headers['idempotent-replayed']).toBe('true');
    expect(await sharesNamed(name)).toHaveLength(1);
    // Still the same share once it has content.
    const id = (first.body as { url: string }).url.split('/').pop()!;
    await upload(base, alice.token, id, Buffer.from('the content'), 1);
    expect((await create(alice.token, key, { file_name: name })).body).toEqual(first.body);
    expect(await content(base, alice.token, id)).toEqual(Buffer.from('the content'));
  });

  it('twelve concurrent creates with one key make one share', async () => {
    const key = randomUUID();
    const name = `race-${key}.txt`;
    const answers = await Promise.all(
      Array.from({ length: 12 }, () => create(alice.token, key, { file_name: name })),
    );
    for (const a of answers) expectStatus(a, 201);
    expect(new Set(answers.map((a) => (a.body as { url: string }).url)).size).toBe(1);
    expect(answers.filter((a) => a.headers['idempotent-replayed'] === 'false')).toHaveLength(1);
    expect(answers.filter((a) => a.headers['idempotent-replayed'] === 'true')).toHaveLength(11);
    expect(await sharesNamed(name)).toHaveLength(1);
  });

  // Property: a keyed create that fshare serve honours says so, replayed or not. A first keyed
  // create carried no header, like a server that ignores the key: a client resending the create
  // of a killed run could not tell "the earlier create never arrived" (nothing left) from "the
  // key was ignored" (an empty share may be left), and warned of a share that did not exist.
  it('a first keyed create answers Idempotent-Replayed: false; a create without a key has no such header', async () => {
    const key = randomUUID();
    const first = await create(alice.token, key, { file_name: `first-${key}.txt` });
    expectStatus(first, 201);
    expect(first.headers['idempotent-replayed']).toBe('false');
    const keyless = await post(base, '/files', {
      token: alice.token,
      json: { file_name: `keyless-${key}.txt` },
    });
    expectStatus(keyless, 201);
    expect(keyless.headers['idempotent-replayed']).toBeUndefined();
  });

  it('the same key from another caller is another share; ids cannot be guessed from the key', async () => {
    const key = 'build-42';
    const mine = await create(alice.token, key, { file_name: 'k.txt' });
    const theirs = await create(bob.token, key, { file_name: 'k.txt' });
    expectStatus(mine, 201);
    expectStatus(theirs, 201);
    const ids = [mine, theirs].map((r) => (r.body as { url: string }).url.split('/').pop()!);
    expect(ids[0]).not.toBe(ids[1]);
    for (const id of ids) expect(id).toMatch(UUID);
    expect(await getShare(base, admin, ids[0]!)).toMatchObject({ owner_name: alice.username });
    expect(await getShare(base, admin, ids[1]!)).toMatchObject({ owner_name: bob.username });
  });

  it('a key reused for another name → 422; a malformed key → 400; neither creates anything', async () => {
    const key = randomUUID();
    expectStatus(await create(alice.token, key, { file_name: `one-${key}` }), 201);
    const other = await create(alice.token, key, { file_name: `two-${key}` });
    expectFail(other, 422);
    expect(await sharesNamed(`two-${key}`)).toHaveLength(0);
    for (const bad of ['', 'has space', 'x'.repeat(256), 'caf\u00e9']) {
      const name = `bad-${randomUUID()}`;
      expectFail(await create(alice.token, bad, { file_name: name }), 400);
      expect(await sharesNamed(name)).toHaveLength(0);
    }
  });

  it('a share handed to another owner is not handed back by its key: 409', async () => {
    const key = randomUUID();
    const name = `handed-${key}`;
    const first = await create(alice.token, key, { file_name: name });
    const id = (first.body as { url: string }).url.split('/').pop()!;
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { owner_name: bob.username } }),
      200,
    );
    expectFail(await create(alice.token, key, { file_name: name }), 409);
    expect(await sharesNamed(name)).toHaveLength(1);
  });
});

describe('GET /files/<id>', () => {
  it('an id that is not a UUID → 404 JSON, never 500', async () => {
    for (const id of [
      'not-a-uuid',
      '1234',
      "x'%20OR%201=1",
      '..%2F..%2Fdb.json',
      `${randomUUID()}x`,
      'a'.repeat(300),
    ]) {
      expectFail(await get(base, `/files/${id}`, { token: alice.token }), 404);
      expectFail(await get(base, `/files/${id}/content`, { token: alice.token }), 404);
    }
  });

  it('an unknown UUID → 404', async () => {
    expectFail(await get(base, `/files/${randomUUID()}`, { token: alice.token }), 404);
  });

  it("READ is enough to read anyone's share", async () => {
    const id = await createShare(base, alice.token, 'x.bin');
    const reader = await createUser(base, admin, ['READ']);
    expect((await getShare(base, reader.token, id)).owner_name).toBe(alice.username);
  });

  it('size is the content length once initialized', async () => {
    const id = await createShareWithContent(base, alice.token, 's.bin', randomBytes(12345), 3);
    expect(await getShare(base, alice.token, id)).toMatchObject({ initialized: true, size: 12345 });
  });
});

describe('PATCH /files/<id>', () => {
  it('changes file_name: 200 {status: success}', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    const res = await patch(base, `/files/${id}`, {
      token: alice.token,
      json: { file_name: 'b.txt' },
    });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    const share = await getShare(base, alice.token, id);
    expect(share).toMatchObject({ file_name: 'b.txt', owner_name: alice.username, share_id: id });
  });

  it('hands the share to another user, who then owns it', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { owner_name: bob.username } }),
      200,
    );
    expect((await getShare(base, alice.token, id)).owner_name).toBe(bob.username);
    expectFail(
      await patch(base, `/files/${id}`, { token: alice.token, json: { file_name: 'x' } }),
      403,
    );
    expectStatus(
      await patch(base, `/files/${id}`, { token: bob.token, json: { file_name: 'y.txt' } }),
      200,
    );
  });

  it('owner_name null hands the share to anonymous', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { owner_name: null } }),
      200,
    );
    expect((await getShare(base, alice.token, id)).owner_name).toBeNull();
    expectFail(
      await patch(base, `/files/${id}`, { token: alice.token, json: { file_name: 'x' } }),
      403,
    );
  });

  it('owner_name naming no user → 400 and nothing changes', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectFail(
      await patch(base, `/files/${id}`, {
        token: alice.token,
        json: { file_name: 'z', owner_name: 'ghost-user' },
      }),
      400,
    );
    expect(await getShare(base, alice.token, id)).toMatchObject({
      file_name: 'a.txt',
      owner_name: alice.username,
    });
  });

  it('read-only and unknown fields, wrong types, non-object → 400 and nothing changes', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    const bodies: unknown[] = [
      { locked: true },
      { initialized: true },
      { share_id: randomUUID() },
      { create_date: '2020-01-01T00:00:00.000000' },
      { size: 3 },
      { file_name: 'b', extra: 1 },
      { file_name: 12 },
      { owner_name: 12 },
      ['file_name'],
      'b.txt',
    ];
    for (const json of bodies) {
      expectFail(await patch(base, `/files/${id}`, { token: alice.token, json }), 400);
    }
    expectFail(
      await request(base, 'PATCH', `/files/${id}`, {
        token: alice.token,
        body: '{"file_name":',
        headers: { 'content-type': 'application/json' },
      }),
      400,
    );
    expect(await getShare(base, alice.token, id)).toMatchObject({
      file_name: 'a.txt',
      owner_name: alice.username,
      locked: false,
      initialized: false,
      share_id: id,
    });
  });

  it('not the owner → 403 even for an ADMIN with MODIFY', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectFail(
      await patch(base, `/files/${id}`, { token: bob.token, json: { file_name: 'x' } }),
      403,
    );
    expectFail(await patch(base, `/files/${id}`, { token: admin, json: { file_name: 'x' } }), 403);
    expect((await getShare(base, alice.token, id)).file_name).toBe('a.txt');
  });

  it('does not touch the content or the flags', async () => {
    const id = await createShareWithContent(base, alice.token, 'a.txt', Buffer.from('keep me'));
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { file_name: 'b.txt' } }),
      200,
    );
    expect(await getShare(base, alice.token, id)).toMatchObject({
      initialized: true,
      locked: false,
      size: 7,
    });
    expect((await content(base, alice.token, id)).toString()).toBe('keep me');
  });
});

describe('PUT /files/<id>', () => {
  it('needs both fields: 200 with both; owner_name may be null', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    const res = await put(base, `/files/${id}`, {
      token: alice.token,
      json: { file_name: 'b.txt', owner_name: alice.username },
    });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    expect((await getShare(base, alice.token, id)).file_name).toBe('b.txt');
    expectStatus(
      await put(base, `/files/${id}`, {
        token: alice.token,
        json: { file_name: 'c.txt', owner_name: null },
      }),
      200,
    );
    expect(await getShare(base, alice.token, id)).toMatchObject({
      file_name: 'c.txt',
      owner_name: null,
    });
  });

  it('either field missing → 400 and nothing changes', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectFail(
      await put(base, `/files/${id}`, { token: alice.token, json: { file_name: 'b.txt' } }),
      400,
    );
    expectFail(
      await put(base, `/files/${id}`, { token: alice.token, json: { owner_name: alice.username } }),
      400,
    );
    expectFail(await put(base, `/files/${id}`, { token: alice.token, json: {} }), 400);
    expect(await getShare(base, alice.token, id)).toMatchObject({
      file_name: 'a.txt',
      owner_name: alice.username,
    });
  });

  it('owner_name naming no user → 400; read-only field → 400', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectFail(
      await put(base, `/files/${id}`, {
        token: alice.token,
        json: { file_name: 'b', owner_name: 'ghost' },
      }),
      400,
    );
    expectFail(
      await put(base, `/files/${id}`, {
        token: alice.token,
        json: { file_name: 'b', owner_name: alice.username, locked: true },
      }),
      400,
    );
    expect(await getShare(base, alice.token, id)).toMatchObject({
      file_name: 'a.txt',
      locked: false,
    });
  });

  it('not the owner → 403', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectFail(
      await put(base, `/files/${id}`, {
        token: bob.token,
        json: { file_name: 'b', owner_name: bob.username },
      }),
      403,
    );
    expect((await getShare(base, alice.token, id)).owner_name).toBe(alice.username);
  });

  it('unknown share → 404', async () => {
    expectFail(
      await put(base, `/files/${randomUUID()}`, {
        token: alice.token,
        json: { file_name: 'b', owner_name: null },
      }),
      404,
    );
  });
});

describe('lock and unlock', () => {
  it('200 {status, message}; locked flag follows', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    const lock = await post(base, `/files/${id}/lock`, { token: alice.token });
    expectStatus(lock, 200);
    expect(lock.body).toEqual({ status: 'success', message: expect.any(String) });
    expect((await getShare(base, alice.token, id)).locked).toBe(true);
    const unlock = await post(base, `/files/${id}/unlock`, { token: alice.token });
    expectStatus(unlock, 200);
    expect(unlock.body).toEqual({ status: 'success', message: expect.any(String) });
    expect((await getShare(base, alice.token, id)).locked).toBe(false);
  });

  it('LOCK works on any share, owner or not', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectStatus(await post(base, `/files/${id}/lock`, { token: bob.token }), 200);
    expect((await getShare(base, alice.token, id)).locked).toBe(true);
    expectStatus(await post(base, `/files/${id}/unlock`, { token: bob.token }), 200);
  });

  it('unknown share → 404', async () => {
    expectFail(await post(base, `/files/${randomUUID()}/lock`, { token: alice.token }), 404);
    expectFail(await post(base, `/files/${randomUUID()}/unlock`, { token: alice.token }), 404);
    expectFail(await post(base, '/files/not-a-uuid/lock', { token: alice.token }), 404);
  });

  it('a locked share refuses PATCH, PUT, DELETE and PUT content with 423, and keeps its state', async () => {
    const id = await createShareWithContent(base, alice.token, 'a.txt', Buffer.from('original'));
    expectStatus(await post(base, `/files/${id}/lock`, { token: alice.token }), 200);
    expectFail(
      await patch(base, `/files/${id}`, { token: alice.token, json: { file_name: 'b' } }),
      423,
    );
    expectFail(
      await put(base, `/files/${id}`, {
        token: alice.token,
        json: { file_name: 'b', owner_name: null },
      }),
      423,
    );
    expectFail(await del(base, `/files/${id}`, { token: alice.token }), 423);
    expectFail(
      await sendChunk(
        base,
        alice.token,
        id,
        { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('new') },
        'PUT',
      ),
      423,
    );
    // Reading still works.
    expect((await content(base, alice.token, id)).toString()).toBe('original');
    expect(await getShare(base, alice.token, id)).toMatchObject({
      file_name: 'a.txt',
      locked: true,
      size: 8,
    });
    expectStatus(await post(base, `/files/${id}/unlock`, { token: alice.token }), 200);
    expectStatus(
      await patch(base, `/files/${id}`, { token: alice.token, json: { file_name: 'b' } }),
      200,
    );
    await upload(base, alice.token, id, Buffer.from('new'), 1, 'PUT');
    expect((await content(base, alice.token, id)).toString()).toBe('new');
  });

  it('PUT content chunks are refused while locked; the upload resumes after unlock', async () => {
    const id = await createShareWithContent(base, alice.token, 'a.txt', Buffer.from('v1'));
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(
        base,
        alice.token,
        id,
        { dzuuid, index: 0, total: 2, data: Buffer.from('v') },
        'PUT',
      ),
      200,
    );
    expectStatus(await post(base, `/files/${id}/lock`, { token: alice.token }), 200);
    expectFail(
      await sendChunk(
        base,
        alice.token,
        id,
        { dzuuid, index: 1, total: 2, data: Buffer.from('2') },
        'PUT',
      ),
      423,
    );
    expect((await content(base, alice.token, id)).toString()).toBe('v1');
    expectStatus(await post(base, `/files/${id}/unlock`, { token: alice.token }), 200);
    expectStatus(
      await sendChunk(
        base,
        alice.token,
        id,
        { dzuuid, index: 1, total: 2, data: Buffer.from('2') },
        'PUT',
      ),
      201,
    );
    expect((await content(base, alice.token, id)).toString()).toBe('v2');
  });
});

describe('DELETE /files/<id>', () => {
  it('200; the share is gone and its content is removed from disk', async () => {
    const marker = `fshare-delete-marker-${randomUUID()}`;
    const data = Buffer.concat([Buffer.from(marker), randomBytes(5000), Buffer.from(marker)]);
    const id = await createShareWithContent(base, alice.token, 'gone.bin', data, 3);
    expect(await storedContent(srv, id)).toHaveLength(1);
    const res = await del(base, `/files/${id}`, { token: alice.token });
    expectStatus(res, 200);
    expect(res.body.status).toBe('success');
    expectFail(await get(base, `/files/${id}`, { token: alice.token }), 404);
    expectFail(await get(base, `/files/${id}/content`, { token: alice.token }), 404);
    expect(await storedContent(srv, id)).toEqual([]);
    expect(await storedUploads(srv, id)).toEqual([]);
    // Nor is any copy of the bytes left among the server's files (temp files with S3).
    expect(await filesContaining(srv.dataDir, marker)).toEqual([]);
    const list = await get(base, '/files?per_page=1000', { token: alice.token });
    expect(list.body.data.map((s: { share_id: string }) => s.share_id)).not.toContain(id);
    expectFail(await del(base, `/files/${id}`, { token: alice.token }), 404);
  });

  it('removes pending upload chunks too', async () => {
    const marker = `fshare-pending-marker-${randomUUID()}`;
    const id = await createShare(base, alice.token, 'pending.bin');
    expectStatus(
      await sendChunk(base, alice.token, id, {
        dzuuid: randomUUID(),
        index: 0,
        total: 2,
        data: Buffer.from(marker),
      }),
      200,
    );
    expect(await storedUploads(srv, id)).toHaveLength(1);
    expectStatus(await del(base, `/files/${id}`, { token: alice.token }), 200);
    expect(await storedUploads(srv, id)).toEqual([]);
    expect(await filesContaining(srv.dataDir, marker)).toEqual([]);
  });

  it("DELETE works on any share (not only the owner's)", async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    expectStatus(await del(base, `/files/${id}`, { token: bob.token }), 200);
    expectFail(await get(base, `/files/${id}`, { token: alice.token }), 404);
  });

  it('locked → 423 and the share and content survive', async () => {
    const id = await createShareWithContent(base, alice.token, 'a.txt', Buffer.from('still here'));
    expectStatus(await post(base, `/files/${id}/lock`, { token: alice.token }), 200);
    expectFail(await del(base, `/files/${id}`, { token: bob.token }), 423);
    expect((await content(base, alice.token, id)).toString()).toBe('still here');
  });

  it('without DELETE → 403', async () => {
    const id = await createShare(base, alice.token, 'a.txt');
    const user = await createUser(
      base,
      admin,
      ALL.filter((p) => p !== 'DELETE'),
    );
    expectFail(await del(base, `/files/${id}`, { token: user.token }), 403);
    await getShare(base, alice.token, id);
  });

  it('an id that is not a UUID → 404', async () => {
    expectFail(await del(base, '/files/not-a-uuid', { token: alice.token }), 404);
  });
});
