// The real binary, killed with SIGKILL in the middle of uploads and metadata writes, then
// restarted on the same data directory (issue 2: "a SIGKILL in the middle of an upload followed by
// finishing it"; API.md: "an upload interrupted by a server restart or crash can be finished").
import { randomBytes, randomUUID } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import http from 'node:http';
import { join } from 'node:path';
import jwt from 'jsonwebtoken';
import { beforeAll, describe, expect, it } from 'vitest';
import {
  content,
  createShare,
  createShareWithContent,
  expectStatus,
  get,
  getShare,
  multipart,
  post,
  sendChunk,
  split,
} from '../helpers/http.js';
import { kill9, serve, serveRoot } from '../helpers/serve.js';
import { DataDirInUseError } from '../../src/server/store/dirlock.js';
import { ADMIN, login, startServer } from '../helpers/server.js';

let dataDir: string;

/** Starts sending a chunk request but stops halfway through its body; never finishes it. */
function halfSentChunk(
  url: string,
  token: string,
  id: string,
  dzuuid: string,
  index: number,
  total: number,
) {
  const { body, contentType } = multipart([
    { name: 'dzuuid', value: dzuuid },
    { name: 'dzchunkindex', value: String(index) },
    { name: 'dztotalchunks', value: String(total) },
    { name: 'upload', filename: 'blob', data: randomBytes(2 * 1024 * 1024) },
  ]);
  const u = new URL(`/files/${id}/content`, url);
  const req = http.request({
    host: u.hostname,
    port: u.port,
    path: u.pathname,
    method: 'POST',
    agent: false,
    headers: {
      authorization: `Bearer ${token}`,
      'content-type': contentType,
      'content-length': String(body.length),
    },
  });
  req.on('error', () => {}); // the server dies under it
  return new Promise<void>((sent) => req.write(body.subarray(0, body.length / 2), () => sent()));
}

const dirIn = serveRoot('crash');
beforeAll(() => {
  dataDir = dirIn('data');
});

describe('SIGKILL during an upload', () => {
  it('the upload is finished after a restart, and the data directory is intact', async () => {
    let running = await serve(dataDir);
    const token = await login(running.url, ADMIN.username, ADMIN.password);

    // A first upload of 3 chunks: 0 and 1 arrive, 2 is cut mid-body by the kill.
    const data = randomBytes(3 * 100_000);
    const parts = split(data, 3);
    const id = await createShare(running.url, token, 'crash.bin');
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(running.url, token, id, { dzuuid, index: 1, total: 3, data: parts[1]! }),
      200,
    );
    expectStatus(
      await sendChunk(running.url, token, id, { dzuuid, index: 0, total: 3, data: parts[0]! }),
      200,
    );

    // A replacement in progress on an initialized share.
    const old = Buffer.from('content from before the crash');
    const fresh = randomBytes(50_000);
    const replaced = await createShareWithContent(running.url, token, 'replace.bin', old);
    const putUuid = randomUUID();
    expectStatus(
      await sendChunk(
        running.url,
        token,
        replaced,
        { dzuuid: putUuid, index: 0, total: 2, data: split(fresh, 2)[0]! },
        'PUT',
      ),
      200,
    );

    await halfSentChunk(running.url, token, id, dzuuid, 2, 3);
    // Metadata writes in flight when the process dies.
    const inflight = Array.from({ length: 30 }, (_, i) =>
      post(running.url, '/files', { token, json: { file_name: `inflight-${i}` } }).catch(
        () => null,
      ),
    );
    const acknowledged: string[] = [];
    await Promise.race([
      Promise.all(
        inflight.map(async (p) => {
          const res = await p;
          if (res?.status === 201) acknowledged.push(res.body.url.slice('/files/'.length));
        }),
      ),
      (async () => {
        while (acknowledged.length < 5) await new Promise((r) => setTimeout(r, 5));
      })(),
    ]);
    const ackedBeforeKill = [...acknowledged];
    await kill9(running);
    await Promise.all(inflight);

    // db.json is whole after the kill.
    const db = await readFile(join(dataDir, 'db.json'), 'utf8');
    expect(() => JSON.parse(db)).not.toThrow();

    running = await serve(dataDir);
    try {
      // The old token still works: the secret survived.
      expectStatus(await get(running.url, `/users/${ADMIN.username}`, { token }), 200);

      // Every share the server acknowledged before dying is still there.
      const listed = await get(running.url, '/files?per_page=1000', { token });
      expectStatus(listed, 200);
      const ids = listed.body.data.map((s: { share_id: string }) => s.share_id);
      for (const ack of ackedBeforeKill) expect(ids).toContain(ack);

      // The cut upload is still pending, and finishing it gives exactly the bytes.
      expect(await getShare(running.url, token, id)).toMatchObject({
        initialized: false,
        size: null,
      });
      expectStatus(
        await sendChunk(running.url, token, id, { dzuuid, index: 2, total: 3, data: parts[2]! }),
        201,
      );
      expect((await content(running.url, token, id)).equals(data)).toBe(true);
      expect((await getShare(running.url, token, id)).size).toBe(data.length);

      // The replacement: old content until the last chunk, then the new.
      expect((await content(running.url, token, replaced)).equals(old)).toBe(true);
      expectStatus(
        await sendChunk(
          running.url,
          token,
          replaced,
          { dzuuid: putUuid, index: 1, total: 2, data: split(fresh, 2)[1]! },
          'PUT',
        ),
        201,
      );
      expect((await content(running.url, token, replaced)).equals(fresh)).toBe(true);

      // New work goes through as usual.
      const after = await createShareWithContent(
        running.url,
        token,
        'after.txt',
        Buffer.from('after'),
        1,
      );
      expect((await content(running.url, token, after)).toString()).toBe('after');
    } finally {
      running.child.kill('SIGTERM');
      await running.exited;
    }
    // A graceful stop leaves a whole db.json too.
    const dbAfter = await readFile(join(dataDir, 'db.json'), 'utf8');
    expect(() => JSON.parse(dbAfter)).not.toThrow();
  });

  it('a second SIGKILL right after a completed upload keeps the content', async () => {
    let running = await serve(dataDir);
    const token = await login(running.url, ADMIN.username, ADMIN.password);
    const data = randomBytes(200_000);
    const id = await createShareWithContent(running.url, token, 'durable.bin', data, 4);
    await kill9(running);
    running = await serve(dataDir);
    try {
      expect(await getShare(running.url, token, id)).toMatchObject({
        initialized: true,
        size: data.length,
      });
      expect((await content(running.url, token, id)).equals(data)).toBe(true);
    } finally {
      running.child.kill('SIGTERM');
      await running.exited;
    }
  });
});

describe('the binary', () => {
  it('signs tokens with FSHARE_SECRET when it is set', async () => {
    const secret = `env-secret-${randomUUID()}`;
    const running = await serve(dirIn('env-secret'), { FSHARE_SECRET: secret });
    try {
      const token = await login(running.url, ADMIN.username, ADMIN.password);
      expect(() => jwt.verify(token, secret, { algorithms: ['HS256'] })).not.toThrow();
    } finally {
      running.child.kill('SIGTERM');
      await running.exited;
    }
  });

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    it(`shuts down gracefully on ${signal}: exits by itself with code 0, db.json whole`, async () => {
      const dir = dirIn(`graceful-${signal}`);
      const running = await serve(dir);
      const token = await login(running.url, ADMIN.username, ADMIN.password);
      await createShareWithContent(running.url, token, 'g.txt', Buffer.from('graceful'));
      running.child.kill(signal);
      expect(await running.exited).toEqual({ code: 0, signal: null });
      expect(() => JSON.parse(readFileSync(join(dir, 'db.json'), 'utf8'))).not.toThrow();
    });
  }

  it('without admin options, the first start prints a generated admin password once', async () => {
    const dir = dirIn('generated-admin');
    const noAdmin = { FSHARE_ADMIN_USER: undefined, FSHARE_ADMIN_PASSWORD: undefined };
    let running = await serve(dir, noAdmin);
    let password: string;
    try {
      const m = /password:?\s*(\S+)/i.exec(running.output);
      expect(m, `stdout: ${running.output}`).not.toBeNull();
      password = m![1]!;
      await login(running.url, 'admin', password);
    } finally {
      running.child.kill('SIGTERM');
      await running.exited;
    }
    running = await serve(dir, noAdmin);
    try {
      expect(running.output).not.toContain(password);
      await login(running.url, 'admin', password);
    } finally {
      running.child.kill('SIGTERM');
      await running.exited;
    }
  });
});

// Two embedded servers on one data directory would append to one journal, each acknowledging
// changes the other could then lose. The kernel's lock on <data-dir>/lock stops the second; it
// dies with its holder, so a crash never leaves a lock that blocks the restart.
describe('one data directory, one server', () => {
  it('a second server is refused with one line naming the first, and changes nothing', async () => {
    const dir = dirIn('shared');
    const first = await serve(dir);
    const token = await login(first.url, ADMIN.username, ADMIN.password);
    const one = await createShare(first.url, token, 'one.txt');
    const files = async () =>
      Promise.all(['db.json', 'db.journal'].map((f) => readFile(join(dir, f), 'utf8')));
    const before = await files();

    const refused = await serve(dir).then(
      () => null,
      (err: { code: number; stderr: string }) => err,
    );
    expect(refused?.code).toBe(1);
    const lines = refused!.stderr.trim().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(
      new RegExp(`^fshare: .* is in use by another fshare serve \\(process ${first.child.pid} on `),
    );
    expect(await files()).toEqual(before);
    // In this process too (the test servers), whichever way the store is opened.
    await expect(startServer({ dataDir: dir })).rejects.toBeInstanceOf(DataDirInUseError);
    expect(await files()).toEqual(before);

    // The first one never noticed.
    const two = await createShare(first.url, token, 'two.txt');
    // Killed, it leaves no lock behind: the next server starts at once, with both shares.
    await kill9(first);
    const next = await serve(dir);
    const again = await login(next.url, ADMIN.username, ADMIN.password);
    for (const [id, name] of [
      [one, 'one.txt'],
      [two, 'two.txt'],
    ])
      expect(await getShare(next.url, again, id!)).toMatchObject({ file_name: name });
  });
});
