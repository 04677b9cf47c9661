// fshare extension of the chunk protocol: a chunk whose fields precede its data and carry
// Dropzone's `dzchunkbyteoffset` is written in place, so completing the upload copies nothing.
// Clients that do not send it (the reference's) keep working, also mixed within one upload.
import { randomBytes, randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ADMIN, login, startServer, storedUploads, type TestServer } from '../helpers/server.js';
import {
  content,
  createShare,
  expectFail,
  expectStatus,
  getShare,
  sendChunk,
  sendParts,
  split,
  type Res,
} from '../helpers/http.js';

let srv: TestServer;
let token: string;
beforeAll(async () => {
  srv = await startServer();
  token = await login(srv.url, ADMIN.username, ADMIN.password);
});
afterAll(() => srv.close());

function sendPlaced(
  id: string,
  c: { dzuuid: string; index: number; total: number; offset: number; data: Buffer },
  method: 'POST' | 'PUT' = 'POST',
): Promise<Res> {
  return sendParts(
    srv.url,
    token,
    id,
    [
      { name: 'dzuuid', value: c.dzuuid },
      { name: 'dzchunkindex', value: String(c.index) },
      { name: 'dztotalchunks', value: String(c.total) },
      { name: 'dzchunkbyteoffset', value: String(c.offset) },
      { name: 'upload', filename: 'blob', data: c.data },
    ],
    method,
  );
}

/** Chunks of `data` with their offsets. */
function chunksOf(data: Buffer, count: number) {
  let offset = 0;
  return split(data, count).map((piece, index) => {
    const c = { index, offset, data: piece };
    offset += piece.length;
    return c;
  });
}

describe('placed chunks', () => {
  it('out of order and in parallel: exactly one 201, the bytes in index order', async () => {
    const id = await createShare(srv.url, token, 'placed.bin');
    const data = randomBytes(100_000);
    const dzuuid = randomUUID();
    const chunks = chunksOf(data, 7);
    const order = [3, 6, 0, 5, 1, 4, 2];
    const results = await Promise.all(
      order.map((i) => sendPlaced(id, { dzuuid, total: 7, ...chunks[i]! })),
    );
    expect(results.map((r) => r.status).sort()).toEqual([200, 200, 200, 200, 200, 200, 201]);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    expect(await getShare(srv.url, token, id)).toMatchObject({
      initialized: true,
      size: data.length,
    });
    // Nothing of the upload is left behind but the record that refuses its late chunks.
    expect(await storedUploads(srv, id)).toEqual([]);
    // (PUT: a POST to a share with content is refused before its upload is looked at.)
    expectFail(await sendPlaced(id, { dzuuid, total: 7, ...chunks[3]! }, 'PUT'), 409);
    expect(await storedUploads(srv, id)).toEqual([]);
  });

  it('a re-sent placed chunk replaces the earlier one and is not counted twice', async () => {
    const id = await createShare(srv.url, token, 'resent.bin');
    const data = randomBytes(30_000);
    const dzuuid = randomUUID();
    const [c0, c1, c2] = chunksOf(data, 3);
    expectStatus(
      await sendPlaced(id, { dzuuid, total: 3, ...c0!, data: randomBytes(10_000) }),
      200,
    );
    expectStatus(await sendPlaced(id, { dzuuid, total: 3, ...c0! }), 200);
    expectStatus(await sendPlaced(id, { dzuuid, total: 3, ...c2! }), 200);
    expectStatus(await sendPlaced(id, { dzuuid, total: 3, ...c1! }), 201);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
  });

  it('placed and loose chunks mix within one upload, and PUT replaces content the same way', async () => {
    const id = await createShare(srv.url, token, 'mixed.bin');
    const first = randomBytes(50_000);
    const dzuuid = randomUUID();
    const [c0, c1, c2] = chunksOf(first, 3);
    expectStatus(
      await sendChunk(srv.url, token, id, { dzuuid, index: 1, total: 3, data: c1!.data }),
      200,
    );
    expectStatus(await sendPlaced(id, { dzuuid, total: 3, ...c2! }), 200);
    expectStatus(await sendPlaced(id, { dzuuid, total: 3, ...c0! }), 201);
    expect((await content(srv.url, token, id)).equals(first)).toBe(true);

    const second = randomBytes(20_000);
    const put = randomUUID();
    const [p0, p1] = chunksOf(second, 2);
    expectStatus(await sendPlaced(id, { dzuuid: put, total: 2, ...p1! }, 'PUT'), 200);
    expect((await content(srv.url, token, id)).equals(first)).toBe(true);
    expectStatus(await sendPlaced(id, { dzuuid: put, total: 2, ...p0! }, 'PUT'), 201);
    expect((await content(srv.url, token, id)).equals(second)).toBe(true);
  });

  it('offsets that leave a gap are a 400 and the share stays uninitialized', async () => {
    const id = await createShare(srv.url, token, 'gap.bin');
    const dzuuid = randomUUID();
    expectStatus(
      await sendPlaced(id, { dzuuid, index: 0, total: 2, offset: 0, data: randomBytes(100) }),
      200,
    );
    const res = await sendPlaced(id, {
      dzuuid,
      index: 1,
      total: 2,
      offset: 500,
      data: randomBytes(100),
    });
    expectFail(res, 400);
    expect((res.body as { message: string }).message).toBe(
      'Chunk 1 starts at byte 500, but chunk 0 ends at byte 100',
    );
    expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false, size: null });
    // The first chunk can only start at byte 0, and the message says so.
    const first = await sendPlaced(id, {
      dzuuid: randomUUID(),
      index: 0,
      total: 2,
      offset: 3,
      data: randomBytes(100),
    });
    expectFail(first, 400);
    expect((first.body as { message: string }).message).toBe(
      'Chunk 0 starts at byte 3, but the file starts at byte 0',
    );
    // Re-sending the chunk at its right offset mends the upload.
    expectStatus(
      await sendPlaced(id, { dzuuid, index: 1, total: 2, offset: 100, data: randomBytes(100) }),
      201,
    );
    expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: true, size: 200 });
  });

  it('a placed chunk over the size limit is a 413 and leaves nothing counted', async () => {
    const small = await startServer({ maxChunkBytes: 1024 });
    try {
      const t = await login(small.url, ADMIN.username, ADMIN.password);
      const id = await createShare(small.url, t, 'big.bin');
      const dzuuid = randomUUID();
      const parts = (data: Buffer, offset: number) => [
        { name: 'dzuuid', value: dzuuid },
        { name: 'dzchunkindex', value: '0' },
        { name: 'dztotalchunks', value: '1' },
        { name: 'dzchunkbyteoffset', value: String(offset) },
        { name: 'upload', filename: 'blob', data },
      ];
      expectFail(await sendParts(small.url, t, id, parts(randomBytes(5000), 0)), 413);
      expect(await getShare(small.url, t, id)).toMatchObject({ initialized: false });
      const ok = randomBytes(1000);
      expectStatus(await sendParts(small.url, t, id, parts(ok, 0)), 201);
      expect((await content(small.url, t, id)).equals(ok)).toBe(true);
    } finally {
      await small.close();
    }
  });
});

describe("Dropzone's own field names", () => {
  // Dropzone.js sends the chunk count as dztotalchunkcount, with its layout fields, and no
  // dztotalchunks: a Dropzone page pointed at fshare serve got 400 for every chunk. The name is
  // taken where dztotalchunks is absent (test/browser/dropzone.test.ts runs Dropzone itself).
  it('dztotalchunkcount stands for a missing dztotalchunks; both given must agree', async () => {
    const data = randomBytes(10_000);
    const id = await createShare(srv.url, token, 'dropzone.bin');
    const dzuuid = randomUUID();
    const chunks = chunksOf(data, 3);
    const send = (c: (typeof chunks)[number], extra: { name: string; value: string }[] = []) =>
      sendParts(srv.url, token, id, [
        { name: 'dzuuid', value: dzuuid },
        { name: 'dzchunkindex', value: String(c.index) },
        { name: 'dztotalfilesize', value: String(data.length) },
        { name: 'dzchunksize', value: String(chunks[0]!.data.length) },
        { name: 'dzchunkbyteoffset', value: String(c.offset) },
        ...extra,
        { name: 'upload', filename: 'blob', data: c.data },
      ]);
    // Both, disagreeing: 400, nothing stored.
    expectFail(
      await send(chunks[0]!, [
        { name: 'dztotalchunkcount', value: '3' },
        { name: 'dztotalchunks', value: '4' },
      ]),
      400,
    );
    expect(await storedUploads(srv, id)).toEqual([]);
    // Neither: still a 400 naming dztotalchunks.
    const neither = await send(chunks[0]!);
    expectFail(neither, 400);
    expect(neither.body.message).toContain('dztotalchunks');
    // Dropzone's name alone, in any order: one 201, the bytes in order.
    const count = [{ name: 'dztotalchunkcount', value: '3' }];
    expectStatus(await send(chunks[2]!, count), 200);
    expectStatus(await send(chunks[0]!, count), 200);
    expectStatus(await send(chunks[1]!, [...count, { name: 'dztotalchunks', value: '3' }]), 201);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    expect((await getShare(srv.url, token, id)).size).toBe(data.length);
  });
});

// Found from outside: dztotalfilesize or dzchunksize sent without the rest of the layout was
// ignored, so an upload that said it was 500 bytes (then 300) published 200, and a 50-byte
// chunk 0 of a declared 100-byte chunk size was taken. Each is what its sender says of the
// upload: a chunk that contradicts it is a 400 that stores nothing, and an upload that ends
// short of its declared size is a 422 and discarded (it can never complete), as for dzsha256.
describe('sizes declared without the rest of the layout', () => {
  const send = (
    id: string,
    dzuuid: string,
    index: number,
    total: number,
    data: Buffer,
    extra: Record<string, string>,
  ) =>
    sendParts(srv.url, token, id, [
      { name: 'dzuuid', value: dzuuid },
      { name: 'dzchunkindex', value: String(index) },
      { name: 'dztotalchunks', value: String(total) },
      ...Object.entries(extra).map(([name, value]) => ({ name, value })),
      { name: 'upload', filename: 'blob', data },
    ]);

  it('dztotalfilesize alone: the chunks must add up to it, and every chunk says the same', async () => {
    const id = await createShare(srv.url, token, 'declared.bin');
    const dzuuid = randomUUID();
    const [a, b, c] = [randomBytes(100), randomBytes(100), randomBytes(100)];
    expectStatus(await send(id, dzuuid, 0, 2, a, { dztotalfilesize: '500' }), 200);
    const other = await send(id, dzuuid, 1, 2, b, { dztotalfilesize: '300' });
    expectFail(other, 400);
    expect(other.body.message).toBe(
      'dztotalfilesize is 300 but earlier chunks of this upload said 500',
    );
    // Without the field, the last chunk still completes against the size declared before.
    const short = await send(id, dzuuid, 1, 2, b, {});
    expectFail(short, 422);
    expect(short.body.message).toBe(
      'The uploaded chunks hold 200 bytes, not the 500 that dztotalfilesize announced; the upload was discarded',
    );
    expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false, size: null });
    expect(await storedUploads(srv, id)).toEqual([]);

    // More than declared: refused at the chunk that passes it.
    const again = randomUUID();
    expectStatus(await send(id, again, 0, 3, a, { dztotalfilesize: '250' }), 200);
    expectStatus(await send(id, again, 2, 3, c, {}), 200);
    const over = await send(id, again, 1, 3, b, {});
    expectFail(over, 400);
    expect(over.body.message).toBe(
      'The chunks of this upload would hold 300 bytes, more than dztotalfilesize (250)',
    );
    expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false });
    // The right bytes complete it.
    expectStatus(await send(id, again, 1, 3, b.subarray(0, 50), { dztotalfilesize: '250' }), 201);
    const whole = Buffer.concat([a, b.subarray(0, 50), c]);
    expect((await content(srv.url, token, id)).equals(whole)).toBe(true);
  });

  it('a declared dztotalfilesize outlives a restart of the server', async () => {
    const first = await startServer();
    const t = await login(first.url, ADMIN.username, ADMIN.password);
    const id = await createShare(first.url, t, 'restart.bin');
    const dzuuid = randomUUID();
    const chunk = (
      url: string,
      tk: string,
      index: number,
      extra: { name: string; value: string }[],
    ) =>
      sendParts(url, tk, id, [
        { name: 'dzuuid', value: dzuuid },
        { name: 'dzchunkindex', value: String(index) },
        { name: 'dztotalchunks', value: '2' },
        ...extra,
        { name: 'upload', filename: 'blob', data: randomBytes(100) },
      ]);
    expectStatus(await chunk(first.url, t, 0, [{ name: 'dztotalfilesize', value: '500' }]), 200);
    await first.close(false);
    const second = await startServer({ dataDir: first.dataDir });
    try {
      const t2 = await login(second.url, ADMIN.username, ADMIN.password);
      const res = await chunk(second.url, t2, 1, []);
      expectFail(res, 422);
      expect(res.body.message).toMatch(/not the 500 that dztotalfilesize announced/);
      expect(await getShare(second.url, t2, id)).toMatchObject({ initialized: false });
    } finally {
      await second.close();
    }
  });

  it('dzchunksize alone: every chunk but the last has it, the last at most it', async () => {
    const id = await createShare(srv.url, token, 'chunksize.bin');
    const dzuuid = randomUUID();
    const short = await send(id, dzuuid, 0, 2, randomBytes(50), { dzchunksize: '100' });
    expectFail(short, 400);
    expect(short.body.message).toBe(
      'Chunk 0 has 50 bytes, but dzchunksize says every chunk but the last has 100',
    );
    const long = await send(id, dzuuid, 1, 2, randomBytes(300), { dzchunksize: '100' });
    expectFail(long, 400);
    expect(long.body.message).toBe('The last chunk has 300 bytes, more than dzchunksize (100)');
    expect(await storedUploads(srv, id)).toEqual([]);
    expectFail(await send(id, dzuuid, 0, 2, randomBytes(1), { dzchunksize: '0' }), 400);
    const [a, b] = [randomBytes(100), randomBytes(30)];
    expectStatus(await send(id, dzuuid, 1, 2, b, { dzchunksize: '100' }), 200);
    expectStatus(await send(id, dzuuid, 0, 2, a, { dzchunksize: '100' }), 201);
    expect((await content(srv.url, token, id)).equals(Buffer.concat([a, b]))).toBe(true);

    // Said once, it holds for the upload's later chunks too, which may leave it out, and a
    // chunk that says another is refused (found from outside: each chunk was held only to its
    // own, and 100 + 300 + 100 bytes were published under a dzchunksize of 100).
    const other = await createShare(srv.url, token, 'chunksize-once.bin');
    const once = randomUUID();
    expectStatus(await send(other, once, 0, 3, randomBytes(100), { dzchunksize: '100' }), 200);
    const longer = await send(other, once, 1, 3, randomBytes(300), {});
    expectFail(longer, 400);
    expect(longer.body.message).toBe(
      'Chunk 1 has 300 bytes, but dzchunksize says every chunk but the last has 100',
    );
    const changed = await send(other, once, 1, 3, randomBytes(50), { dzchunksize: '50' });
    expectFail(changed, 400);
    expect(changed.body.message).toBe(
      'dzchunksize is 50 but earlier chunks of this upload said 100',
    );
    expectStatus(await send(other, once, 1, 3, randomBytes(100), {}), 200);
    expectFail(await send(other, once, 2, 3, randomBytes(101), {}), 400);
    expectStatus(await send(other, once, 2, 3, randomBytes(7), {}), 201);
    expect((await getShare(srv.url, token, other)).size).toBe(207);
  });
});
