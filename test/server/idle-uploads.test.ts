// API.md: "Uploads idle for 24 h are removed." The sweep runs at start (and hourly); here the
// upload's directory is aged on disk between two starts, so no clock is mocked. A swept upload
// keeps a record for 48 h so that its late chunks are refused (409), never silently restarted.
import { randomBytes, randomUUID } from 'node:crypto';
import { readdir, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import {
  ADMIN,
  BACKEND,
  login,
  startServer,
  storedUploads,
  type TestServer,
} from '../helpers/server.js';
import {
  createShare,
  expectFail,
  expectStatus,
  getShare,
  sendChunk,
  split,
} from '../helpers/http.js';

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close().catch(() => undefined);
});

// The upload is aged by setting the mtimes of its files in uploads/: the file storage's layout.
// The S3 storage measures idleness by its objects' LastModified, which the bucket sets and no
// clock a server is given moves, so there the limit is made short instead (below).
if (BACKEND === 'embedded') {
  it('an upload idle for more than 24 h is removed at the next start; a fresh one is kept', async () => {
    const first = await startServer();
    servers.push(first);
    const token = await login(first.url, ADMIN.username, ADMIN.password);
    const data = randomBytes(4000);
    const [c0, c1] = split(data, 2);
    const stale = { id: await createShare(first.url, token, 'stale.bin'), dzuuid: randomUUID() };
    const fresh = { id: await createShare(first.url, token, 'fresh.bin'), dzuuid: randomUUID() };
    for (const u of [stale, fresh]) {
      expectStatus(
        await sendChunk(first.url, token, u.id, { ...u, index: 0, total: 2, data: c0! }),
        200,
      );
    }
    await first.server.close();

    const uploads = join(first.dataDir, 'uploads');
    const dirs = await readdir(uploads);
    expect(dirs).toHaveLength(2);
    const old = new Date(Date.now() - 25 * 3600 * 1000);
    const staleDir = dirs.find((d) => d.startsWith(stale.id))!;
    for (const name of await readdir(join(uploads, staleDir)))
      await utimes(join(uploads, staleDir, name), old, old);
    await utimes(join(uploads, staleDir), old, old);

    const second = await startServer({ dataDir: first.dataDir });
    servers.push(second);
    // The stale upload's chunks are gone; only the record that it was swept is left.
    expect(await readdir(uploads)).toHaveLength(2);
    expect(await readdir(join(uploads, staleDir))).toEqual(['done']);
    // The fresh upload completes; a late chunk of the swept one is refused and stores nothing.
    expectStatus(
      await sendChunk(second.url, token, fresh.id, { ...fresh, index: 1, total: 2, data: c1! }),
      201,
    );
    expectFail(
      await sendChunk(second.url, token, stale.id, { ...stale, index: 1, total: 2, data: c1! }),
      409,
    );
    expect(await readdir(join(uploads, staleDir))).toEqual(['done']);
    expect(await getShare(second.url, token, stale.id)).toMatchObject({ initialized: false });
  });
}

// S3: the same sweep at start, with a limit of 3 s and a stale upload made 5 s (real time) before.
if (BACKEND !== 'embedded') {
  it('an upload idle for longer than the limit is removed at the next start; a fresh one is kept', async () => {
    const first = await startServer();
    servers.push(first);
    const token = await login(first.url, ADMIN.username, ADMIN.password);
    const data = randomBytes(4000);
    const [c0, c1] = split(data, 2);
    const stale = { id: await createShare(first.url, token, 'stale.bin'), dzuuid: randomUUID() };
    const fresh = { id: await createShare(first.url, token, 'fresh.bin'), dzuuid: randomUUID() };
    const start = (u: typeof stale) =>
      sendChunk(first.url, token, u.id, { ...u, index: 0, total: 2, data: c0! });
    expectStatus(await start(stale), 200);
    await new Promise((r) => setTimeout(r, 5000));
    expectStatus(await start(fresh), 200);
    await first.server.close();
    expect(await storedUploads(first, stale.id)).toHaveLength(1);

    const second = await startServer({ dataDir: first.dataDir, limits: { uploadIdleMs: 3000 } });
    servers.push(second);
    // The stale upload's chunks are gone; the fresh one's are kept.
    expect(await storedUploads(second, stale.id)).toEqual([]);
    expect(await storedUploads(second, fresh.id)).toHaveLength(1);
    // The fresh upload completes; a late chunk of the swept one is refused and stores nothing.
    expectStatus(
      await sendChunk(second.url, token, fresh.id, { ...fresh, index: 1, total: 2, data: c1! }),
      201,
    );
    expectFail(
      await sendChunk(second.url, token, stale.id, { ...stale, index: 1, total: 2, data: c1! }),
      409,
    );
    expect(await storedUploads(second, stale.id)).toEqual([]);
    expect(await getShare(second.url, token, stale.id)).toMatchObject({ initialized: false });
  });
}
