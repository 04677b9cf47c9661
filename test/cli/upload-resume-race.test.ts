// An interrupted upload is resumed by one run only, and a resumed upload never deletes a share
// that has content. Found from outside: two `fshare upload FILE` run at once after an
// interrupted one both took its record; the first completed the share and reported it, exit 0;
// the second's next chunk was refused with 423 (the share has content) and it deleted the share
// "it had created": the upload the first run had just acknowledged was gone.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import {
  createServer,
  request,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  createCli,
  uploadRecordsOf,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

interface Transfer {
  share_id: string;
  sha256: string | null;
  verified: boolean;
  resumed_bytes: number;
}

/**
 * A pass-through proxy that can hold requests: those `hold` matches wait until `releaseOn`
 * matches a later request, or until `releaseAt` of them are waiting (never, when neither).
 */
async function gatedProxy(target: string) {
  const upstream = new URL(target);
  let rule:
    | {
        hold: (req: IncomingMessage) => boolean;
        releaseOn?: (req: IncomingMessage) => boolean;
        releaseAt?: number;
      }
    | undefined;
  let waiting: (() => void)[] = [];
  let arrivals: (() => void)[] = [];
  let held = 0;
  /** Lets the held requests go on; what comes after is not held any more. */
  const releaseAll = () => {
    rule = undefined;
    const go = waiting;
    waiting = [];
    for (const forward of go) forward();
  };
  const server: Server = createServer((req: IncomingMessage, res: ServerResponse) => {
    req.on('error', () => undefined);
    res.on('error', () => undefined);
    const forward = () => {
      const up = request(
        {
          host: upstream.hostname,
          port: upstream.port,
          method: req.method,
          path: req.url,
          headers: req.headers,
        },
        (answer) => {
          res.writeHead(answer.statusCode ?? 502, answer.headers);
          answer.pipe(res);
        },
      );
      up.on('error', () => res.destroy());
      req.pipe(up);
    };
    if (rule?.hold(req)) {
      held++;
      waiting.push(forward);
      for (const arrived of arrivals) arrived();
      arrivals = [];
      if (rule.releaseAt !== undefined && waiting.length >= rule.releaseAt) releaseAll();
      return;
    }
    if (rule?.releaseOn?.(req)) releaseAll();
    forward();
  });
  await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    /** Holds what `hold` matches from now on (and forgets what was held before). */
    gate(r: typeof rule) {
      rule = r;
      waiting = [];
      held = 0;
    },
    get held() {
      return held;
    },
    /** Resolves once `n` requests are being held. */
    async heldAtLeast(n: number) {
      while (held < n) await new Promise<void>((done) => arrivals.push(done));
    },
    release: releaseAll,
    close: () =>
      new Promise<void>((done) => {
        server.closeAllConnections();
        server.close(() => done());
      }),
  };
}

type Proxy = Awaited<ReturnType<typeof gatedProxy>>;

const recordsOf = (cli: Cli) => uploadRecordsOf<{ share_id: string | null }>(cli);

describe('an interrupted upload run again twice at once', () => {
  let serve: Serve;
  let cli: Cli;
  let work: string;
  let proxy: Proxy;
  let token: string;

  beforeAll(async () => {
    serve = await startServe();
    proxy = await gatedProxy(serve.url);
    cli = await createCli();
    work = await tempDir('resume-race');
    await signIn(cli, proxy.url);
    token = (await cli.run(['--server', proxy.url, 'token'])).stdout.trim();
  });

  afterAll(async () => {
    await proxy?.close();
    await serve?.stop();
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  const upload = (file: string) =>
    cli.run(['--server', proxy.url, '--json', 'upload', file, '--no-progress']);

  const info = async (id: string) => {
    const res = await fetch(`${serve.url}/files/${id}`, {
      headers: { authorization: `Bearer ${token}` },
    });
    return { status: res.status, body: (await res.json()) as { sha256?: string | null } };
  };

  /**
   * An upload of a 3-chunk file stopped with SIGKILL once its first chunk is stored: its record
   * stays, naming its share.
   */
  async function interrupted(name: string): Promise<{ file: string; data: Buffer; id: string }> {
    const file = join(work, name);
    const data = randomBytes(3 * 1024 * 1024);
    await writeFile(file, data);
    let chunks = 0;
    proxy.gate({
      hold: (req) => req.method === 'POST' && /\/content$/.test(req.url!) && ++chunks > 1,
    });
    const child = cli.start([
      '--server',
      proxy.url,
      'upload',
      file,
      '--chunk-size',
      '1m',
      '--parallel',
      '1',
    ]);
    await proxy.heldAtLeast(1); // the second chunk: the first was answered
    child.kill('SIGKILL');
    await child;
    proxy.gate(undefined);
    const [record] = await recordsOf(cli);
    expect(record?.share_id).toEqual(expect.any(String));
    return { file, data, id: record!.share_id! };
  }

  it('one run resumes the share, the other uploads a share of its own; both are kept, whole', async () => {
    const { file, data, id } = await interrupted('twice.bin');
    // Both runs are held where they read the earlier share, so both have found its record by
    // then; a run that finds it taken makes a share of its own (POST /files) instead.
    proxy.gate({
      hold: (req) => req.method === 'GET' && req.url === `/files/${id}`,
      releaseOn: (req) => req.method === 'POST' && req.url === '/files',
      releaseAt: 2,
    });
    const [a, b] = await Promise.all([upload(file), upload(file)]);
    proxy.gate(undefined);
    expect(a.exitCode, a.stderr).toBe(0);
    expect(b.exitCode, b.stderr).toBe(0);
    const shares = [a, b].map((r) => (JSON.parse(r.stdout) as Transfer[])[0]!);
    expect(shares.map((s) => s.share_id)).toContain(id);
    expect(new Set(shares.map((s) => s.share_id)).size).toBe(2);
    expect([a, b].filter((r) => /resuming the upload/.test(r.stderr))).toHaveLength(1);
    for (const s of shares) {
      expect(s).toMatchObject({ sha256: sha256(data), verified: true });
      const now = await info(s.share_id);
      expect(now.status).toBe(200);
      expect(now.body.sha256).toBe(sha256(data));
    }
    expect(await recordsOf(cli)).toEqual([]);
  });

  /** Completes share `id` from outside, with one chunk of `bytes`, as another client would. */
  async function completeFromOutside(id: string, bytes: Buffer): Promise<void> {
    const form = new FormData();
    form.set('dzuuid', randomUUID());
    form.set('dzchunkindex', '0');
    form.set('dztotalchunks', '1');
    form.set('upload', new Blob([bytes]), 'other.bin');
    const res = await fetch(`${serve.url}/files/${id}/content`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
      body: form,
    });
    expect(res.status).toBe(201);
  }

  // Found from outside: a replacement stopped by a lock (423) forgot its record, so the same
  // command after the unlock started over, while the chunks it had sent stayed on the server,
  // held against the owner's quota for a day.
  it('a replacement locked on the way keeps its record: after the unlock the same command sends only the rest', async () => {
    const first = join(work, 'locked-v1.bin');
    await writeFile(first, randomBytes(1000));
    const made = await upload(first);
    expect(made.exitCode, made.stderr).toBe(0);
    const [{ share_id: id }] = JSON.parse(made.stdout) as Transfer[];
    const file = join(work, 'locked-v2.bin');
    const data = randomBytes(3 * 1024 * 1024);
    await writeFile(file, data);
    const replace = () =>
      cli.run([
        '--server',
        proxy.url,
        '--json',
        'replace',
        id!,
        file,
        '--chunk-size',
        '1m',
        '--parallel',
        '1',
        '--no-progress',
      ]);
    // The second chunk waits while the share is locked; then it goes on, and gets 423.
    let chunks = 0;
    proxy.gate({
      hold: (req) => req.method === 'PUT' && req.url === `/files/${id}/content` && ++chunks === 2,
    });
    const run = replace();
    await proxy.heldAtLeast(1);
    const lock = await fetch(`${serve.url}/files/${id}/lock`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    });
    expect(lock.status).toBe(200);
    proxy.release();
    const stopped = await run;
    expect(stopped.exitCode).toBe(5);
    expect(stopped.stderr).toContain(
      `fshare: to finish once the share is unlocked: fshare replace ${id} ${file}`,
    );
    expect(await recordsOf(cli)).toHaveLength(1);

    const unlock = await fetch(`${serve.url}/files/${id}/unlock`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}` },
    });
    expect(unlock.status).toBe(200);
    const again = await replace();
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stderr).toMatch(/resuming the upload of .*: the server holds 1 of 3 chunks/);
    expect(JSON.parse(again.stdout)).toMatchObject({
      share_id: id,
      sha256: sha256(data),
      verified: true,
      resumed_bytes: 1024 * 1024,
    });
    expect((await info(id!)).body.sha256).toBe(sha256(data));
    expect(await recordsOf(cli)).toEqual([]);
  });

  it('a share completed elsewhere with the same bytes while the run resumed it: reported, verified, kept', async () => {
    const { file, data, id } = await interrupted('same.bin');
    proxy.gate({ hold: (req) => req.method === 'POST' && req.url === `/files/${id}/content` });
    const run = upload(file);
    await proxy.heldAtLeast(1);
    await completeFromOutside(id, data);
    proxy.release();
    const res = await run;
    proxy.gate(undefined);
    expect(res.exitCode, res.stderr).toBe(0);
    const [done] = JSON.parse(res.stdout) as Transfer[];
    expect(done).toMatchObject({ share_id: id, sha256: sha256(data), verified: true });
    expect((await info(id)).body.sha256).toBe(sha256(data));
    expect(await recordsOf(cli)).toEqual([]);
  });

  it('a share completed elsewhere with other bytes while the run resumed it: a failure, and the share is kept', async () => {
    const { file, id } = await interrupted('other.bin');
    const other = randomBytes(1000);
    proxy.gate({ hold: (req) => req.method === 'POST' && req.url === `/files/${id}/content` });
    const run = upload(file);
    await proxy.heldAtLeast(1);
    await completeFromOutside(id, other);
    proxy.release();
    const res = await run;
    proxy.gate(undefined);
    expect(res.exitCode).toBe(5); // HTTP 423
    expect(res.stderr.trim().split('\n').at(-1)).toBe(
      `fshare: The share already has content: use PUT to replace it (the share it had created, ${id}, was kept: it has content) (HTTP 423)`,
    );
    const now = await info(id);
    expect(now.status).toBe(200);
    expect(now.body.sha256).toBe(sha256(other));
  });
});
