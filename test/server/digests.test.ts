// sha256 for every share (issue 8): `sha256` in share info beside `size`, a strong ETag made from
// it and an RFC 9530 Repr-Digest on GET and HEAD (also on 206, since it describes the whole
// representation). Content stored by fshare 0.1 gets its digest computed in the background after
// the upgrade, and 0.1's unfinished uploads can still be finished.
import { randomBytes } from 'node:crypto';
import { cp, mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  allShares,
  content,
  createShare,
  createShareWithContent,
  expectStatus,
  get,
  getShare,
  request,
  sendChunk,
  sendParts,
  sha256hex,
  stalledChunk,
  upload,
  verifyAllContent,
} from '../helpers/http.js';
import { ADMIN, BACKEND, login, startServer, type TestServer } from '../helpers/server.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');
const base64 = (hex: string) => Buffer.from(hex, 'hex').toString('base64');

describe('sha256 of content', () => {
  let srv: TestServer;
  let token: string;
  beforeAll(async () => {
    srv = await startServer();
    token = await login(srv.url, ADMIN.username, ADMIN.password);
  });
  afterAll(() => srv.close());

  it('is null without content, then the digest of exactly the bytes uploaded', async () => {
    const id = await createShare(srv.url, token, 'd.bin');
    expect(await getShare(srv.url, token, id)).toMatchObject({ size: null, sha256: null });
    const data = randomBytes(300_001);
    await upload(srv.url, token, id, data, 5);
    expect(await getShare(srv.url, token, id)).toMatchObject({
      size: data.length,
      sha256: sha256hex(data),
    });
    const listed = (await allShares(srv.url, token)).find((s) => s.share_id === id);
    expect(listed?.sha256).toBe(sha256hex(data));
  });

  // Property: the 201 that completes an upload names what it published, so that its client can
  // prove its own upload even if another replaced it before it could read the share (two
  // `fshare replace` of one share at once: the first was told "the server stored other bytes").
  it('the completing 201 names the size and sha256 it published; a later replacement changes the share, not that answer', async () => {
    const id = await createShare(srv.url, token, 'answered.bin');
    const first = randomBytes(70_000);
    const second = randomBytes(50_000);
    const half = (index: number, data: Buffer) =>
      sendChunk(srv.url, token, id, { dzuuid: 'answer-1', index, total: 2, data });
    const mid = await half(0, first.subarray(0, 40_000));
    expectStatus(mid, 200);
    expect(mid.body).not.toHaveProperty('sha256');
    const done = await half(1, first.subarray(40_000));
    expectStatus(done, 201);
    expect(done.body).toMatchObject({
      status: 'success',
      size: first.length,
      sha256: sha256hex(first),
    });
    const again = await sendChunk(
      srv.url,
      token,
      id,
      { dzuuid: 'answer-2', index: 0, total: 1, data: second },
      'PUT',
    );
    expectStatus(again, 201);
    expect(again.body).toMatchObject({ size: second.length, sha256: sha256hex(second) });
    expect(await getShare(srv.url, token, id)).toMatchObject({
      size: second.length,
      sha256: sha256hex(second),
    });
  });

  // Property: a read-modify-write of content never lands over another's change (additive,
  // docs/API.md). Two `fshare push`es of one set each replaced the manifest they had read, and the
  // last one silently dropped the files the first had pushed and been told were in the set.
  it('a replacement with If-Match replaces only the content it names: 412 with the current ETag, before the body and at completion', async () => {
    const [first, second, third, fourth] = [5000, 6000, 7000, 8000].map((n) => randomBytes(n));
    const id = await createShareWithContent(srv.url, token, 'cond.bin', first!);
    const tag = (data: Buffer) => `"${sha256hex(data)}"`;
    const put = (dzuuid: string, data: Buffer, ifMatch?: string) =>
      sendChunk(
        srv.url,
        token,
        id,
        { dzuuid, index: 0, total: 1, data },
        'PUT',
        ifMatch === undefined ? {} : { 'if-match': ifMatch },
      );
    const holds = async (data: Buffer) =>
      expect((await content(srv.url, token, id)).equals(data)).toBe(true);

    const other = await put('c1', second!, `"${'0'.repeat(64)}"`);
    expectStatus(other, 412);
    expect(other.body).toMatchObject({ status: 'fail' });
    expect(other.headers.etag).toBe(tag(first!));
    await holds(first!);
    expectStatus(await put('c2', second!, tag(first!)), 201);
    await holds(second!);
    const stale = await put('c3', third!, `W/${tag(second!)}, ${tag(first!)}`);
    expectStatus(stale, 412); // a weak tag never matches, nor does an older one
    expect(stale.headers.etag).toBe(tag(second!));
    await holds(second!);
    expectStatus(await put('c4', third!, `"x", ${tag(second!)}`), 201);
    expectStatus(await put('c5', third!, '*'), 201);
    await holds(third!);

    // Another replacement lands while this one's body is on its way: checked again at completion,
    // 412, and the upload is gone (it could never complete).
    const late = await stalledChunk(
      srv.url,
      token,
      id,
      { dzuuid: 'c6', dzchunkindex: 0, dztotalchunks: 1 },
      fourth!,
      1000,
      'PUT',
      undefined,
      { 'if-match': tag(third!) },
    );
    expectStatus(await put('c7', fourth!.subarray(0, 100)), 201);
    const answer = await late.finish();
    expectStatus(answer, 412);
    expect(answer.headers.etag).toBe(tag(fourth!.subarray(0, 100)));
    await holds(fourth!.subarray(0, 100));
    const status = await request(srv.url, 'GET', `/files/${id}/uploads/c6`, { token });
    expect([404, 410]).toContain(status.status);
  });

  it('GET and HEAD send it as the strong ETag and as Repr-Digest, also for a range', async () => {
    const data = randomBytes(10_000);
    const id = await createShareWithContent(srv.url, token, 'h.bin', data, 2);
    const sha = sha256hex(data);
    for (const method of ['GET', 'HEAD']) {
      for (const range of [undefined, 'bytes=10-99']) {
        const res = await request(srv.url, method, `/files/${id}/content`, {
          token,
          headers: range ? { range } : {},
        });
        expectStatus(res, range ? 206 : 200);
        expect(res.headers.etag).toBe(`"${sha}"`);
        expect(res.headers['repr-digest']).toBe(`sha-256=:${base64(sha)}:`);
      }
    }
    // The ETag works as a validator: If-Range with it gives the range.
    const resumed = await get(srv.url, `/files/${id}/content`, {
      token,
      headers: { range: 'bytes=5000-', 'if-range': `"${sha}"` },
    });
    expectStatus(resumed, 206);
    expect(resumed.buf.equals(data.subarray(5000))).toBe(true);
  });

  it('changes with the content, and an empty file has the empty digest', async () => {
    const id = await createShareWithContent(srv.url, token, 'e.bin', Buffer.from('one'));
    await upload(srv.url, token, id, Buffer.alloc(0), 1, 'PUT');
    const empty = sha256hex(Buffer.alloc(0));
    expect(await getShare(srv.url, token, id)).toMatchObject({ size: 0, sha256: empty });
    const res = await get(srv.url, `/files/${id}/content`, { token });
    expect(res.headers.etag).toBe(`"${empty}"`);
  });
});

it('is computed while the bytes arrive: no upload ever needs a second pass', async () => {
  const notices: string[] = [];
  const srv = await startServer({ notice: (line) => notices.push(line) });
  try {
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    const data = randomBytes(1_000_000);
    // In order and out of order, placed and joined, one chunk and many, with a re-send.
    for (const [count, order] of [
      [1, [0]],
      [5, [0, 1, 2, 3, 4]],
      [5, [4, 2, 0, 3, 1]],
      [4, [1, 0, 0, 3, 2]],
    ] as const) {
      for (const placed of [true, false]) {
        const id = await createShare(srv.url, token, 'pass.bin');
        const size = Math.ceil(data.length / count);
        const dzuuid = `u-${count}-${placed}-${order.join('')}`;
        for (const [n, index] of order.entries()) {
          const piece = data.subarray(index * size, (index + 1) * size);
          const fields = [
            { name: 'dzuuid', value: dzuuid },
            { name: 'dzchunkindex', value: String(index) },
            { name: 'dztotalchunks', value: String(count) },
            ...(placed
              ? [
                  { name: 'dzchunkbyteoffset', value: String(index * size) },
                  { name: 'dzchunksize', value: String(size) },
                  { name: 'dztotalfilesize', value: String(data.length) },
                ]
              : []),
          ];
          const res = await sendParts(srv.url, token, id, [
            ...fields,
            { name: 'upload', filename: 'blob', data: piece },
          ]);
          expectStatus(res, n === order.length - 1 ? 201 : 200);
        }
        expect((await getShare(srv.url, token, id)).sha256).toBe(sha256hex(data));
      }
    }
    expect(notices.filter((n) => /recomputed/.test(n))).toEqual([]);
  } finally {
    await srv.close();
  }
});

// The fixtures are fshare 0.1 data directories (db.json, content/, uploads/), which only the
// embedded store and file storage open.
if (BACKEND === 'embedded') {
  describe('a data directory of fshare 0.1', () => {
    for (const fixture of ['v0.1-clean', 'v0.1-crashed']) {
      it(`${fixture}: opens, computes every digest in the background, and finishes 0.1's uploads`, async () => {
        const dataDir = await mkdtemp(join(tmpdir(), `fshare-${fixture}-`));
        await cp(join(FIXTURES, fixture), dataDir, { recursive: true });
        const info = JSON.parse(await readFile(join(FIXTURES, `${fixture}.json`), 'utf8')) as {
          shares: Record<string, string>;
        };
        const srv = await startServer({ dataDir, secret: undefined, notice: () => undefined });
        try {
          const token = await login(srv.url, ADMIN.username, ADMIN.password);
          // The digests of old content appear without anyone asking (a background migration).
          const deadline = Date.now() + 10_000;
          for (;;) {
            const shares = await allShares(srv.url, token);
            if (shares.every((s) => !s.initialized || s.sha256)) break;
            if (Date.now() > deadline) throw new Error('the old content was never digested');
            await new Promise((r) => setTimeout(r, 50));
          }
          const shares = await verifyAllContent(srv.url, token);
          expect(shares.size).toBe(Object.keys(info.shares).length);
          const bytes = (n: number, seed: number) =>
            Buffer.from(Array.from({ length: n }, (_, i) => (i * 31 + seed) & 255));
          expect(
            (await content(srv.url, token, info.shares.placed!)).equals(bytes(300_000, 1)),
          ).toBe(true);
          expect(
            (await content(srv.url, token, info.shares.joined!)).equals(bytes(50_000, 7)),
          ).toBe(true);
          // 0.1's unfinished uploads: chunks 0 and 2 of a placed one, chunk 1 of a loose one.
          const pending = bytes(30_000, 3);
          const alice = await login(srv.url, 'alice', 'alice-pw');
          expectStatus(
            await sendParts(srv.url, alice, info.shares.pendingPlaced!, [
              { name: 'dzuuid', value: 'u-pending-placed' },
              { name: 'dzchunkindex', value: '1' },
              { name: 'dztotalchunks', value: '3' },
              { name: 'dzchunkbyteoffset', value: '10000' },
              { name: 'upload', filename: 'blob', data: pending.subarray(10_000, 20_000) },
            ]),
            201,
          );
          expect((await content(srv.url, token, info.shares.pendingPlaced!)).equals(pending)).toBe(
            true,
          );
          for (const index of [0, 2]) {
            const res = await sendChunk(srv.url, alice, info.shares.pendingLoose!, {
              dzuuid: 'u-pending-loose',
              index,
              total: 3,
              data: pending.subarray(index * 10_000, (index + 1) * 10_000),
            });
            expectStatus(res, index === 2 ? 201 : 200);
          }
          expect((await content(srv.url, token, info.shares.pendingLoose!)).equals(pending)).toBe(
            true,
          );
          await verifyAllContent(srv.url, token);
        } finally {
          await srv.close();
        }
        // Everything, digests included, is there after a restart.
        const again = await startServer({ dataDir });
        try {
          const token = await login(again.url, ADMIN.username, ADMIN.password);
          const shares = await verifyAllContent(again.url, token);
          expect([...shares.values()].every((s) => !s.initialized || s.sha256)).toBe(true);
        } finally {
          await again.close();
        }
      });
    }
  });
}

it('a fresh upload of a share keeps its digest across restarts', async () => {
  const srv = await startServer();
  const token = await login(srv.url, ADMIN.username, ADMIN.password);
  const data = randomBytes(1234);
  const id = await createShareWithContent(srv.url, token, 'r.bin', data);
  await srv.server.close();
  const again = await startServer({ dataDir: srv.dataDir });
  try {
    expect((await getShare(again.url, token, id)).sha256).toBe(sha256hex(data));
    await verifyAllContent(again.url, token);
  } finally {
    await again.close();
  }
});
