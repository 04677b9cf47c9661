// SIGKILL at chosen points (issue 8), through the FSHARE_FAULT hook of the real binary, then a
// restart on the same data directory. After every crash: each acknowledged write is there, each
// content serves exactly `size` bytes with the recorded sha256, no file is left that nothing
// refers to, and an upload cut by the crash can be finished by sending what was not acknowledged.
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createShareWithContent,
  expectFail,
  expectStatus,
  getShare,
  post,
  request,
  sendParts,
  sha256hex,
  verifyAllContent,
  walkFiles,
  type Res,
} from '../helpers/http.js';
import { serve, stop, type Running, serveRoot } from '../helpers/serve.js';
import { ADMIN, login } from '../helpers/server.js';

const dirIn = serveRoot('crash-points');

/** A data directory with its administrator made, and a token (valid across restarts). */
async function freshDir(name: string): Promise<{ dir: string; token: string }> {
  const dir = dirIn(name);
  const first = await serve(dir);
  const token = await login(first.url, ADMIN.username, ADMIN.password);
  await stop(first);
  return { dir, token };
}

/** Runs `work` against a server armed to die at `point` (the n-th time), and waits for the death. */
async function crashAt(dir: string, point: string, work: (url: string) => Promise<unknown>) {
  const running = await serve(dir, { FSHARE_FAULT: point });
  await work(running.url).catch(() => undefined);
  expect(await running.exited).toMatchObject({ signal: 'SIGKILL' });
}

/** The invariants every restart must show, whatever the crash. */
async function checkIntact(running: Running, dir: string, token: string) {
  const shares = await verifyAllContent(running.url, token);
  const withContent = [...shares.values()].filter((s) => s.initialized).length;
  // Every content file belongs to a share: nothing half-published is left over.
  expect(await readdir(join(dir, 'content'))).toHaveLength(withContent);
  const leftovers = (await walkFiles(join(dir, 'uploads'))).filter((f) =>
    /\/(s\.[0-9a-f]+|j\.[0-9a-f]+|[^/]+\.tmp)$/.test(f),
  );
  expect(leftovers).toEqual([]);
  expect(await readdir(join(dir, 'incoming'))).toEqual([]);
  return shares;
}

const CHUNK = 200_000;
function placed(
  url: string,
  token: string,
  id: string,
  dzuuid: string,
  data: Buffer,
  index: number,
  method: 'POST' | 'PUT' = 'POST',
): Promise<Res> {
  const total = Math.max(1, Math.ceil(data.length / CHUNK));
  return sendParts(
    url,
    token,
    id,
    [
      { name: 'dzuuid', value: dzuuid },
      { name: 'dzchunkindex', value: String(index) },
      { name: 'dztotalchunks', value: String(total) },
      { name: 'dzchunkbyteoffset', value: String(index * CHUNK) },
      { name: 'dzchunksize', value: String(CHUNK) },
      { name: 'dztotalfilesize', value: String(data.length) },
      { name: 'upload', filename: 'blob', data: data.subarray(index * CHUNK, (index + 1) * CHUNK) },
    ],
    method,
  );
}

describe('journal appends', () => {
  it('killed with half a batch written: the torn entry is dropped and said so; acknowledged ones stay', async () => {
    const { dir, token } = await freshDir('mid-write');
    const acked: string[] = [];
    await crashAt(dir, 'journal.mid-write:3', async (url) => {
      for (let i = 0; i < 5; i++) acked.push(await createShare(url, token, `s${i}`));
    });
    expect(acked).toHaveLength(2);
    const running = await serve(dir);
    try {
      const shares = await checkIntact(running, dir, token);
      expect([...shares.keys()].sort()).toEqual([...acked].sort());
      expect(running.stderr()).toMatch(/dropped an unfinished last entry/);
    } finally {
      await stop(running);
    }
  });

  it('killed after the write, before its fsync: acknowledged entries stay, the state is whole', async () => {
    const { dir, token } = await freshDir('before-fsync');
    const acked: string[] = [];
    await crashAt(dir, 'journal.before-fsync:4', async (url) => {
      for (let i = 0; i < 5; i++) acked.push(await createShare(url, token, `s${i}`));
    });
    expect(acked).toHaveLength(3);
    const running = await serve(dir);
    try {
      const ids = [...(await checkIntact(running, dir, token)).keys()];
      for (const id of acked) expect(ids).toContain(id);
      // The unacknowledged one may or may not be there (it reached the page cache); nothing else.
      expect(ids.length - acked.length).toBeLessThanOrEqual(1);
    } finally {
      await stop(running);
    }
  });

  it('killed between folding the journal into db.json and emptying it: nothing twice', async () => {
    const { dir, token } = await freshDir('compact');
    const running = await serve(dir, { FSHARE_FAULT: 'compact.after-rename' });
    const ids: string[] = [];
    for (let i = 0; i < 4; i++) ids.push(await createShare(running.url, token, `c${i}`));
    // A graceful stop folds the journal; the fault kills it right after the rename.
    running.child.kill('SIGTERM');
    expect(await running.exited).toMatchObject({ signal: 'SIGKILL' });
    const again = await serve(dir);
    try {
      const shares = await checkIntact(again, dir, token);
      expect([...shares.keys()].sort()).toEqual([...ids].sort());
    } finally {
      await stop(again);
    }
  });
});

describe('chunks', () => {
  it('killed after a chunk reached the disk but before it was recorded: it must be sent again', async () => {
    const { dir, token } = await freshDir('before-record');
    const data = randomBytes(2 * CHUNK);
    const dzuuid = randomUUID();
    let id = '';
    await crashAt(dir, 'chunk.before-record', async (url) => {
      id = await createShare(url, token, 'two.bin');
      await placed(url, token, id, dzuuid, data, 0);
    });
    const running = await serve(dir);
    try {
      // Chunk 0 was never acknowledged: its upload has no chunk, and is not kept (it would
      // count against the bounds on unfinished uploads).
      expectFail(
        await request(running.url, 'GET', `/files/${id}/uploads/${dzuuid}`, { token }),
        404,
      );
      // Chunk 0 was never acknowledged and is not counted: chunk 1 alone does not complete.
      expectStatus(await placed(running.url, token, id, dzuuid, data, 1), 200);
      expectStatus(await placed(running.url, token, id, dzuuid, data, 0), 201);
      expect((await content(running.url, token, id)).equals(data)).toBe(true);
      await checkIntact(running, dir, token);
    } finally {
      await stop(running);
    }
  });

  it('killed after a chunk was recorded, before the answer: it counts', async () => {
    const { dir, token } = await freshDir('after-record');
    const data = randomBytes(2 * CHUNK);
    const dzuuid = randomUUID();
    let id = '';
    await crashAt(dir, 'chunk.after-record', async (url) => {
      id = await createShare(url, token, 'two.bin');
      await placed(url, token, id, dzuuid, data, 0);
    });
    const running = await serve(dir);
    try {
      expectStatus(await placed(running.url, token, id, dzuuid, data, 1), 201);
      expect((await content(running.url, token, id)).equals(data)).toBe(true);
    } finally {
      await stop(running);
    }
  });

  it('killed while a chunk body is being stored: nothing of it is left or counted', async () => {
    const { dir, token } = await freshDir('mid-body');
    const data = randomBytes(CHUNK + 10);
    let id = '';
    await crashAt(dir, 'chunk.mid-body', async (url) => {
      id = await createShare(url, token, 'loose.bin');
      // No layout fields: the chunk is stored as a file of its own.
      await sendParts(url, token, id, [
        { name: 'dzuuid', value: 'loose' },
        { name: 'dzchunkindex', value: '0' },
        { name: 'dztotalchunks', value: '1' },
        { name: 'upload', filename: 'blob', data },
      ]);
    });
    const running = await serve(dir);
    try {
      expect(await getShare(running.url, token, id)).toMatchObject({ initialized: false });
      await checkIntact(running, dir, token);
    } finally {
      await stop(running);
    }
  });
});

describe('removing a share', () => {
  // Found from outside (a fuzzer killing the server at random): a DELETE killed after its record
  // and before its bytes left the share's unfinished uploads in uploads/ for a day, with their
  // chunks, and its content was then set aside in orphans/ for 30 days as content no share
  // names. Property: what a removal let go goes at the next start, all of it.
  it('killed after the removal was recorded: the next start removes its bytes and its uploads', async () => {
    const { dir, token } = await freshDir('delete');
    const seed = await serve(dir);
    const id = await createShareWithContent(seed.url, token, 'gone.bin', randomBytes(5000));
    const kept = await createShareWithContent(seed.url, token, 'kept.bin', randomBytes(3000));
    const data = randomBytes(3 * CHUNK);
    for (const dzuuid of ['u1', 'u2'])
      expectStatus(await placed(seed.url, token, id, dzuuid, data, 0, 'PUT'), 200);
    const open = async () =>
      (await walkFiles(join(dir, 'uploads'))).filter(
        (f) => f.includes(`/${id}.`) && f.endsWith('/meta'),
      );
    expect(await open()).toHaveLength(2);
    await stop(seed);
    await crashAt(dir, 'delete.after-record', (url) =>
      request(url, 'DELETE', `/files/${id}`, { token }),
    );
    expect((await readdir(join(dir, 'content'))).some((n) => n.startsWith(id))).toBe(true);
    const running = await serve(dir);
    try {
      expectFail(await request(running.url, 'GET', `/files/${id}`, { token }), 404);
      const shares = await checkIntact(running, dir, token);
      expect([...shares.keys()]).toEqual([kept]);
      expect(existsSync(join(dir, 'orphans'))).toBe(false);
      // Its uploads ended: a record each that refuses late chunks, no chunk bytes.
      const left = (await walkFiles(join(dir, 'uploads'))).filter((f) => f.includes(`/${id}.`));
      expect(left.every((f) => f.endsWith('/done'))).toBe(true);
      expect(await open()).toEqual([]);
      expect(await readdir(join(dir, 'removing'))).toEqual([]);
    } finally {
      await stop(running);
    }
  });
});

describe('starting', () => {
  // Property: whatever a killed start leaves, the next start goes on. A start that was the first
  // (no share yet, no content-owner mark) killed while its hard-link probe was linked into
  // content/ left a file named as content: the next start counted it as content at stake and
  // refused to start ("holds 1 stored file"), for a file of its own.
  it('killed while the first start probes for hard links: the next start goes on, the probe gone', async () => {
    const dir = dirIn('start-probe');
    const first = await serve(dir, { FSHARE_FAULT: 'start.probe-linked' }).then(
      async (running) => (await running.exited).signal,
      (err: Error) => (/exited \(SIGKILL\)/.test(err.message) ? 'SIGKILL' : err.message),
    );
    expect(first).toBe('SIGKILL');
    expect(await readdir(join(dir, 'content'))).toHaveLength(1);
    const running = await serve(dir);
    try {
      expect(await readdir(join(dir, 'content'))).toEqual([]);
      expect(await readdir(join(dir, 'incoming'))).toEqual([]);
      const token = await login(running.url, ADMIN.username, ADMIN.password);
      const id = await createShareWithContent(running.url, token, 'after.bin', randomBytes(1000));
      expect((await getShare(running.url, token, id)).initialized).toBe(true);
    } finally {
      await stop(running);
    }
  });
});

describe('completing an upload', () => {
  it('killed after the new content was linked, before it was recorded: old content, no orphan; resend completes', async () => {
    const { dir, token } = await freshDir('after-link');
    const old = Buffer.from('the old content');
    const fresh = randomBytes(3 * CHUNK - 7);
    const dzuuid = randomUUID();
    let id = '';
    await crashAt(dir, 'complete.after-link', async (url) => {
      id = await createShareWithContent(url, token, 'r.bin', old).catch(() => '');
      // The first completion (the old content) already hit the fault point; make it the second.
      throw new Error('unreachable');
    });
    // The single-chunk upload of the old content was the first completion: it crashed there.
    let running = await serve(dir);
    try {
      const shares = await checkIntact(running, dir, token);
      expect([...shares.values()].every((s) => !s.initialized)).toBe(true);
      id = [...shares.keys()][0]!;
      expectStatus(
        await sendParts(running.url, token, id, [
          { name: 'dzuuid', value: 'again' },
          { name: 'dzchunkindex', value: '0' },
          { name: 'dztotalchunks', value: '1' },
          { name: 'upload', filename: 'blob', data: old },
        ]),
        201,
      );
    } finally {
      await stop(running);
    }
    // Now a replacement, killed at the same point: the old content is still served.
    await crashAt(dir, 'complete.after-link', async (url) => {
      for (let i = 0; i < 3; i++) await placed(url, token, id, dzuuid, fresh, i, 'PUT');
    });
    running = await serve(dir);
    try {
      expect((await content(running.url, token, id)).equals(old)).toBe(true);
      await checkIntact(running, dir, token);
      // Its link in content/ went: the upload keeps its bytes, and nothing is set aside.
      expect(existsSync(join(dir, 'orphans'))).toBe(false);
      // The client never got its 201: it sends the last chunk again, and the upload completes.
      expectStatus(await placed(running.url, token, id, dzuuid, fresh, 2, 'PUT'), 201);
      expect((await content(running.url, token, id)).equals(fresh)).toBe(true);
      expect((await getShare(running.url, token, id)).sha256).toBe(sha256hex(fresh));
      await checkIntact(running, dir, token);
    } finally {
      await stop(running);
    }
  });

  for (const point of ['complete.after-publish', 'complete.after-tombstone']) {
    it(`killed at ${point}: the new content is whole and the old one is gone`, async () => {
      const { dir, token } = await freshDir(point);
      const seed = await serve(dir);
      const old = randomBytes(1000);
      const id = await createShareWithContent(seed.url, token, 'p.bin', old);
      await stop(seed);
      const fresh = randomBytes(2 * CHUNK + 5);
      const dzuuid = randomUUID();
      await crashAt(dir, point, async (url) => {
        for (let i = 0; i < 3; i++) await placed(url, token, id, dzuuid, fresh, i, 'PUT');
      });
      const running = await serve(dir);
      try {
        expect((await content(running.url, token, id)).equals(fresh)).toBe(true);
        await checkIntact(running, dir, token);
        // The old bytes were let go before the record changed: removed, not set aside.
        expect(existsSync(join(dir, 'orphans'))).toBe(false);
        // The upload is over: a late copy of its last chunk is refused.
        expectFail(await placed(running.url, token, id, dzuuid, fresh, 2, 'PUT'), 409);
        expect((await content(running.url, token, id)).equals(fresh)).toBe(true);
      } finally {
        await stop(running);
      }
    });
  }
});

it('a create is answered only after it is durable (group commit under concurrency)', async () => {
  const { dir, token } = await freshDir('concurrent');
  const acked: string[] = [];
  await crashAt(dir, 'journal.before-fsync:2', async (url) => {
    await Promise.all(
      Array.from({ length: 40 }, (_, i) =>
        post(url, '/files', { token, json: { file_name: `p${i}` } }).then((res) => {
          if (res.status === 201) acked.push(res.body.url.slice('/files/'.length));
        }),
      ),
    );
  });
  const running = await serve(dir);
  try {
    const ids = [...(await checkIntact(running, dir, token)).keys()];
    expect(acked.length).toBeGreaterThan(0);
    for (const id of acked) expect(ids).toContain(id);
  } finally {
    await stop(running);
  }
});
