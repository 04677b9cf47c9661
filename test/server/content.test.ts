// API.md "Content and the chunk protocol": POST/PUT /files/<id>/content.
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createShareWithContent,
  createUser,
  expectFail,
  expectStatus,
  get,
  getShare,
  request,
  sendChunk,
  sendParts,
  sha256hex,
  split,
  upload,
  walkAll,
  type Part,
} from '../helpers/http.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const MAX_CHUNK = 1024;

let srv: TestServer;
let base: string;
let admin: string;
let owner: { username: string; token: string };

beforeAll(async () => {
  srv = await startServer({ maxChunkBytes: MAX_CHUNK });
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
  owner = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ', 'LIST', 'LOCK']);
});

afterAll(async () => {
  await srv?.close();
});

async function expectUninitialized(id: string): Promise<void> {
  expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: false, size: null });
  expectFail(await get(base, `/files/${id}/content`, { token: owner.token }), 404);
}

describe('POST /files/<id>/content', () => {
  it('a single chunk: 201 {status, message}; the share is initialized with the bytes', async () => {
    const id = await createShare(base, owner.token, 'one.bin');
    const data = randomBytes(700);
    const res = await sendChunk(base, owner.token, id, {
      dzuuid: randomUUID(),
      index: 0,
      total: 1,
      data,
    });
    expectStatus(res, 201);
    // Additive: what it published (docs/API.md).
    expect(res.body).toEqual({
      status: 'success',
      message: expect.any(String),
      size: 700,
      sha256: sha256hex(data),
    });
    expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: true, size: 700 });
    expect((await content(base, owner.token, id)).equals(data)).toBe(true);
  });

  it('3 chunks out of order (2, 0, 1) → 200, 200, 201; joined in index order', async () => {
    const id = await createShare(base, owner.token, 'three.bin');
    const data = randomBytes(2500);
    const parts = split(data, 3);
    const dzuuid = randomUUID();
    const r2 = await sendChunk(base, owner.token, id, {
      dzuuid,
      index: 2,
      total: 3,
      data: parts[2]!,
    });
    expectStatus(r2, 200);
    expect(r2.body.status).toBe('success');
    await expectUninitialized(id);
    expectStatus(
      await sendChunk(base, owner.token, id, { dzuuid, index: 0, total: 3, data: parts[0]! }),
      200,
    );
    await expectUninitialized(id);
    expectStatus(
      await sendChunk(base, owner.token, id, { dzuuid, index: 1, total: 3, data: parts[1]! }),
      201,
    );
    expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: true, size: 2500 });
    expect((await content(base, owner.token, id)).equals(data)).toBe(true);
  });

  it('8 chunks in parallel: exactly one 201, the rest 200, bytes in index order', async () => {
    const id = await createShare(base, owner.token, 'parallel.bin');
    const data = randomBytes(8 * 1000);
    const dzuuid = randomUUID();
    const results = await Promise.all(
      split(data, 8).map((chunk, index) =>
        sendChunk(base, owner.token, id, { dzuuid, index, total: 8, data: chunk }),
      ),
    );
    const statuses = results.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 200, 200, 200, 200, 200, 200, 201]);
    expect((await content(base, owner.token, id)).equals(data)).toBe(true);
  });

  it('a re-sent index replaces the earlier one (and is not counted twice)', async () => {
    const id = await createShare(base, owner.token, 'resent.txt');
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 3,
        data: Buffer.from('AAAA'),
      }),
      200,
    );
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 3,
        data: Buffer.from('BB'),
      }),
      200,
    );
    // Three requests have arrived but only two indexes: not complete yet.
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 2,
        total: 3,
        data: Buffer.from('DD'),
      }),
      200,
    );
    await expectUninitialized(id);
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 1,
        total: 3,
        data: Buffer.from('CC'),
      }),
      201,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('BBCCDD');
  });

  it('an empty file as one empty chunk → 201, initialized, size 0, empty content', async () => {
    const id = await createShare(base, owner.token, 'empty.txt');
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid: randomUUID(),
        index: 0,
        total: 1,
        data: Buffer.alloc(0),
      }),
      201,
    );
    expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: true, size: 0 });
    const res = await get(base, `/files/${id}/content`, { token: owner.token });
    expectStatus(res, 200);
    expect(res.buf.length).toBe(0);
    expect(res.headers['content-length']).toBe('0');
  });

  it('two uploads to the same share with different dzuuids: the first to complete wins, the other is then refused', async () => {
    const id = await createShare(base, owner.token, 'race.txt');
    const a = randomUUID();
    const b = randomUUID();
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid: a,
        index: 0,
        total: 2,
        data: Buffer.from('a0'),
      }),
      200,
    );
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid: b,
        index: 0,
        total: 2,
        data: Buffer.from('b0'),
      }),
      200,
    );
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid: b,
        index: 1,
        total: 2,
        data: Buffer.from('b1'),
      }),
      201,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('b0b1');
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid: a,
        index: 1,
        total: 2,
        data: Buffer.from('a1'),
      }),
      423,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('b0b1');
  });

  it('on an initialized share → 423 and the content is unchanged', async () => {
    const id = await createShareWithContent(base, owner.token, 'done.txt', Buffer.from('done'));
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid: randomUUID(),
        index: 0,
        total: 1,
        data: Buffer.from('again'),
      }),
      423,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('done');
  });

  it('not the owner → 403; unknown share → 404; non-UUID id → 404', async () => {
    const other = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ']);
    const id = await createShare(base, owner.token, 'mine.txt');
    const chunk = { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('x') };
    expectFail(await sendChunk(base, other.token, id, chunk), 403);
    expectFail(await sendChunk(base, admin, id, chunk), 403);
    await expectUninitialized(id);
    expectFail(await sendChunk(base, owner.token, randomUUID(), chunk), 404);
    expectFail(await sendChunk(base, owner.token, 'not-a-uuid', chunk), 404);
  });
});

describe('bad chunk fields → 400, share untouched', () => {
  const good = (dzuuid: string, index = 0, total = 2): Part[] => [
    { name: 'dzuuid', value: dzuuid },
    { name: 'dzchunkindex', value: String(index) },
    { name: 'dztotalchunks', value: String(total) },
    { name: 'upload', filename: 'blob', data: Buffer.from(`chunk${index}`) },
  ];
  const without = (parts: Part[], name: string) => parts.filter((p) => p.name !== name);
  const withValue = (parts: Part[], name: string, value: string) =>
    parts.map((p) => (p.name === name ? { name, value } : p));

  const cases: Array<[string, (u: string) => Part[]]> = [
    ['missing dzuuid', (u) => without(good(u), 'dzuuid')],
    ['missing dzchunkindex', (u) => without(good(u), 'dzchunkindex')],
    ['missing dztotalchunks', (u) => without(good(u), 'dztotalchunks')],
    ['no upload part', (u) => without(good(u), 'upload')],
    [
      'upload sent as a plain field, not a file',
      (u) => [...without(good(u), 'upload'), { name: 'upload', value: 'text' }],
    ],
    ['non-integer index "a"', (u) => withValue(good(u), 'dzchunkindex', 'a')],
    ['non-integer index "1.5"', (u) => withValue(good(u), 'dzchunkindex', '1.5')],
    ['empty index', (u) => withValue(good(u), 'dzchunkindex', '')],
    ['negative index', (u) => withValue(good(u), 'dzchunkindex', '-1')],
    ['index equal to total', (u) => withValue(good(u), 'dzchunkindex', '2')],
    ['index past total', (u) => withValue(good(u), 'dzchunkindex', '7')],
    ['non-integer total', (u) => withValue(good(u), 'dztotalchunks', 'two')],
    ['total 0', (u) => withValue(withValue(good(u), 'dztotalchunks', '0'), 'dzchunkindex', '0')],
    ['total negative', (u) => withValue(good(u), 'dztotalchunks', '-2')],
  ];

  for (const [name, make] of cases) {
    it(name, async () => {
      const id = await createShare(base, owner.token, 'bad.txt');
      const dzuuid = randomUUID();
      expectFail(await sendParts(base, owner.token, id, make(dzuuid)), 400);
      await expectUninitialized(id);
      // The refused chunk left nothing behind: a clean 2-chunk upload under the same dzuuid works.
      expectStatus(await sendParts(base, owner.token, id, good(dzuuid, 0)), 200);
      expectStatus(await sendParts(base, owner.token, id, good(dzuuid, 1)), 201);
      expect((await content(base, owner.token, id)).toString()).toBe('chunk0chunk1');
    });
  }

  it('a body that is not multipart → 400', async () => {
    const id = await createShare(base, owner.token, 'bad.txt');
    for (const [type, body] of [
      ['application/json', JSON.stringify({ dzuuid: 'x', dzchunkindex: 0, dztotalchunks: 1 })],
      ['application/octet-stream', 'raw bytes'],
      ['multipart/form-data; boundary=zzz', 'garbage without boundaries'],
    ] as const) {
      const res = await request(base, 'POST', `/files/${id}/content`, {
        token: owner.token,
        body,
        headers: { 'content-type': type },
      });
      expectFail(res, 400);
      // The message says what the body must be, not that some field is missing.
      if (!type.startsWith('multipart/'))
        expect((res.body as { message: string }).message).toBe(
          `A chunk is sent as multipart/form-data (fields dzuuid, dzchunkindex, dztotalchunks and the file part "upload"), not as ${type}`,
        );
    }
    await expectUninitialized(id);
  });

  it('a total that differs from earlier chunks of the same upload → 400 (and cannot complete it)', async () => {
    const id = await createShare(base, owner.token, 'mismatch.txt');
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 2,
        data: Buffer.from('x0'),
      }),
      200,
    );
    // Accepted, this would complete a 1-chunk upload.
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 1,
        data: Buffer.from('zz'),
      }),
      400,
    );
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 1,
        total: 3,
        data: Buffer.from('zz'),
      }),
      400,
    );
    await expectUninitialized(id);
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 1,
        total: 2,
        data: Buffer.from('x1'),
      }),
      201,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('x0x1');
  });
});

describe('chunk size limit', () => {
  it('a chunk over maxChunkBytes → 413 JSON; the share is untouched', async () => {
    const id = await createShare(base, owner.token, 'big.bin');
    const dzuuid = randomUUID();
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 1,
        data: randomBytes(MAX_CHUNK * 2),
      }),
      413,
    );
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 1,
        data: randomBytes(MAX_CHUNK + 1),
      }),
      413,
    );
    await expectUninitialized(id);
  });

  it('a chunk of exactly maxChunkBytes is accepted', async () => {
    const id = await createShare(base, owner.token, 'max.bin');
    const data = randomBytes(MAX_CHUNK);
    expectStatus(
      await sendChunk(base, owner.token, id, { dzuuid: randomUUID(), index: 0, total: 1, data }),
      201,
    );
    expect((await content(base, owner.token, id)).equals(data)).toBe(true);
  });

  it('a file larger than the limit goes through in chunks', async () => {
    const id = await createShare(base, owner.token, 'chunks.bin');
    const data = randomBytes(MAX_CHUNK * 5 + 17);
    await upload(base, owner.token, id, data, 6);
    expect((await content(base, owner.token, id)).equals(data)).toBe(true);
  });

  it('an oversized chunk in the middle of an upload does not spoil it', async () => {
    const id = await createShare(base, owner.token, 'mid.bin');
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 0,
        total: 2,
        data: Buffer.from('ok0'),
      }),
      200,
    );
    expectFail(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 1,
        total: 2,
        data: randomBytes(MAX_CHUNK * 3),
      }),
      413,
    );
    await expectUninitialized(id);
    expectStatus(
      await sendChunk(base, owner.token, id, {
        dzuuid,
        index: 1,
        total: 2,
        data: Buffer.from('ok1'),
      }),
      201,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('ok0ok1');
  });
});

describe('PUT /files/<id>/content', () => {
  it('on an uninitialized share → 423', async () => {
    const id = await createShare(base, owner.token, 'fresh.txt');
    expectFail(
      await sendChunk(
        base,
        owner.token,
        id,
        { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('x') },
        'PUT',
      ),
      423,
    );
    await expectUninitialized(id);
  });

  it('replaces the content; the old content is served until the final chunk', async () => {
    const old = randomBytes(3000);
    const id = await createShareWithContent(base, owner.token, 'swap.bin', old, 3);
    const before = await get(base, `/files/${id}/content`, { token: owner.token });
    const fresh = randomBytes(2000);
    const parts = split(fresh, 2);
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(
        base,
        owner.token,
        id,
        { dzuuid, index: 1, total: 2, data: parts[1]! },
        'PUT',
      ),
      200,
    );
    expect((await content(base, owner.token, id)).equals(old)).toBe(true);
    expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: true, size: 3000 });
    const last = await sendChunk(
      base,
      owner.token,
      id,
      { dzuuid, index: 0, total: 2, data: parts[0]! },
      'PUT',
    );
    expectStatus(last, 201);
    expect(last.body).toEqual({
      status: 'success',
      message: expect.any(String),
      size: fresh.length,
      sha256: sha256hex(fresh),
    });
    const after = await get(base, `/files/${id}/content`, { token: owner.token });
    expect(after.buf.equals(fresh)).toBe(true);
    expect(after.headers['content-length']).toBe('2000');
    expect(after.headers.etag).not.toBe(before.headers.etag);
    expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: true, size: 2000 });
  });

  it('readers during a replacement see the old bytes or the new, never a mix', async () => {
    const old = Buffer.alloc(MAX_CHUNK * 4, 'o');
    const fresh = Buffer.alloc(MAX_CHUNK * 4, 'n');
    const id = await createShareWithContent(base, owner.token, 'atomic.bin', old, 4);
    const dzuuid = randomUUID();
    const chunks = split(fresh, 4);
    for (let i = 0; i < 3; i++) {
      expectStatus(
        await sendChunk(
          base,
          owner.token,
          id,
          { dzuuid, index: i, total: 4, data: chunks[i]! },
          'PUT',
        ),
        200,
      );
    }
    const reads = Array.from({ length: 10 }, () =>
      get(base, `/files/${id}/content`, { token: owner.token }),
    );
    const final = sendChunk(
      base,
      owner.token,
      id,
      { dzuuid, index: 3, total: 4, data: chunks[3]! },
      'PUT',
    );
    const more = Array.from({ length: 10 }, () =>
      get(base, `/files/${id}/content`, { token: owner.token }),
    );
    expectStatus(await final, 201);
    for (const res of [...(await Promise.all(reads)), ...(await Promise.all(more))]) {
      expectStatus(res, 200);
      expect(res.buf.equals(old) || res.buf.equals(fresh), 'a read saw a mix of old and new').toBe(
        true,
      );
      expect(Number(res.headers['content-length'])).toBe(res.buf.length);
    }
    expect((await content(base, owner.token, id)).equals(fresh)).toBe(true);
  });

  it('replacing with an empty file works', async () => {
    const id = await createShareWithContent(
      base,
      owner.token,
      'shrink.txt',
      Buffer.from('something'),
    );
    await upload(base, owner.token, id, Buffer.alloc(0), 1, 'PUT');
    expect(await getShare(base, owner.token, id)).toMatchObject({ initialized: true, size: 0 });
    expect((await content(base, owner.token, id)).length).toBe(0);
  });

  it('bad fields on PUT → 400 and the old content stays', async () => {
    const id = await createShareWithContent(base, owner.token, 'keep.txt', Buffer.from('keep'));
    expectFail(
      await sendParts(
        base,
        owner.token,
        id,
        [
          { name: 'dzuuid', value: randomUUID() },
          { name: 'dzchunkindex', value: '0' },
          { name: 'dztotalchunks', value: '1' },
        ],
        'PUT',
      ),
      400,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('keep');
  });

  it('not the owner → 403', async () => {
    const other = await createUser(base, admin, ['CREATE', 'MODIFY', 'READ']);
    const id = await createShareWithContent(base, owner.token, 'mine.txt', Buffer.from('mine'));
    expectFail(
      await sendChunk(
        base,
        other.token,
        id,
        { dzuuid: randomUUID(), index: 0, total: 1, data: Buffer.from('x') },
        'PUT',
      ),
      403,
    );
    expect((await content(base, owner.token, id)).toString()).toBe('mine');
  });

  it('a second PUT upload after a completed one replaces again', async () => {
    const id = await createShareWithContent(base, owner.token, 'v.txt', Buffer.from('v1'));
    await upload(base, owner.token, id, Buffer.from('version-two'), 2, 'PUT');
    await upload(base, owner.token, id, Buffer.from('v3'), 1, 'PUT');
    expect((await content(base, owner.token, id)).toString()).toBe('v3');
  });
});

describe('dzuuid and file_name never become paths', () => {
  let outer: string;
  let dataDir: string;
  let nested: TestServer;

  beforeAll(async () => {
    // The data dir sits six levels deep so any ../ escape lands inside `outer`, where we can see it.
    outer = await mkdtemp(join(tmpdir(), 'fshare-paths-'));
    const parent = join(outer, 'l1', 'l2', 'l3', 'l4', 'l5');
    await mkdir(parent, { recursive: true });
    dataDir = join(parent, 'data');
    nested = await startServer({ dataDir });
  });

  afterAll(async () => {
    await nested?.close();
    await rm(outer, { recursive: true, force: true });
  });

  it('hostile dzuuids and file names create nothing outside the data directory', async () => {
    const token = await login(nested.url, ADMIN.username, ADMIN.password);
    const outside = async () =>
      (await walkAll(outer)).filter((p) => relative(dataDir, p).startsWith('..'));
    const before = await outside();
    const absolute = join(tmpdir(), `fshare-evil-${randomUUID()}`);
    const hostile = [
      '../../etc',
      '../../../../../../evil',
      '../../../../../x',
      '..',
      '.',
      '/',
      absolute,
      '..\\..\\win',
      'a/../../b',
      '%2e%2e%2f%2e%2e%2fenc',
      'nul\u0000byte',
      'db.json',
      'secret',
    ];
    for (const [i, dzuuid] of hostile.entries()) {
      // (A file name may not hold a NUL; a dzuuid may.)
      const name = hostile[(i + 1) % hostile.length]!.replace('\u0000', '_');
      const id = await createShare(nested.url, token, name);
      const data = Buffer.from(`payload-${i}`);
      expectStatus(
        await sendParts(nested.url, token, id, [
          { name: 'dzuuid', value: dzuuid },
          { name: 'dzchunkindex', value: '0' },
          { name: 'dztotalchunks', value: '2' },
          { name: 'upload', filename: `../../../../../../evil-${i}`, data: data.subarray(0, 4) },
        ]),
        200,
      );
      expectStatus(
        await sendParts(nested.url, token, id, [
          { name: 'dzuuid', value: dzuuid },
          { name: 'dzchunkindex', value: '1' },
          { name: 'dztotalchunks', value: '2' },
          { name: 'upload', filename: '../../x', data: data.subarray(4) },
        ]),
        201,
      );
      expect((await content(nested.url, token, id)).equals(data)).toBe(true);
    }
    // Shares named after data-dir files do not clobber them.
    expectStatus(await get(nested.url, '/files', { token }), 200);
    await login(nested.url, ADMIN.username, ADMIN.password);
    expect(await outside()).toEqual(before);
    await expect(stat(absolute)).rejects.toThrow();
    // …and the server still works after all that.
    const id = await createShareWithContent(nested.url, token, '../../x', Buffer.from('fine'));
    expect((await content(nested.url, token, id)).toString()).toBe('fine');
    expect(await outside()).toEqual(before);
  });
});
