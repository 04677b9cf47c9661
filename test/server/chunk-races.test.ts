// Chunks that race, stall, repeat or lie (issue 8). The promise: every chunk is written into its
// upload's own staging area under that upload's lock; once an upload has completed (or been
// superseded, swept, or failed its digest) a late chunk of it is refused with 409 and changes
// nothing; the bytes of a refused chunk never reach content; content changes only by a whole,
// fsynced file taking its place, and its sha256 always matches its bytes.
import { randomBytes, randomUUID } from 'node:crypto';
import { readdir, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FshareServer } from '../../src/server/index.js';
import {
  content,
  createShare,
  createShareWithContent,
  createUser,
  expectFail,
  expectStatus,
  get,
  getShare,
  patch,
  post,
  sendChunk,
  sendParts,
  sha256hex,
  stalledChunk,
  verifyAllContent,
  walkFiles,
  type Part,
  type Res,
  until,
} from '../helpers/http.js';
import {
  ADMIN,
  BACKEND,
  incomingFiles,
  login,
  loseLockAt,
  startServer,
  startSibling,
  storedContent,
  storedUploads,
  type TestServer,
} from '../helpers/server.js';

const MiB = 1024 * 1024;
let srv: TestServer;
let token: string;
beforeAll(async () => {
  srv = await startServer();
  token = await login(srv.url, ADMIN.username, ADMIN.password);
});
afterAll(() => srv.close());

/** Dropzone's fields for chunk `index` of a file of `fileSize` bytes cut at `chunkSize`. */
function placedFields(dzuuid: string, index: number, chunkSize: number, fileSize: number) {
  return {
    dzuuid,
    dzchunkindex: index,
    dztotalchunks: Math.max(1, Math.ceil(fileSize / chunkSize)),
    dzchunkbyteoffset: index * chunkSize,
    dzchunksize: chunkSize,
    dztotalfilesize: fileSize,
  };
}

function partsOf(
  fields: Record<string, string | number>,
  data: Buffer,
  extra: Part[] = [],
): Part[] {
  return [
    ...Object.entries(fields).map(([name, value]) => ({ name, value: String(value) })),
    { name: 'upload', filename: 'blob', data },
    ...extra,
  ];
}

function sendPlaced(
  id: string,
  dzuuid: string,
  data: Buffer,
  index: number,
  chunkSize: number,
  method: 'POST' | 'PUT' = 'POST',
  piece = data.subarray(index * chunkSize, (index + 1) * chunkSize),
) {
  const fields = placedFields(dzuuid, index, chunkSize, data.length);
  return sendParts(srv.url, token, id, partsOf(fields, piece), method);
}

/**
 * Whether some bytes of chunk 1 (of `chunkSize` bytes) of share `id`, still arriving, are on
 * disk: past chunk 0's place in its upload's data file (files: a placed chunk is written in
 * place), or in the temp file of an incoming chunk (S3; with two servers, on either server).
 */
async function arriving(id: string, chunkSize: number): Promise<boolean> {
  if (BACKEND === 'embedded') {
    const dirs = await readdir(join(srv.dataDir, 'uploads'));
    const dir = dirs.find((d) => d.startsWith(id));
    const info = dir && (await stat(join(srv.dataDir, 'uploads', dir, 'data')).catch(() => null));
    return Boolean(info && info.size > chunkSize);
  }
  return someBytesIn(await incomingFiles(srv));
}

describe('a placed chunk that stalls', () => {
  it('cannot change content after the upload completed: it is stopped, then refused with 409', async () => {
    const id = await createShare(srv.url, token, 'stalled.bin');
    const chunkSize = 3 * MiB;
    const data = randomBytes(3 * chunkSize);
    const dzuuid = randomUUID();
    // A first copy of chunk 1, with other bytes, stalls after 2 MiB: some of it is on disk.
    const evil = randomBytes(chunkSize);
    const stalled = await stalledChunk(
      srv.url,
      token,
      id,
      placedFields(dzuuid, 1, chunkSize, data.length),
      evil,
      2 * MiB,
    );
    await until(() => arriving(id, chunkSize), 'the stalled chunk to reach the disk', 20);
    // The client gives up on it and sends every chunk again; the upload completes.
    expectStatus(await sendPlaced(id, dzuuid, data, 0, chunkSize), 200);
    expectStatus(await sendPlaced(id, dzuuid, data, 2, chunkSize), 200);
    expectStatus(await sendPlaced(id, dzuuid, data, 1, chunkSize), 201);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    expectStatus(await post(srv.url, `/files/${id}/lock`, { token }), 200);
    // The stalled copy now sends the rest of its bytes: refused, and the content is unchanged.
    const late = await stalled.finish();
    expectFail(late, 409);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    const share = await getShare(srv.url, token, id);
    expect(share).toMatchObject({ size: data.length, sha256: sha256hex(data), locked: true });
  });

  it('a copy cut off mid-body leaves its region unclaimed; the re-sent chunk completes it', async () => {
    const id = await createShare(srv.url, token, 'cut.bin');
    const chunkSize = 2 * MiB;
    const data = randomBytes(2 * chunkSize);
    const dzuuid = randomUUID();
    const cut = await stalledChunk(
      srv.url,
      token,
      id,
      placedFields(dzuuid, 0, chunkSize, data.length),
      randomBytes(chunkSize),
      1.5 * MiB,
    );
    cut.abort();
    await cut.response.catch(() => undefined);
    expectStatus(await sendPlaced(id, dzuuid, data, 1, chunkSize), 200);
    expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false });
    expectStatus(await sendPlaced(id, dzuuid, data, 0, chunkSize), 201);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
  });
});

/** Whether some bytes of a chunk without layout fields are arriving for share `id`. */
async function stagingBytes(id: string): Promise<boolean> {
  return someBytesIn(
    BACKEND === 'embedded'
      ? (await walkFiles(join(srv.dataDir, 'uploads'))).filter(
          (f) => f.includes(`/${id}.`) && /\/s\.[0-9a-f]+$/.test(f),
        )
      : await incomingFiles(srv),
  );
}

/** Whether any of these files (one gone counts as empty) holds a byte. */
async function someBytesIn(files: string[]): Promise<boolean> {
  const sizes = await Promise.all(
    files.map((f) =>
      stat(f).then(
        (s) => s.size,
        () => 0,
      ),
    ),
  );
  return sizes.some((size) => size > 0);
}

describe('a chunk without layout fields that stalls', () => {
  // Found from outside: a copy of a chunk (no dzchunkbyteoffset, as the reference's clients
  // send) that stalled while the client sent it again got 200 when it finally arrived, and its
  // bytes replaced the acknowledged copy: the upload completed with the stalled bytes. docs/API.md
  // says the copy stored first wins and the late one gets 409.
  it('arriving after a re-sent copy was stored: 409, and the acknowledged copy is the content', async () => {
    const id = await createShare(srv.url, token, 'late-copy.bin');
    const dzuuid = randomUUID();
    const first = randomBytes(3 * MiB);
    const evil = randomBytes(first.length);
    const last = randomBytes(50);
    const fields = { dzuuid, dzchunkindex: 0, dztotalchunks: 2 };
    const stalled = await stalledChunk(srv.url, token, id, fields, evil, 2 * MiB);
    await until(() => stagingBytes(id), 'the stalled copy to reach the server', 20);
    expectStatus(
      await sendChunk(srv.url, token, id, { dzuuid, index: 0, total: 2, data: first }),
      200,
    );
    expectFail(await stalled.finish(), 409);
    expectStatus(
      await sendChunk(srv.url, token, id, { dzuuid, index: 1, total: 2, data: last }),
      201,
    );
    const stored = Buffer.concat([first, last]);
    expect((await content(srv.url, token, id)).equals(stored)).toBe(true);
    expect((await getShare(srv.url, token, id)).sha256).toBe(sha256hex(stored));
  });

  // docs/API.md: with S3, a late copy whose bytes are those stored is taken, since it changes
  // nothing. Found from outside: two copies with the same bytes at once through two servers, one
  // got 409 (the check compared with what was stored when the late copy began, not its bytes).
  it('arriving after a re-sent copy of the same bytes: taken with S3 (409 in a data directory)', async () => {
    const id = await createShare(srv.url, token, 'same-copy.bin');
    const dzuuid = randomUUID();
    const first = randomBytes(3 * MiB);
    const last = randomBytes(50);
    const fields = { dzuuid, dzchunkindex: 0, dztotalchunks: 2 };
    const stalled = await stalledChunk(srv.url, token, id, fields, first, 2 * MiB);
    await until(() => stagingBytes(id), 'the stalled copy to reach the server', 20);
    expectStatus(
      await sendChunk(srv.url, token, id, { dzuuid, index: 0, total: 2, data: first }),
      200,
    );
    const late = await stalled.finish();
    if (BACKEND === 'embedded') expectFail(late, 409);
    else expectStatus(late, 200);
    expectStatus(
      await sendChunk(srv.url, token, id, { dzuuid, index: 1, total: 2, data: last }),
      201,
    );
    expect((await content(srv.url, token, id)).equals(Buffer.concat([first, last]))).toBe(true);
  });

  it('a copy that began after the first was stored replaces it (a client sending it again)', async () => {
    const id = await createShare(srv.url, token, 'again.bin');
    const dzuuid = randomUUID();
    const send = (index: number, data: Buffer) =>
      sendChunk(srv.url, token, id, { dzuuid, index, total: 2, data });
    expectStatus(await send(0, Buffer.from('old-')), 200);
    expectStatus(await send(0, Buffer.from('new-')), 200);
    expectStatus(await send(1, Buffer.from('end')), 201);
    expect((await content(srv.url, token, id)).toString()).toBe('new-end');
  });
});

describe('late and refused chunks', () => {
  it('a chunk of a replacement that already completed gets 409 and changes nothing', async () => {
    const id = await createShareWithContent(srv.url, token, 'late.txt', Buffer.from('first'));
    const dzuuid = randomUUID();
    const put = (index: number, text: string) =>
      sendChunk(srv.url, token, id, { dzuuid, index, total: 2, data: Buffer.from(text) }, 'PUT');
    expectStatus(await put(0, 'sec'), 200);
    expectStatus(await put(1, 'ond'), 201);
    expect((await content(srv.url, token, id)).toString()).toBe('second');
    // Only the new content is left on disk: the old one went with the replacement.
    expect(await storedContent(srv, id)).toHaveLength(1);
    // A delayed copy of either chunk arrives after the completion.
    expectFail(await put(1, 'XXX'), 409);
    expectFail(await put(0, 'YYY'), 409);
    expect((await content(srv.url, token, id)).toString()).toBe('second');
  });

  it('the bytes of a chunk answered with 400 never reach content', async () => {
    const id = await createShare(srv.url, token, 'refused.bin');
    const chunkSize = 64 * 1024;
    const data = randomBytes(3 * chunkSize);
    const dzuuid = randomUUID();
    expectStatus(await sendPlaced(id, dzuuid, data, 0, chunkSize), 200);
    // A copy of chunk 0 with other bytes whose request turns out bad after its data.
    const garbage = randomBytes(chunkSize);
    const bad = await sendParts(
      srv.url,
      token,
      id,
      partsOf(placedFields(dzuuid, 0, chunkSize, data.length), garbage, [
        { name: 'dzchunkindex', value: '0' }, // a second value: the fields are not valid
      ]),
    );
    expectFail(bad, 400);
    // A chunk longer than its place, and one whose offset lies.
    const long = Buffer.concat([garbage, Buffer.from('more')]);
    expectFail(
      await sendParts(
        srv.url,
        token,
        id,
        partsOf(placedFields(dzuuid, 1, chunkSize, data.length), long),
      ),
      400,
    );
    const lying = { ...placedFields(dzuuid, 2, chunkSize, data.length), dzchunkbyteoffset: 0 };
    expectFail(await sendParts(srv.url, token, id, partsOf(lying, garbage)), 400);
    expectStatus(await sendPlaced(id, dzuuid, data, 1, chunkSize), 200);
    expectStatus(await sendPlaced(id, dzuuid, data, 2, chunkSize), 201);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    expect((await getShare(srv.url, token, id)).sha256).toBe(sha256hex(data));
  });

  it("a refused first chunk leaves no upload behind, so it cannot fix the upload's total", async () => {
    const id = await createShare(srv.url, token, 'first.txt');
    const dzuuid = randomUUID();
    const bad = await sendParts(srv.url, token, id, [
      { name: 'dzuuid', value: dzuuid },
      { name: 'dzchunkindex', value: '0' },
      { name: 'dztotalchunks', value: '5' },
      { name: 'upload', filename: 'blob', data: Buffer.from('x') },
      { name: 'dztotalchunks', value: '5' },
    ]);
    expectFail(bad, 400);
    expect(await storedUploads(srv, id)).toEqual([]);
    expectStatus(
      await sendChunk(srv.url, token, id, { dzuuid, index: 0, total: 1, data: Buffer.from('ok') }),
      201,
    );
  });
});

describe('re-sent chunks with other bytes', () => {
  for (const placed of [true, false]) {
    it(`${placed ? 'placed' : 'joined'}: the last copy wins and the sha256 is of the bytes stored`, async () => {
      const id = await createShare(srv.url, token, 'resent.bin');
      const chunkSize = 100_000;
      const final = randomBytes(3 * chunkSize);
      const dzuuid = randomUUID();
      const send = (index: number, piece: Buffer) =>
        placed
          ? sendPlaced(id, dzuuid, final, index, chunkSize, 'POST', piece)
          : sendChunk(srv.url, token, id, { dzuuid, index, total: 3, data: piece });
      const piece = (i: number) => final.subarray(i * chunkSize, (i + 1) * chunkSize);
      // Chunk 0 is stored (and hashed) with other bytes, then replaced; chunk 1 likewise.
      expectStatus(await send(0, randomBytes(chunkSize)), 200);
      expectStatus(await send(1, randomBytes(chunkSize)), 200);
      expectStatus(await send(0, piece(0)), 200);
      expectStatus(await send(1, piece(1)), 200);
      expectStatus(await send(1, piece(1)), 200); // an identical copy changes nothing
      expectStatus(await send(2, piece(2)), 201);
      expect((await content(srv.url, token, id)).equals(final)).toBe(true);
      expect((await getShare(srv.url, token, id)).sha256).toBe(sha256hex(final));
    });
  }

  it('every chunk sent twice at once: one 201, the others 200 or 409, the bytes exact', async () => {
    const id = await createShare(srv.url, token, 'twice.bin');
    const chunkSize = 256 * 1024;
    const data = randomBytes(12 * chunkSize + 1234);
    const dzuuid = randomUUID();
    const results = await Promise.all(
      Array.from({ length: 13 }, (_, i) => [i, i])
        .flat()
        .map((i) => sendPlaced(id, dzuuid, data, i, chunkSize)),
    );
    const statuses = results.map((r) => r.status);
    expect(statuses.filter((s) => s === 201)).toHaveLength(1);
    expect(statuses.every((s) => s === 200 || s === 201 || s === 409)).toBe(true);
    expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    await verifyAllContent(srv.url, token);
  });
});

describe('dzsha256', () => {
  it('a matching digest completes; a wrong one is 422, the content stays, the upload is over', async () => {
    const id = await createShareWithContent(srv.url, token, 'digest.bin', Buffer.from('old'));
    const data = randomBytes(50_000);
    const good = sha256hex(data);
    const dzuuid = randomUUID();
    const put = (index: number, sha: string) =>
      sendParts(
        srv.url,
        token,
        id,
        [
          { name: 'dzuuid', value: dzuuid },
          { name: 'dzchunkindex', value: String(index) },
          { name: 'dztotalchunks', value: '2' },
          { name: 'dzsha256', value: sha },
          {
            name: 'upload',
            filename: 'blob',
            data: data.subarray(index * 25_000, (index + 1) * 25_000),
          },
        ],
        'PUT',
      );
    const wrong = sha256hex(Buffer.from('something else'));
    expectStatus(await put(0, wrong), 200);
    // Another digest for the same upload: refused.
    expectFail(await put(1, good), 400);
    const mismatch = await put(1, wrong);
    expectFail(mismatch, 422);
    expect(mismatch.body.message).toContain(good);
    expect((await content(srv.url, token, id)).toString()).toBe('old');
    // The upload was dropped: its chunks are gone and a late one is refused.
    expect(await storedUploads(srv, id)).toEqual([]);
    expectFail(await put(0, wrong), 409);
    // A new upload with the right digest goes through.
    const again = randomUUID();
    const ok = await sendParts(
      srv.url,
      token,
      id,
      [
        { name: 'dzuuid', value: again },
        { name: 'dzchunkindex', value: '0' },
        { name: 'dztotalchunks', value: '1' },
        { name: 'dzsha256', value: good.toUpperCase() },
        { name: 'upload', filename: 'blob', data },
      ],
      'PUT',
    );
    expectStatus(ok, 201);
    expect(await getShare(srv.url, token, id)).toMatchObject({ sha256: good, size: data.length });
  });

  it('a malformed dzsha256 is a 400 before anything is stored', async () => {
    const id = await createShare(srv.url, token, 'bad-digest.bin');
    const res = await sendParts(srv.url, token, id, [
      { name: 'dzuuid', value: randomUUID() },
      { name: 'dzchunkindex', value: '0' },
      { name: 'dztotalchunks', value: '1' },
      { name: 'dzsha256', value: 'not-hex' },
      { name: 'upload', filename: 'blob', data: Buffer.from('x') },
    ]);
    expectFail(res, 400);
    expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false });
  });
});

// Records of the file storage in uploads/<dir>/, written here; in S3 a record is one object,
// written whole or not at all by its PUT, so a crash cannot leave one cut short.
if (BACKEND === 'embedded') {
  describe('upload records cut short by a crash', () => {
    for (const [name, file, text] of [
      ['an empty meta', 'meta', ''],
      ['a meta cut in half', 'meta', '{"v":2,"total":'],
      ['an empty total (fshare 0.1)', 'total', ''],
    ] as const) {
      it(`${name} counts as no upload: the client can start it again at once`, async () => {
        const own = await startServer();
        try {
          const t = await login(own.url, ADMIN.username, ADMIN.password);
          const id = await createShare(own.url, t, 'wedge.txt');
          const dzuuid = randomUUID();
          expectStatus(
            await sendChunk(own.url, t, id, { dzuuid, index: 0, total: 2, data: Buffer.from('a') }),
            200,
          );
          await own.server.close();
          const dirs = (await readdir(join(own.dataDir, 'uploads'))).filter((d) =>
            d.startsWith(id),
          );
          const dir = join(own.dataDir, 'uploads', dirs[0]!);
          if (file === 'total') {
            // What fshare 0.1 left: a total file (here empty) and the chunk, no meta.
            await writeFile(join(dir, 'meta'), '');
            await writeFile(join(dir, 'total'), text);
          } else await writeFile(join(dir, file), text);
          const again = await startServer({ dataDir: own.dataDir });
          try {
            // Any total is accepted: the broken record is not held against the upload.
            expectStatus(
              await sendChunk(again.url, t, id, {
                dzuuid,
                index: 0,
                total: 3,
                data: Buffer.from('x'),
              }),
              200,
            );
            expectStatus(
              await sendChunk(again.url, t, id, {
                dzuuid,
                index: 1,
                total: 3,
                data: Buffer.from('y'),
              }),
              200,
            );
            expectStatus(
              await sendChunk(again.url, t, id, {
                dzuuid,
                index: 2,
                total: 3,
                data: Buffer.from('z'),
              }),
              201,
            );
            expect((await content(again.url, t, id)).toString()).toBe('xyz');
          } finally {
            await again.close();
          }
        } finally {
          await own.close().catch(() => undefined);
        }
      });
    }
  });
}

// PostgreSQL only: a share's lock is a PostgreSQL advisory lock held by one connection, which
// PostgreSQL releases at once when that connection ends (an operator's pg_terminate_backend, a
// pooler, a network cut, a restart). Found from outside (two `fshare serve` on one database): a
// replace held where it publishes, its lock's backend terminated, then the share LOCKed through
// the other server (200), and the replace still published its content (201) into the locked
// share; two uploads of 6,000 bytes under a quota of 10,000 both published (used 12,000). The
// embedded store's locks live in its one process and cannot be lost.
if (BACKEND !== 'embedded') {
  describe('a share lock lost in PostgreSQL', () => {
    let own: TestServer;
    let other: FshareServer;
    let otherUrl: string;
    let t: string;
    let db: Client;
    beforeAll(async () => {
      own = await startServer();
      // Another server on the same database and bucket (`own.direct` is the first of its own).
      ({ server: other, url: otherUrl } = await startSibling(own, 'lost-lock'));
      t = await login(own.direct, ADMIN.username, ADMIN.password);
      db = new Client({ connectionString: own.database });
      await db.connect();
    });
    afterAll(async () => {
      await db?.end();
      await other?.close();
      await own?.close();
    });

    /**
     * Sends `upload` (to the first server) and holds it where its new content is checked under
     * the share's lock, before the record names it; there terminates the connection holding the
     * lock, runs `meanwhile`, and lets the upload go on. Returns the upload's answer.
     */
    const loseLockWhilePublishing = (upload: () => Promise<Res>, meanwhile: () => Promise<void>) =>
      loseLockAt(db, 'publish.before-record', upload, meanwhile);

    it('a task whose PostgreSQL lock was lost commits nothing: a replace answers 503 and the share locked meanwhile keeps its content', async () => {
      const before = randomBytes(1000);
      const id = await createShareWithContent(own.direct, t, 'kept.bin', before);
      const res = await loseLockWhilePublishing(
        () =>
          sendChunk(
            own.direct,
            t,
            id,
            { dzuuid: randomUUID(), index: 0, total: 1, data: randomBytes(3000) },
            'PUT',
          ),
        // The other server takes the lock the first one lost: LOCK answers 200.
        async () => expectStatus(await post(otherUrl, `/files/${id}/lock`, { token: t }), 200),
      );
      expectFail(res, 503);
      expect(await getShare(otherUrl, t, id)).toMatchObject({
        locked: true,
        size: 1000,
        sha256: sha256hex(before),
      });
      expect((await content(otherUrl, t, id)).equals(before)).toBe(true);
    });

    it('a task whose PostgreSQL lock was lost commits nothing: two uploads under one quota never both publish', async () => {
      const user = await createUser(own.direct, t, ['CREATE', 'READ', 'LIST']);
      expectStatus(
        await patch(own.direct, `/users/${user.username}`, { token: t, json: { quota: 10_000 } }),
        200,
      );
      const [first, second] = [
        await createShare(own.direct, user.token, 'first.bin'),
        await createShare(own.direct, user.token, 'second.bin'),
      ];
      const chunk = () => ({ dzuuid: randomUUID(), index: 0, total: 1, data: randomBytes(6000) });
      const res = await loseLockWhilePublishing(
        () => sendChunk(own.direct, user.token, first, chunk()),
        // The other server takes the user's quota lock the first one lost: room for 6,000 bytes.
        async () => expectStatus(await sendChunk(otherUrl, user.token, second, chunk()), 201),
      );
      expectFail(res, 503);
      expect(await getShare(otherUrl, t, first)).toMatchObject({ initialized: false });
      const used = await get(otherUrl, `/users/${user.username}`, { token: t });
      expect(used.body).toMatchObject({ quota: 10_000, used: 6000 });
    });
  });
}
