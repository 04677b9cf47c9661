// A full disk (issue 8), on a tmpfs of its own: the server refuses uploads with 507 before the
// free space falls under its reserve, so metadata keeps room; when the disk fills anyway, every
// failed request answers 507 JSON, changes nothing and leaves no temporary file; the server keeps
// running and works again by itself once space returns; every acknowledged write survives.
import { randomBytes, randomUUID } from 'node:crypto';
import {
  appendFile,
  mkdir,
  open,
  readdir,
  readFile,
  rm,
  stat,
  statfs,
  writeFile,
} from 'node:fs/promises';
import http from 'node:http';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  allShares,
  chunkMultipart,
  content,
  createShare,
  createUser,
  del,
  expectFail,
  expectStatus,
  get,
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
      // With the figures, as for a file declared whole (it said only the reserve, in bytes).
      expect(refused!.body.message).toMatch(
        /^The server has too little free space for this chunk: it needs 8\.0 MiB, has [\d.]+ MiB free and keeps 16\.0 MiB free$/,
      );
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

  // Found from outside: with room for a first chunk's bytes and not for its log line, the 507
  // left the upload's folder with the whole chunk in it, for good (a restart kept it), and an
  // upload of no chunk that counted against the share's 8 unfinished uploads: after 8 such
  // refusals the share took no upload for a day (429), with the disk empty again.
  it('a first chunk whose record the disk cannot hold: 507, its upload leaves nothing, and the share takes uploads again', async () => {
    const dir = join((disk as SmallDisk).dir, 'first-record');
    const filler = join((disk as SmallDisk).dir, 'filler-first');
    let srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    try {
      let token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'first.bin');
      const data = randomBytes(1_000_000); // 245 pages of the tmpfs
      const pages = Math.ceil(data.length / 4096);
      /** Leaves the chunk's pages and `extra` more free. */
      const leave = async (extra: number) => {
        await rm(filler, { force: true });
        const { bavail, bsize } = await statfs(dir);
        await writeFile(filler, Buffer.alloc((bavail - pages - extra) * bsize));
        expect((await statfs(dir)).bavail).toBe(pages + extra);
      };
      // Room for the chunk and its upload's meta, not for its log: then not for meta either.
      for (let round = 0; round < 10; round++) {
        const extra = round === 0 ? 0 : 1;
        await leave(extra);
        const dzuuid = randomUUID();
        const res = await sendChunk(srv.url, token, id, { dzuuid, index: 0, total: 2, data });
        expect({ round, status: res.status }).toEqual({ round, status: 507 });
        expectFail(await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token }), 404);
        expect(await leftovers(dir)).toEqual([]);
      }
      await rm(filler);
      // Space is back: ten refusals took none of the share's 8 unfinished uploads.
      const dzuuid = randomUUID();
      const send = (index: number) =>
        sendChunk(srv.url, token, id, { dzuuid, index, total: 2, data });
      expectStatus(await send(0), 200);
      expectStatus(await send(1), 201);
      expect((await content(srv.url, token, id)).equals(Buffer.concat([data, data]))).toBe(true);
      expect(await leftovers(dir)).toEqual([]);
      await srv.close(false);
      srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
      token = await login(srv.url, ADMIN.username, ADMIN.password);
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
      // Deletes only remove: they are recorded in the room of the server's reserve file.
      for (const id of [...acked].filter((a) => a !== kept).slice(0, 50)) {
        expectStatus(await del(srv.url, `/files/${id}`, { token }), 200);
        acked.delete(id);
      }
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

describe.skipIf(typeof disk === 'string')('removals on a full disk', () => {
  // Found from outside: on a disk another program had filled to 100 %, even DELETE /files/<id>
  // got 507 (its journal line found no room), so an administrator could not free space through
  // the API. Removals (a share, a link, a token) are now recorded in the room of the server's
  // reserve file and last across a restart; other changes still get 507 and change nothing, and
  // with space back the reserve is made again and the server works again by itself.
  it('DELETE of a share, a link and a token works on a disk filled to 100 %, and lasts', async () => {
    const dir = join((disk as SmallDisk).dir, 'removals');
    const filler = join((disk as SmallDisk).dir, 'filler-removals');
    let srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    const token = await login(srv.url, ADMIN.username, ADMIN.password);
    const other = await login(srv.url, ADMIN.username, ADMIN.password);
    const user = await createUser(srv.url, token, ['READ', 'LIST']);
    // The user's own password change keeps their token: ending it (sign out everywhere, below)
    // also clears what was kept, and is still a removal.
    expectStatus(
      await post(srv.url, '/users/password', {
        token: user.token,
        json: { old: user.password, new: 'changed-before-the-disk-filled' },
      }),
      200,
    );
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) {
      const id = await createShare(srv.url, token, `full-${i}.txt`);
      expectStatus(await upload1(srv.url, token, id, Buffer.from(`content ${i}`)), 201);
      ids.push(id);
    }
    const link = await post(srv.url, `/files/${ids[1]}/links`, { token, json: {} });
    expectStatus(link, 201);
    const reserve = join(dir, 'reserve');
    const acked = new Set(ids);
    try {
      await fillDisk(filler);
      // Creates go on while the journal's last block has room, then the disk is full.
      let refused: Res | undefined;
      for (let i = 0; i < 5000 && !refused; i++) {
        const res = await post(srv.url, '/files', { token, json: { file_name: `f-${i}` } });
        if (res.status === 201) acked.add(res.body.url.slice('/files/'.length));
        else refused = res;
      }
      expectFail(refused!, 507);
      // What the journal's last block still holds goes to downloads' counts (shorter lines
      // than a share's deletion), until one is refused too: the journal has no room left.
      const download = `${new URL(link.body.url).pathname}?download`;
      refused = undefined;
      for (let i = 0; i < 5000 && !refused; i++) {
        const res = await request(srv.url, 'GET', download, { localAddress: '127.0.0.3' });
        if (res.status !== 200) refused = res;
      }
      expectFail(refused!, 507);
      const fs = await statfs(dir);
      expect(fs.bavail * fs.bsize).toBeLessThan(4096);
      expectStatus(await del(srv.url, `/files/${ids[0]}`, { token }), 200);
      acked.delete(ids[0]!);
      expectStatus(await del(srv.url, `/links/${link.body.id}`, { token }), 200);
      expectStatus(await post(srv.url, '/users/logout', { token, json: { token: other } }), 200);
      expectStatus(await del(srv.url, `/users/${user.username}/tokens`, { token }), 200);
      expectFail(await get(srv.url, '/files', { token: user.token }), 401);
      expectFail(await get(srv.url, `/files/${ids[0]}`, { token }), 404);
      expectFail(await get(srv.url, '/files', { token: other }), 401);
      // Anything but a removal still gets 507 on a full disk, and changes nothing (filled
      // again: the content deleted above left some room).
      await fillDisk(`${filler}-again`);
      expectFail(
        await patch(srv.url, `/files/${ids[2]}`, { token, json: { file_name: 'renamed.txt' } }),
        507,
      );
      expectFail(await post(srv.url, '/files', { token, json: {} }), 507);
      expect(await getShare(srv.url, token, ids[2]!)).toMatchObject({ file_name: 'full-2.txt' });
      // Space returns: the reserve is made again, and the server works again by itself.
      await rm(filler);
      await rm(`${filler}-again`);
      acked.add(await createShare(srv.url, token, 'after.txt'));
      expect((await stat(reserve)).size).toBe(256 * 1024);
    } finally {
      await rm(filler, { force: true });
      await rm(`${filler}-again`, { force: true });
      await srv.close(false);
    }
    srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    try {
      expectFail(await get(srv.url, `/files/${ids[0]}`, { token }), 404);
      expectFail(await get(srv.url, `/links/${link.body.id}`, { token }), 404);
      expectFail(await get(srv.url, '/files', { token: other }), 401);
      expectFail(await get(srv.url, '/files', { token: user.token }), 401);
      const shares = await verifyAllContent(srv.url, token);
      expect([...shares.keys()].sort()).toEqual([...acked].sort());
      expect(shares.get(ids[2]!)).toMatchObject({ file_name: 'full-2.txt' });
    } finally {
      await srv.close();
    }
  });
});

describe.skipIf(typeof disk === 'string')('whose content, on a full disk', () => {
  // Property guarded: a server still starts on a full disk (downloads and removals work there),
  // also when it cannot write what the start records (the content's owner, the store's id); it
  // then removes no stored file, and records them at a later start with room.
  it.each([
    ['content-owner', false],
    ['content-owner and store ids', true],
  ])(
    'a data directory from before %s starts on a full disk, keeps its content, and is marked once there is room',
    async (_, noId) => {
      const dir = join((disk as SmallDisk).dir, `owner-${noId}`);
      const filler = join((disk as SmallDisk).dir, 'filler-owner');
      let srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const kept = await createShare(srv.url, token, 'kept.txt');
      expectStatus(await upload1(srv.url, token, kept, Buffer.from('kept content')), 201);
      await srv.close(false);
      // As an earlier fshare left it: no mark (and no store id), and a leftover of a crash.
      await rm(join(dir, 'content-owner'));
      if (noId) {
        const db = JSON.parse(await readFile(join(dir, 'db.json'), 'utf8'));
        delete db.store_id;
        await writeFile(join(dir, 'db.json'), JSON.stringify(db));
      }
      await writeFile(join(dir, 'content', `${kept}.0123456789abcdef`), 'left by a crash');
      await fillDisk(filler);
      try {
        srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
        expect((await content(srv.url, token, kept)).toString()).toBe('kept content');
        await srv.close(false);
        const files = await readdir(join(dir, 'content'));
        expect(files).toHaveLength(2);
        expect(files).toContain(`${kept}.0123456789abcdef`);
        await expect(stat(join(dir, 'content-owner'))).rejects.toThrow(/ENOENT/);
      } finally {
        await rm(filler, { force: true });
      }
      srv = await startServer({ dataDir: dir });
      try {
        expect((await content(srv.url, token, kept)).toString()).toBe('kept content');
      } finally {
        await srv.close(false);
      }
      const id = JSON.parse(await readFile(join(dir, 'db.json'), 'utf8')).store_id;
      expect(id).toMatch(/^[0-9a-f-]{36}$/);
      expect(await readFile(join(dir, 'content-owner'), 'utf8')).toBe(`${id}\n`);
      // The leftover went with the start that could mark the content.
      expect(await readdir(join(dir, 'content'))).toHaveLength(1);
    },
  );
});

describe.skipIf(typeof disk === 'string')('a full disk in the middle of an upload', () => {
  // Found from outside: a join that filled the disk left its partial j.* file behind (the disk
  // stayed full until a restart, and every retry left another).
  it('a join the disk cannot hold: 507, no part of the join is left; with space back the last chunk completes it', async () => {
    const dir = join((disk as SmallDisk).dir, 'join');
    const filler = join((disk as SmallDisk).dir, 'filler-join');
    const srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'joined.bin');
      const data = randomBytes(16 * MiB);
      const chunks = [0, 1, 2, 3].map((i) => data.subarray(i * 4 * MiB, (i + 1) * 4 * MiB));
      const dzuuid = randomUUID();
      const send = (index: number) =>
        sendChunk(srv.url, token, id, { dzuuid, index, total: 4, data: chunks[index]! });
      for (const index of [0, 1, 2]) expectStatus(await send(index), 200);
      // Room for the last chunk, not for the 16 MiB of the join.
      await fillDisk(filler, 7 * MiB);
      const refused = await send(3);
      expectFail(refused, 507);
      // Not "nothing was changed": the chunk is recorded, and sending it again completes.
      expect(refused.body.message).toMatch(/its chunks are kept: send the last one again/);
      const joins = (await walkFiles(join(dir, 'uploads'))).filter((f) => /\/j\.[^/]*$/.test(f));
      expect(joins).toEqual([]);
      expect(await getShare(srv.url, token, id)).toMatchObject({ initialized: false });
      // Space returns: sending the last chunk again completes the upload, without a restart.
      await rm(filler);
      expectStatus(await send(3), 201);
      expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    } finally {
      await rm(filler, { force: true });
      await srv.close();
    }
  });

  // Found from outside: an upload's log line that a full disk cut short stayed in the log, and
  // the next line appended joined it into one that read as neither: a chunk acknowledged after
  // space returned was gone after a restart.
  it('a log line a full disk cuts short is taken back: every chunk acknowledged later survives a restart', async () => {
    const dir = join((disk as SmallDisk).dir, 'torn');
    const filler = join((disk as SmallDisk).dir, 'filler-torn');
    let srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    try {
      let token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'torn.bin');
      const dzuuid = randomUUID();
      const send = (index: number) =>
        sendChunk(srv.url, token, id, { dzuuid, index, total: 1000, data: Buffer.alloc(0) });
      const acked: number[] = [];
      let size = 0; // the log's: one line `c INDEX 0 -` per chunk
      let next = 0;
      // Up to 1–7 bytes before the end of a page of the log, so the next line (8 bytes or
      // more) needs a page the full disk does not have.
      while (4096 - (size % 4096) > 7) {
        expectStatus(await send(next), 200);
        acked.push(next);
        size += `c ${next} 0 -\n`.length;
        next++;
      }
      await fillDisk(filler);
      // Without a Content-Length (chunked), so the free-space check before the body cannot
      // refuse it: the log's append is what meets the full disk.
      const { head, tail, contentType } = chunkMultipart(
        { dzuuid, dzchunkindex: next, dztotalchunks: 1000 },
        Buffer.alloc(0),
      );
      const refused = await new Promise<{ status: number; text: string }>((resolve, reject) => {
        const req = http.request(new URL(`/files/${id}/content`, srv.url), {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': contentType },
        });
        req.on('error', reject);
        req.on('response', (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (c: string) => (text += c));
          res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
        });
        req.write(head);
        req.end(tail);
      });
      expect(refused.status, refused.text).toBe(507);
      await rm(filler);
      for (const index of [next + 1, next + 2]) {
        expectStatus(await send(index), 200);
        acked.push(index);
      }
      await srv.close(false);
      srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
      token = await login(srv.url, ADMIN.username, ADMIN.password);
      const state = await request(srv.url, 'GET', `/files/${id}/uploads/${dzuuid}`, { token });
      expectStatus(state, 200);
      expect(state.body.received).toEqual(acked);
    } finally {
      await rm(filler, { force: true });
      await srv.close();
    }
  });

  // A SIGKILL in the middle of an append leaves a line without its end; the next append used to
  // be glued to it. Property: a cut tail is dropped at load, and later chunks keep their record.
  it('a log whose last line a crash cut short: the cut line is dropped, later chunks survive restarts', async () => {
    const dir = join((disk as SmallDisk).dir, 'cut-tail');
    let srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
    try {
      let token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'cut.bin');
      const dzuuid = randomUUID();
      const send = (index: number) =>
        sendChunk(srv.url, token, id, { dzuuid, index, total: 10, data: Buffer.from(`c${index}`) });
      for (const index of [0, 1]) expectStatus(await send(index), 200);
      await srv.close(false);
      const [upload] = await readdir(join(dir, 'uploads'));
      await appendFile(join(dir, 'uploads', upload!, 'log'), 'c 5 2'); // cut short by the crash
      for (let round = 0; round < 2; round++) {
        srv = await startServer({ dataDir: dir, minFreeBytes: 0 });
        token = await login(srv.url, ADMIN.username, ADMIN.password);
        if (round === 0) expectStatus(await send(3), 200);
        const state = await request(srv.url, 'GET', `/files/${id}/uploads/${dzuuid}`, { token });
        expect(state.body.received).toEqual([0, 1, 3]);
        await srv.close(false);
      }
    } finally {
      await srv.close();
    }
  });
});

const inodeDisk: SmallDisk | string = await mountSmallDisk(64, 400);
afterAll(async () => {
  if (typeof inodeDisk !== 'string') await inodeDisk.unmount();
});

describe.skipIf(typeof inodeDisk === 'string')('a disk out of inodes', () => {
  // Found from outside: with a few inodes left, an upload could be published (the share had
  // the new content) and still be answered 507 "nothing was changed", because closing the
  // upload afterwards needed an inode. Property, for every number of inodes left: a 201 means
  // the share holds the new bytes, and any failure means it still holds the old ones.
  it('for each number of inodes left, the answer tells the truth about the share', async () => {
    const root = (inodeDisk as SmallDisk).dir;
    const fillers = join(root, 'fillers');
    const srv = await startServer({ dataDir: join(root, 'data'), minFreeBytes: 0 });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const seen = new Set<number>();
      for (let left = 0; left <= 8; left++) {
        for (const method of ['POST', 'PUT'] as const) {
          const old = randomBytes(1000);
          const id = await createShare(srv.url, token, `inodes-${left}-${method}.bin`);
          if (method === 'PUT') expectStatus(await upload1(srv.url, token, id, old), 201);
          await mkdir(fillers, { recursive: true });
          for (let n = 0; (await statfs(root)).ffree > left; n++)
            await writeFile(join(fillers, String(n)), '');
          const data = randomBytes(3000);
          const res = await sendChunk(
            srv.url,
            token,
            id,
            { dzuuid: randomUUID(), index: 0, total: 1, data },
            method,
          );
          await rm(fillers, { recursive: true, force: true });
          seen.add(res.status);
          const share = await getShare(srv.url, token, id);
          if (res.status === 201) {
            expect((await content(srv.url, token, id)).equals(data), `${method} ${left}`).toBe(
              true,
            );
          } else {
            expectFail(res, 507);
            if (method === 'PUT')
              expect((await content(srv.url, token, id)).equals(old), `${method} ${left}`).toBe(
                true,
              );
            else expect(share.initialized, `${method} ${left}`).toBe(false);
          }
        }
      }
      // Both outcomes were met: the range of inodes left spans the failure and the success.
      expect(seen).toEqual(new Set([201, 507]));
    } finally {
      await rm(fillers, { recursive: true, force: true });
      await srv.close();
    }
  });

  // Found from outside: an upload published with no inode left for its `done` record was
  // answered 201 ("a restart will" close it), and every start after that stopped with
  // "no space left on the device: …/done" while the disk stayed full, so nothing could be
  // downloaded or removed. Property: a server starts on a disk out of inodes, whatever
  // uploads it must close, and serves every acknowledged upload.
  it('a start with no inode left closes what it can and serves every share', async () => {
    const root = (inodeDisk as SmallDisk).dir;
    const dataDir = join(root, 'data-start');
    const fillers = join(root, 'fillers-start');
    const notices: string[] = [];
    const notice = (line: string) => notices.push(line);
    let srv = await startServer({ dataDir, minFreeBytes: 0, notice });
    const stored = new Map<string, Buffer>();
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      let unclosed: string | undefined;
      for (let left = 0; left <= 8 && !unclosed; left++) {
        const id = await createShare(srv.url, token, `unclosed-${left}.bin`);
        await mkdir(fillers, { recursive: true });
        for (let n = 0; (await statfs(root)).ffree > left; n++)
          await writeFile(join(fillers, `${left}-${n}`), '');
        const data = randomBytes(3000);
        const res = await upload1(srv.url, token, id, data);
        if (res.status === 201) {
          stored.set(id, data);
          if (notices.some((n) => n.includes(`could not close upload ${id}.`))) unclosed = id;
        }
        if (!unclosed) await rm(fillers, { recursive: true, force: true });
      }
      // The case was met: an upload published whose `done` record had no inode.
      expect(unclosed).toBeDefined();
      const uploads = join(dataDir, 'uploads');
      expect((await readdir(uploads)).some((n) => n.startsWith(`${unclosed}.`))).toBe(true);
      await srv.close(false);
      expect((await statfs(root)).ffree).toBe(0);
      srv = await startServer({ dataDir, minFreeBytes: 0, notice });
      const again = await login(srv.url, ADMIN.username, ADMIN.password);
      for (const [id, data] of stored)
        expect((await content(srv.url, again, id)).equals(data)).toBe(true);
      // The upload is closed for good: its folder went whole (there was no room for a record).
      expect((await readdir(uploads)).some((n) => n.startsWith(`${unclosed}.`))).toBe(false);
      expectStatus(await del(srv.url, `/files/${unclosed}`, { token: again }), 200);
    } finally {
      await rm(fillers, { recursive: true, force: true });
      await srv.close();
    }
  });

  // The same for an upload left idle past its time: the start's sweep closes it, which needs an
  // inode for its `done` record. Property: the server starts, and the idle upload is over (its
  // chunk is no longer counted, and its folder is gone).
  it('a start with no inode left ends an idle upload and starts', async () => {
    const root = (inodeDisk as SmallDisk).dir;
    const dataDir = join(root, 'data-idle');
    const fillers = join(root, 'fillers-idle');
    let srv = await startServer({ dataDir, minFreeBytes: 0 });
    try {
      const token = await login(srv.url, ADMIN.username, ADMIN.password);
      const id = await createShare(srv.url, token, 'idle.bin');
      const dzuuid = randomUUID();
      const part = randomBytes(1000);
      expectStatus(
        await sendChunk(srv.url, token, id, { dzuuid, index: 0, total: 2, data: part }),
        200,
      );
      await srv.close(false);
      await mkdir(fillers, { recursive: true });
      for (let n = 0; (await statfs(root)).ffree > 0; n++)
        await writeFile(join(fillers, String(n)), '');
      srv = await startServer({ dataDir, minFreeBytes: 0, limits: { uploadIdleMs: 1 } });
      const again = await login(srv.url, ADMIN.username, ADMIN.password);
      expect((await readdir(join(dataDir, 'uploads'))).some((n) => n.startsWith(`${id}.`))).toBe(
        false,
      );
      const status = await get(srv.url, `/files/${id}/uploads/${dzuuid}`, { token: again });
      expect(status.status).toBe(404);
    } finally {
      await rm(fillers, { recursive: true, force: true });
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
