import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import type { IncomingMessage } from 'node:http';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { ADMIN, createCli, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';
import { startFaultProxy, type Fault } from '../helpers/fault-proxy.js';

describe('transfers survive a flaky network', () => {
  let serve: Serve;
  let cli: Cli;
  let work: string;
  let original: Buffer;
  let fault: (req: IncomingMessage, n: number) => Fault = () => 'pass';
  let proxy: ReturnType<typeof startFaultProxy>;
  let proxyUrl: string;
  let token: string;

  beforeAll(async () => {
    serve = await startServe();
    cli = await createCli();
    work = await tempDir('faults');
    original = randomBytes(600_000);
    await writeFile(join(work, 'data.bin'), original);
    proxy = startFaultProxy(serve.url, (req, n) => fault(req, n));
    proxyUrl = await proxy.url;
    const login = await cli.run(
      ['--server', proxyUrl, 'login', '-u', ADMIN.username, '--password-stdin'],
      {
        input: `${ADMIN.password}\n`,
      },
    );
    expect(login.exitCode).toBe(0);
    token = (await cli.run(['token'])).stdout;
  });

  beforeEach(() => {
    fault = () => 'pass';
    proxy.seen.length = 0;
  });

  afterAll(async () => {
    await proxy?.close();
    await serve?.stop();
    if (cli) await rm(cli.configDir, { recursive: true, force: true });
    if (work) await rm(work, { recursive: true, force: true });
  });

  const isContent = (req: IncomingMessage) => /\/content$/.test(req.url ?? '');

  it('retries chunks that fail with 5xx, 408, a dropped connection or a lost answer', async () => {
    let chunkRequests = 0;
    fault = (req) => {
      if (req.method !== 'POST' || !isContent(req)) return 'pass';
      chunkRequests++;
      if (chunkRequests === 2 || chunkRequests === 5) return 'http503';
      if (chunkRequests === 3) return 'drop';
      // What fshare serve answers to a chunk whose body stalled (nothing for 30 s).
      if (chunkRequests === 7) return 'http408';
      // Stored, its answer lost: a chunk whose bytes were all sent no longer holds its place
      // (--parallel), and is still sent again, and the upload still whole.
      if (chunkRequests === 9) return 'loseAnswer';
      return 'pass';
    };
    const res = await cli.run([
      '--json',
      'upload',
      join(work, 'data.bin'),
      '--chunk-size',
      '64k',
      '--parallel',
      '3',
    ]);
    expect(res.exitCode, res.stderr).toBe(0);
    const [share] = JSON.parse(res.stdout) as { share_id: string; size: number }[];
    expect(share!.size).toBe(original.length);
    expect(chunkRequests).toBe(10 + 5); // 10 chunks, 5 of them sent twice
    fault = () => 'pass';
    const got = await cli.runBinary(['get', share!.share_id, '-o', '-']);
    expect(got.stdout.equals(original)).toBe(true);
  });

  // 507 (out of space, or a file larger than the server can hold) is not mended by waiting a
  // second: each retry sent the chunk again for the same answer.
  it('does not retry a 507: one request, exit 1 with the server line', async () => {
    let chunkRequests = 0;
    fault = (req) => {
      if (req.method !== 'POST' || !isContent(req)) return 'pass';
      chunkRequests++;
      return 'http507';
    };
    const res = await cli.run(['upload', join(work, 'data.bin'), '--chunk-size', '1m']);
    expect(res.exitCode).toBe(1);
    expect(res.stderr).toContain('fshare: injected 507 (HTTP 507)');
    expect(chunkRequests).toBe(1);
  });

  // Found from outside: an interrupted `replace` said its error twice, the first time with the
  // way on appended, the second alone. One error line, then the way on, as `upload` says them.
  it('an interrupted replace says its error once, then how to resume', async () => {
    const first = await cli.json<{ share_id: string }[]>(['upload', join(work, 'data.bin')]);
    const id = first[0]!.share_id;
    fault = (req) => (req.method === 'PUT' && isContent(req) ? 'http507' : 'pass');
    // A name with a space and a quote: the line is a command that runs as printed.
    const file = join(work, "it's my data.bin");
    await writeFile(file, original);
    const res = await cli.run(['replace', id, file, '--chunk-size', '64k']);
    expect(res.exitCode).toBe(1);
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      'fshare: injected 507 (HTTP 507)',
      `fshare: to resume: fshare replace ${id} '${file.replace("'", "'\\''")}'`,
    ]);
  });

  it('does not retry a 4xx', async () => {
    const first = await cli.json<{ share_id: string }[]>([
      'upload',
      join(work, 'data.bin'),
      '--chunk-size',
      '1m',
    ]);
    const id = first[0]!.share_id;
    await cli.run(['lock', id]);
    proxy.seen.length = 0;
    const res = await cli.run(['replace', id, join(work, 'data.bin'), '--chunk-size', '1m']);
    expect(res.exitCode).toBe(5);
    expect(proxy.seen.filter((s) => s.method === 'PUT' && s.url.endsWith('/content'))).toHaveLength(
      1,
    );
    await cli.run(['unlock', id]);
  });

  // A create whose answer was lost used to be exit 6 with an empty share left on the server, and
  // running the command again made a second. Now it is sent again with its Idempotency-Key, and
  // the server answers with the share the first one made.
  it('a lost answer to the share creation is sent again and makes one share, not two', async () => {
    const name = `lost-create-${Date.now()}.bin`;
    await writeFile(join(work, name), original);
    let creates = 0;
    const keys: (string | undefined)[] = [];
    fault = (req) => {
      if (req.method !== 'POST' || req.url !== '/files') return 'pass';
      keys.push(req.headers['idempotency-key'] as string | undefined);
      return ++creates === 1 ? 'loseAnswer' : 'pass';
    };
    const res = await cli.run(['--json', 'upload', join(work, name)]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(creates).toBe(2);
    expect(keys[0]).toMatch(/^[0-9a-f-]{36}$/);
    expect(keys[1]).toBe(keys[0]);
    const [share] = JSON.parse(res.stdout) as { share_id: string; verified: boolean }[];
    expect(share!.verified).toBe(true);
    fault = () => 'pass';
    const all = await cli.json<{ shares: { share_id: string; file_name: string }[] }>([
      'ls',
      '--all',
    ]);
    const named = all.shares.filter((s) => s.file_name === name);
    expect(named.map((s) => s.share_id)).toEqual([share!.share_id]);
  });

  // rm and lock whose answer was lost used to be exit 6 ("cannot reach"), though the server had
  // done them. They are sent again; a repeated DELETE answered 404 is done.
  it('rm and lock whose answers are lost are sent again and succeed; the share is gone / locked', async () => {
    const [a] = await cli.json<{ share_id: string }[]>(['upload', join(work, 'data.bin')]);
    const [b] = await cli.json<{ share_id: string }[]>(['upload', join(work, 'data.bin')]);
    const lost = new Set<string>();
    fault = (req) => {
      const key = `${req.method} ${req.url}`;
      if (!['DELETE', 'POST'].includes(req.method!) || req.url === '/files') return 'pass';
      if (lost.has(key)) return 'pass';
      lost.add(key);
      return 'loseAnswer';
    };
    const rm = await cli.run(['rm', a!.share_id]);
    expect(rm.exitCode, rm.stderr).toBe(0);
    expect(rm.stdout).toContain(`Deleted ${a!.share_id}`);
    expect(proxy.seen.filter((s) => s.method === 'DELETE')).toHaveLength(2);
    const lock = await cli.run(['lock', b!.share_id]);
    expect(lock.exitCode, lock.stderr).toBe(0);
    expect(proxy.seen.filter((s) => s.url.endsWith('/lock'))).toHaveLength(2);
    fault = () => 'pass';
    expect((await cli.run(['info', a!.share_id])).exitCode).toBe(4);
    expect((await cli.json<{ locked: boolean }>(['info', b!.share_id])).locked).toBe(true);
    await cli.run(['unlock', b!.share_id]);
    // A request that is not repeated says its answer was lost, not that the server was unreachable.
    fault = (req) => (req.method === 'POST' && req.url === '/users' ? 'loseAnswer' : 'pass');
    const add = await cli.run(['users', 'add', `lost-${Date.now()}`, '--password-stdin'], {
      input: 'a-password-123\n',
    });
    expect(add.exitCode).toBe(6);
    expect(add.stderr.trimEnd().split('\n')).toEqual([
      expect.stringMatching(
        /^fshare: no answer from http:\/\/127\.0\.0\.1:\d+ to POST \/users \(connection reset\): it may have been carried out; check before running the command again$/,
      ),
    ]);
    fault = () => 'pass';
    // A share that never existed is still "not found", exit 4: only a repeat counts 404 as done.
    const missing = await cli.run(['rm', '00000000-0000-4000-8000-000000000000']);
    expect(missing.exitCode).toBe(4);
    expect(missing.stderr.trim()).toBe('fshare: No share with this id (HTTP 404)');
    // Of several, the line names the one that failed (found from outside: the lines were alike).
    const several = await cli.run([
      'rm',
      '00000000-0000-4000-8000-000000000001',
      '00000000-0000-4000-8000-000000000002',
    ]);
    expect(several.exitCode).toBe(4);
    expect(several.stderr.trim().split('\n')).toEqual([
      'fshare: 00000000-0000-4000-8000-000000000001: No share with this id (HTTP 404)',
      'fshare: 00000000-0000-4000-8000-000000000002: No share with this id (HTTP 404)',
    ]);
  });

  // The last chunk's 201 lost on the way: the chunk was sent again, the server refused the copy
  // (POST: 423 "The share already has content"), and upload and push deleted the complete share
  // and failed, exit 5. The share's sha256 now decides: it is the file's, so the upload is done.
  it('a lost 201 to the last chunk is proved by the share sha256: upload, push and replace succeed and keep the share', async () => {
    const name = `lost-201-${Date.now()}.bin`;
    await writeFile(join(work, name), original);
    fault = (req) =>
      (req.method === 'POST' || req.method === 'PUT') && isContent(req) ? 'lose201' : 'pass';
    const res = await cli.run(['--json', 'upload', join(work, name), '--chunk-size', '256k']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr).toBe('');
    const [share] = JSON.parse(res.stdout) as { share_id: string; verified: boolean }[];
    expect(share!.verified).toBe(true);
    const chunks = proxy.seen.filter((s) => s.method === 'POST' && s.url.endsWith('/content'));
    expect(chunks.map((s) => s.status)).toEqual([200, 200, 201, 423]);
    expect(proxy.seen.filter((s) => s.method === 'DELETE')).toEqual([]);
    fault = () => 'pass';
    const got = await cli.runBinary(['get', share!.share_id, '-o', '-']);
    expect(got.exitCode).toBe(0);
    expect(got.stdout.equals(original)).toBe(true);

    // replace: the copy of its last chunk is refused with 409 (the upload is over)
    const other = randomBytes(300_000);
    await writeFile(join(work, `${name}.2`), other);
    fault = (req) =>
      (req.method === 'POST' || req.method === 'PUT') && isContent(req) ? 'lose201' : 'pass';
    proxy.seen.length = 0;
    const replaced = await cli.run(['replace', share!.share_id, join(work, `${name}.2`)]);
    expect(replaced.exitCode, replaced.stderr).toBe(0);
    expect(proxy.seen.filter((s) => s.url.endsWith('/content')).map((s) => s.status)).toEqual([
      201, 409,
    ]);
    fault = () => 'pass';
    const now = await cli.runBinary(['get', share!.share_id, '-o', '-']);
    expect(now.stdout.equals(other)).toBe(true);

    // push: every file's 201 is lost once
    const dir = join(work, `pushed-${Date.now()}`);
    await mkdir(dir);
    await writeFile(join(dir, 'one.bin'), original);
    await writeFile(join(dir, 'two.txt'), 'two');
    fault = (req) =>
      (req.method === 'POST' || req.method === 'PUT') && isContent(req) ? 'lose201' : 'pass';
    proxy.seen.length = 0;
    const artifact = `lost201-${Date.now()}`;
    const pushed = await cli.run(['push', dir, '--name', artifact]);
    expect(pushed.exitCode, pushed.stderr).toBe(0);
    expect(proxy.seen.filter((s) => s.status === 423).length).toBeGreaterThan(0);
    expect(proxy.seen.filter((s) => s.method === 'DELETE')).toEqual([]);
    fault = () => 'pass';
    const back = join(work, `pulled-${Date.now()}`);
    const pulled = await cli.run(['pull', artifact, back]);
    expect(pulled.exitCode, pulled.stderr).toBe(0);
    expect((await readFile(join(back, 'one.bin'))).equals(original)).toBe(true);
    expect(await readFile(join(back, 'two.txt'), 'utf8')).toBe('two');
  });

  // A 409 to a chunk sent once (not a copy of an earlier one) said "the server did not confirm
  // the upload: no chunk was answered 201 Created", exit 7; it is the server's refusal, exit 5.
  // A 409 whose chunk the server did take (another copy of it won) still ends in a proved upload.
  it('a chunk refused with 409 at its first sending is exit 5 with the server line, unless the upload is proved', async () => {
    let chunks = 0;
    fault = (req) =>
      req.method === 'POST' && isContent(req) && ++chunks === 2 ? 'http409' : 'pass';
    const res = await cli.run(['upload', join(work, 'data.bin'), '--chunk-size', '256k']);
    expect(res.exitCode).toBe(5);
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      'fshare: injected 409 (the share it had created was deleted) (HTTP 409)',
    ]);
    chunks = 0;
    fault = (req) =>
      req.method === 'POST' && isContent(req) && ++chunks === 2 ? 'taken409' : 'pass';
    const taken = await cli.run([
      '--json',
      'upload',
      join(work, 'data.bin'),
      '--chunk-size',
      '256k',
    ]);
    expect(taken.exitCode, taken.stderr).toBe(0);
    expect(proxy.seen.filter((s) => s.url.endsWith('/content')).map((s) => s.status)).toEqual(
      expect.arrayContaining([201]),
    );
    const [share] = JSON.parse(taken.stdout) as { verified: boolean }[];
    expect(share!.verified).toBe(true);
  });

  it('retries an idempotent JSON request after a 5xx', async () => {
    let calls = 0;
    fault = (req) => (req.url === '/whoami' && ++calls === 1 ? 'http503' : 'pass');
    const res = await cli.run(['whoami']);
    expect(res.exitCode).toBe(0);
    expect(calls).toBe(2);
  });

  it('resumes a download cut mid-stream with Range and If-Range', async () => {
    const [share] = await cli.json<{ share_id: string }[]>(['upload', join(work, 'data.bin')]);
    let gets = 0;
    fault = (req) =>
      req.method === 'GET' && isContent(req) && ++gets === 1 ? { cutAfter: 200_000 } : 'pass';
    const out = join(work, 'cut.bin');
    const res = await cli.run(['get', share!.share_id, '-o', out]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect((await readFile(out)).equals(original)).toBe(true);
    const contentGets = proxy.seen.filter((s) => s.method === 'GET' && s.url.endsWith('/content'));
    expect(contentGets).toHaveLength(2);
    expect(contentGets[1]!.range).toMatch(/^bytes=\d+-$/);
    expect(contentGets[1]!.ifRange).toBeTruthy();
    expect(contentGets[1]!.status).toBe(206);
  });

  it('leaves NAME.part after giving up, and --continue finishes it', async () => {
    const [share] = await cli.json<{ share_id: string }[]>(['upload', join(work, 'data.bin')]);
    // The first download is cut after 300 kB (the bytes Node still buffered when the socket
    // died, up to ~80 kB, are lost, so the .part holds the rest); every retry is dropped.
    let gets = 0;
    fault = (req) =>
      req.method === 'GET' && isContent(req)
        ? gets++ === 0
          ? { cutAfter: 300_000 }
          : 'drop'
        : 'pass';
    const out = join(work, 'partial.bin');
    const broken = await cli.run(['get', share!.share_id, '-o', out]);
    expect(broken.exitCode).toBe(6);
    expect(broken.stderr.trimEnd().split('\n')).toHaveLength(1);
    expect(broken.stderr).toContain('--continue');
    const partSize = (await stat(`${out}.part`)).size;
    expect(partSize).toBeGreaterThan(0);
    expect(partSize).toBeLessThan(original.length);
    expect(existsSync(out)).toBe(false);

    fault = () => 'pass';
    proxy.seen.length = 0;
    const resumed = await cli.json<{ resumed_bytes: number; size: number; verified: boolean }>([
      'get',
      share!.share_id,
      '-o',
      out,
      '--continue',
    ]);
    expect(resumed).toEqual(
      expect.objectContaining({ resumed_bytes: partSize, size: original.length, verified: true }),
    );
    expect((await readFile(out)).equals(original)).toBe(true);
    const get = proxy.seen.find((s) => s.method === 'GET' && s.url.endsWith('/content'));
    expect(get?.range).toBe(`bytes=${partSize}-`);
    expect(get?.ifRange).toMatch(/^(W\/)?"/);
  });

  it('starts over when the share changed since the .part was written', async () => {
    const [share] = await cli.json<{ share_id: string }[]>(['upload', join(work, 'data.bin')]);
    // The first download is cut after 300 kB (the bytes Node still buffered when the socket
    // died, up to ~80 kB, are lost, so the .part holds the rest); every retry is dropped.
    let gets = 0;
    fault = (req) =>
      req.method === 'GET' && isContent(req)
        ? gets++ === 0
          ? { cutAfter: 300_000 }
          : 'drop'
        : 'pass';
    const out = join(work, 'changed.bin');
    expect((await cli.run(['get', share!.share_id, '-o', out])).exitCode).toBe(6);
    expect((await stat(`${out}.part`)).size).toBeGreaterThan(0);
    fault = () => 'pass';
    const changed = randomBytes(300_000);
    await writeFile(join(work, 'changed-src.bin'), changed);
    expect(
      (await cli.run(['replace', share!.share_id, join(work, 'changed-src.bin')])).exitCode,
    ).toBe(0);
    const res = await cli.run(['get', share!.share_id, '-o', out, '--continue']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr).toMatch(/changed/);
    expect((await readFile(out)).equals(changed)).toBe(true);
  });

  it('keeps using the token from the keyring-less store through the proxy', () => {
    expect(token).toMatch(/^[\w-]+\.[\w-]+\.[\w-]+$/);
  });
});
