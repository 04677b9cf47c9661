// A full disk (issue 8), on a tmpfs of its own: the server refuses uploads with 507 before the
// free space falls under its reserve, so metadata keeps room; when the disk fills anyway, every
// failed request answers 507 JSON, changes nothing and leaves no temporary file; the server keeps
// running and works again by itself once space returns; every acknowledged write survives.
import { randomBytes, randomUUID } from 'node:crypto';
import { open, readdir, rm, statfs } from 'node:fs/promises';
import http from 'node:http';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  allShares,
  content,
  createShare,
  del,
  expectFail,
  expectStatus,
  getShare,
  patch,
  post,
  request,
  sendChunk,
  sendParts,
  verifyAllContent,
  walkFiles,
  type Res,
} from '../helpers/http.js';
import { mountSmallDisk, type SmallDisk } from '../helpers/mount.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const MiB = 1024 * 1024;
const disk: SmallDisk | string = await mountSmallDisk(48);
if (typeof disk === 'string') console.warn(`disk-full tests skipped: ${disk}`);
afterAll(async () => {
  if (typeof disk !== 'string') await disk.unmount();
});

/** Writes zeros until the disk refuses: what another program filling the disk looks like. */
async function fillDisk(path: string, leave = 0): Promise<void> {
  const handle = await open(path, 'w');
  const block = Buffer.alloc(leave > 0 ? 64 * 1024 : 4096);
  try {
    for (;;) {
      if (leave > 0) {
        const fs = await statfs(path);
        if (fs.bavail * fs.bsize <= leave) return;
      }
      await handle.write(block);
    }
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOSPC') throw err;
  } finally {
    await handle.close();
  }
}

/** Files a request may leave only while it runs: staged chunk bodies and unfinished uploads. */
async function leftovers(dataDir: string): Promise<string[]> {
  const files = await walkFiles(join(dataDir, 'uploads'));
  return [
    ...(await readdir(join(dataDir, 'incoming'))),
    ...files.filter((f) => !f.endsWith('/done')),
  ];
}

const upload1 = (url: string, token: string, id: string, data: Buffer) =>
  sendChunk(url, token, id, { dzuuid: randomUUID(), index: 0, total: 1, data });

describe.skipIf(typeof disk === 'string')('a full disk', () => {
  it('uploads stop with 507 at the reserve; deleting makes room; nothing is left behind', async () => {
    const dir = join((disk as SmallDisk).dir, 'reserve');
    const srv = await startServer({ dataDir: dir, minFreeBytes: 16 * MiB });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const stored: string[] = [];
      let refused: Awaited<ReturnType<typeof upload1>> | undefined;
      for (let i = 0; i < 10 && !refused; i++) {
        const id = await createShare(srv.url, token, `big-${i}.bin`);
        const res = await upload1(srv.url, token, id, randomBytes(8 * MiB));
        if (res.status === 201) stored.push(id);
        else refused = res;
      }
      // 48 MiB with 16 MiB kept free: a few fit, then the reserve refuses, before ENOSPC.
      expect(stored.length).toBeGreaterThanOrEqual(2);
      expectFail(refused!, 507);
      expect(refused!.body.message).toMatch(/free space/);
      expect(await leftovers(dir)).toEqual([]);
      // Metadata still has room: creates go on.
      await createShare(srv.url, token, 'small.txt');
      // Deleting a share frees its space, and uploads work again without a restart.
      expectStatus(await del(srv.url, `/files/${stored[0]}`, { token }), 200);
      const again = await createShare(srv.url, token, 'again.bin');
      expectStatus(await upload1(srv.url, token, again, randomBytes(8 * MiB)), 201);
      await verifyAllContent(srv.url, token);
    } finally {
      await srv.close();
    }
  });

  // A file declared whole (dztotalfilesize) that the disk cannot hold used to be taken chunk by
  // chunk until the reserve refused one: the client sent what fit, for nothing. (A chunk placed
  // at index 99,999 of a 6.7 TB file was accepted on a disk with 77 GB free.) Now its first
  // chunk is refused with 507 and the numbers, and nothing of it stays.
  it('a file declared larger than the free space is refused at its first chunk: 507, nothing kept', async () => {
    const dir = join((disk as SmallDisk).dir, 'declared');
    const srv = await startServer({ dataDir: dir, minFreeBytes: 4 * MiB });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'huge.bin');
      const placed = (dzuuid: string, index: number, fileSize: number, data: Buffer) =>
        sendParts(srv.url, token, id, [
          { name: 'dzuuid', value: dzuuid },
          { name: 'dzchunkindex', value: String(index) },
          { name: 'dztotalchunks', value: String(Math.ceil(fileSize / MiB)) },
          { name: 'dzchunksize', value: String(MiB) },
          { name: 'dztotalfilesize', value: String(fileSize) },
          { name: 'dzchunkbyteoffset', value: String(index * MiB) },
          { name: 'upload', filename: 'blob', data },
        ]);
      const huge = randomUUID();
      for (const index of [0, 199, 5]) {
        const res = await placed(huge, index, 200 * MiB, randomBytes(MiB));
        expectFail(res, 507);
        expect(res.body.message).toMatch(
          /^The server has too little free space for this file: it needs 199\.0 MiB more, has [\d.]+ MiB free and keeps 4\.0 MiB free$/,
        );
      }
      expect(await leftovers(dir)).toEqual([]);
      expectStatus(await request(srv.url, 'GET', `/files/${id}/uploads/${huge}`, { token }), 404);
      expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false });
      // A file that fits goes through, chunk by chunk as before.
      const fits = randomUUID();
      const data = randomBytes(2 * MiB);
      expectStatus(await placed(fits, 1, data.length, data.subarray(MiB)), 200);
      expectStatus(await placed(fits, 0, data.length, data.subarray(0, MiB)), 201);
      expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    } finally {
      await srv.close();
    }
  });

  it('ENOSPC while a chunk streams in: 507, the chunk and its upload leave nothing', async () => {
    const dir = join((disk as SmallDisk).dir, 'enospc');
    const filler = join((disk as SmallDisk).dir, 'filler-1');
    const srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'cut.bin');
      const data = randomBytes(4 * MiB);
      for (const layout of [false, true]) {
        // Another program fills the disk while the chunk's body is on its way.
        const res = await slowChunk(srv.url, token, id, data, layout, () => fillDisk(filler));
        expectFail(res, 507);
        expect(res.body.message).toMatch(/out of storage space/);
        expect(await leftovers(dir)).toEqual([]);
        expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false });
        await rm(filler);
      }
      // Space is back: the server takes the same upload without a restart.
      const res = await slowChunk(srv.url, token, id, data, true, async () => undefined);
      expectStatus(res, 201);
      expect((await content(srv.url, token, id)).equals(data)).toBe(true);
      expect(await leftovers(dir)).toEqual([]);
    } finally {
      await rm(filler, { force: true });
      await srv.close();
    }
  });

  it('a share-link download whose count a full disk refuses gets 507 and no byte, and counts nothing', async () => {
    const dir = join((disk as SmallDisk).dir, 'links');
    const filler = join((disk as SmallDisk).dir, 'filler-links');
    let srv: TestServer = await startServer({ dataDir: dir, minFreeBytes: 0 });
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    const id = await createShare(srv.url, token, 'linked.txt');
    expectStatus(await upload1(srv.url, token, id, Buffer.from('linked content')), 201);
    const made = await post(srv.url, `/files/${id}/links`, { token, json: {} });
    expectStatus(made, 201);
    const path = `${new URL(made.body.url).pathname}?download`;
    let served = 0;
    try {
      await fillDisk(filler);
      // Counts are short journal lines: some fit in the journal's last block, then one is refused.
      let refused: Res | undefined;
      for (let i = 0; i < 5000 && !refused; i++) {
        const res = await request(srv.url, 'GET', path, { localAddress: '127.0.0.3' });
        if (res.status === 200) {
          expect(res.text).toBe('linked content');
          served++;
        } else refused = res;
      }
      expectFail(refused!, 507);
      expect(refused!.headers['content-disposition']).toBeUndefined();
      const state = await request(srv.url, 'GET', `/links/${made.body.id}`, { token });
      expect(state.body.downloads).toBe(served);
      // Space returns: the link works again by itself, and counts again.
      await rm(filler);
      const again = await request(srv.url, 'GET', path);
      expectStatus(again, 200);
      served++;
    } finally {
      await rm(filler, { force: true });
      await srv.close(false);
    }
    srv = await startServer({ dataDir: dir });
    try {
      const state = await request(srv.url, 'GET', `/links/${made.body.id}`, { token });
      expect(state.body.downloads).toBe(served);
    } finally {
      await srv.close();
    }
  });

  it('metadata writes refused by a full disk change nothing, before and after a restart', async () => {
    const dir = join((disk as SmallDisk).dir, 'metadata');
    const filler = join((disk as SmallDisk).dir, 'filler-2');
    let srv: TestServer = await startServer({ dataDir: dir, minFreeBytes: 0 });
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    const kept = await createShare(srv.url, token, 'kept.txt');
    expectStatus(await upload1(srv.url, token, kept, Buffer.from('kept content')), 201);
    const acked = new Set<string>([kept]);
    try {
      await fillDisk(filler);
      // The journal's last block has some room left: creates succeed until it is used up.
      let failure;
      for (let i = 0; i < 5000 && !failure; i++) {
        const res = await post(srv.url, '/files', { token, json: { file_name: `f-${i}` } });
        if (res.status === 201) acked.add(res.body.url.slice('/files/'.length));
        else failure = res;
      }
      expectFail(failure!, 507);
      // Nothing of the refused create is visible.
      const before = await allShares(srv.url, token);
      expect(before.map((s) => s.share_id).sort()).toEqual([...acked].sort());
      // Deletes (shorter lines) may fit in what is left of the journal's last block: go on
      // until one is refused too, then every other write is refused the same way.
      for (const id of [...acked].filter((a) => a !== kept)) {
        const res = await del(srv.url, `/files/${id}`, { token });
        if (res.status === 200) {
          acked.delete(id);
          continue;
        }
        expectFail(res, 507);
        break;
      }
      expectFail(await del(srv.url, `/files/${kept}`, { token }), 507);
      const renamed = await patch(srv.url, `/files/${kept}`, {
        token,
        json: { file_name: `renamed-${'x'.repeat(300)}.txt` },
      });
      expectFail(renamed, 507);
      expect(await getShare(srv.url, token, kept)).toMatchObject({ file_name: 'kept.txt' });
      expect((await content(srv.url, token, kept)).toString()).toBe('kept content');
      expect((await allShares(srv.url, token)).map((s) => s.share_id).sort()).toEqual(
        [...acked].sort(),
      );
      // Space returns: the server works again by itself.
      await rm(filler);
      const after = await createShare(srv.url, token, 'after.txt');
      acked.add(after);
    } finally {
      await rm(filler, { force: true });
      await srv.close(false);
    }
    srv = await startServer({ dataDir: dir });
    try {
      const shares = await verifyAllContent(srv.url, token);
      expect([...shares.keys()].sort()).toEqual([...acked].sort());
      expect(shares.get(kept)).toMatchObject({ file_name: 'kept.txt', size: 12 });
    } finally {
      await srv.close();
    }
  });
});

/**
 * Sends one chunk of `data` (the whole file) whose body stops after 1 MiB until `meanwhile` has
 * run; with `layout`, it carries Dropzone's layout fields and is written in place.
 */
async function slowChunk(
  url: string,
  token: string,
  id: string,
  data: Buffer,
  layout: boolean,
  meanwhile: () => Promise<void>,
): Promise<Res> {
  const boundary = `----disk-full-${randomUUID()}`;
  const field = (name: string, value: string | number) =>
    `--${boundary}\r\nContent-Disposition: form-data; name="${name}"\r\n\r\n${value}\r\n`;
  let head = field('dzuuid', randomUUID()) + field('dzchunkindex', 0) + field('dztotalchunks', 1);
  if (layout)
    head +=
      field('dzchunkbyteoffset', 0) +
      field('dzchunksize', data.length) +
      field('dztotalfilesize', data.length);
  head +=
    `--${boundary}\r\nContent-Disposition: form-data; name="upload"; filename="blob"\r\n` +
    `Content-Type: application/octet-stream\r\n\r\n`;
  const body = Buffer.concat([Buffer.from(head), data, Buffer.from(`\r\n--${boundary}--\r\n`)]);
  const target = new URL(`/files/${id}/content`, url);
  return new Promise((resolve, reject) => {
    const req = http.request(
      {
        host: target.hostname,
        port: target.port,
        path: target.pathname,
        method: 'POST',
        agent: false,
        headers: {
          authorization: `Bearer ${token}`,
          'content-type': `multipart/form-data; boundary=${boundary}`,
          'content-length': String(body.length),
        },
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString();
          resolve({
            status: res.statusCode!,
            headers: res.headers,
            rawHeaders: res.rawHeaders,
            buf: Buffer.concat(chunks),
            text,
            body: JSON.parse(text),
          });
        });
      },
    );
    req.on('error', reject);
    const first = head.length + MiB;
    req.write(body.subarray(0, first), () => {
      // Give the server time to write what it has, then fill the disk and send the rest.
      setTimeout(() => {
        meanwhile().then(() => req.end(body.subarray(first)), reject);
      }, 200);
    });
  });
}
