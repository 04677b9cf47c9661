// Downloads from a server (or a proxy) that lies about what it sends: the client saves under the
// final name only bytes it has checked, and says in one line what was wrong. Each case was found
// by running the CLI against a lying proxy; here a small node:http stand-in plays that proxy.
import { randomBytes, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, stat } from 'node:fs/promises';
import {
  createServer,
  type IncomingMessage,
  type OutgoingHttpHeaders,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { createCli, tempDir, type Cli } from '../helpers/cli.js';
import { sha256hex as sha256 } from '../helpers/http.js';

function expectOneLine(stderr: string, pattern: RegExp): void {
  const lines = stderr.trimEnd().split('\n');
  expect(lines, stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: /);
  expect(lines[0]).toMatch(pattern);
}

interface FakeShare {
  data: Buffer;
  /** What GET /files/<id> says; default: the data's size and sha256. */
  size?: number | null;
  sha256?: string | null;
}

type Content = (share: FakeShare, req: IncomingMessage, res: ServerResponse, n: number) => void;

/** Answers a content GET as a plain server does (Range honoured), with `extra` headers. */
function honest(
  share: FakeShare,
  req: IncomingMessage,
  res: ServerResponse,
  extra: OutgoingHttpHeaders = {},
) {
  const data = share.data;
  const m = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
  if (!m) {
    res.writeHead(200, { 'content-length': data.length, ...extra });
    res.end(req.method === 'HEAD' ? undefined : data);
    return;
  }
  const start = m[1] === '' ? Math.max(0, data.length - Number(m[2])) : Number(m[1]);
  const end =
    m[1] === '' || m[2] === '' ? data.length - 1 : Math.min(Number(m[2]), data.length - 1);
  res.writeHead(206, {
    'content-range': `bytes ${start}-${end}/${data.length}`,
    'content-length': end - start + 1,
    ...extra,
  });
  res.end(req.method === 'HEAD' ? undefined : data.subarray(start, end + 1));
}

describe('a download from a server that lies is never saved as done', () => {
  let cli: Cli;
  let work: string;
  let server: ReturnType<typeof createServer>;
  let at: string[];
  const shares = new Map<string, FakeShare>();
  const plain: Content = (share, req, res) => honest(share, req, res);
  let content: Content = plain;
  let requests = 0;
  const env = { FSHARE_TOKEN: 'secret-token-value' };

  const addShare = (share: FakeShare) => {
    const id = randomUUID();
    shares.set(id, share);
    return id;
  };

  beforeAll(async () => {
    cli = await createCli();
    work = await tempDir('lies');
    server = createServer((req, res) => {
      req.resume();
      res.on('error', () => undefined);
      const m = /^\/files\/([0-9a-f-]{36})(\/content)?$/.exec(req.url ?? '');
      const share = m ? shares.get(m[1]!) : undefined;
      if (!m || !share) {
        res.writeHead(404, { 'content-type': 'application/json' });
        res.end('{"status":"fail","message":"No share with this id"}');
        return;
      }
      if (!m[2]) {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            share_id: m[1],
            file_name: 'big.bin',
            owner_name: null,
            initialized: true,
            locked: false,
            create_date: '2026-01-01T00:00:00',
            size: share.size === undefined ? share.data.length : share.size,
            sha256: share.sha256 === undefined ? sha256(share.data) : share.sha256,
          }),
        );
        return;
      }
      content(share, req, res, ++requests);
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    at = ['--server', `http://127.0.0.1:${(server.address() as AddressInfo).port}`];
  });

  beforeEach(() => {
    content = plain;
    requests = 0;
  });

  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  // Found: two `get`s to the same -o wrote the same NAME.part; the first renamed it and said
  // "verified" while the second went on writing through its descriptor, so NAME held the other
  // share's bytes. Now the .part is locked for the whole download: the second stops at once.
  it('two gets to the same -o: the second stops with one line (exit 5), the first saves only its own verified bytes', async () => {
    const first = randomBytes(3_000_000);
    const second = randomBytes(3_000_000);
    const idA = addShare({ data: first });
    const idB = addShare({ data: second });
    let release!: () => void;
    const released = new Promise<void>((r) => (release = r));
    content = (share, req, res) => {
      if (share.data !== first || req.headers.range || req.method === 'HEAD')
        return honest(share, req, res);
      // The first download gets half (its first MiB written to the .part), then waits until the
      // test lets it finish.
      res.writeHead(200, { 'content-length': first.length });
      res.write(first.subarray(0, 1_500_000));
      void released.then(() => res.end(first.subarray(1_500_000)));
    };
    const out = join(work, 'same.bin');
    const spawnGet = (args: string[]) => cli.start([...at, 'get', ...args], { env });
    try {
      const a = spawnGet([idA, '-o', out]);
      for (
        let i = 0;
        i < 200 && ((await stat(`${out}.part`).catch(() => null))?.size ?? 0) < 1;
        i++
      )
        await sleep(25);
      expect((await stat(`${out}.part`)).size).toBeGreaterThan(0);
      const b = await cli.run([...at, 'get', idB, '-o', out], { env });
      expect(b.exitCode, b.stderr).toBe(5);
      expectOneLine(
        b.stderr,
        /^fshare: another fshare is writing .*same\.bin\.part; wait for it or choose another -o$/,
      );
      // --continue of the same .part at once is refused the same way.
      const c = await cli.run([...at, 'get', idA, '-o', out, '--continue'], { env });
      expect(c.exitCode, c.stderr).toBe(5);
      expectOneLine(c.stderr, /another fshare is writing .*same\.bin\.part/);
      release();
      const done = await a;
      expect(done.exitCode, done.stderr).toBe(0);
      expect(done.stdout).toMatch(/verified sha256/);
      expect(sha256(await readFile(out))).toBe(sha256(first));
      expect(existsSync(`${out}.part`)).toBe(false);
    } finally {
      release();
    }
  });

  // Found: the first GET cut half way, the resume answered `206 bytes 1500000-2249999/3000000`
  // (no digest, no validator, share sha256 null) was saved as the whole file, exit 0. (A server
  // with neither validator nor digest is no longer resumed at all: this one gives a strong ETag.)
  it('a resume answered with a shorter 206 is exit 1 with one line; nothing under the name, the .part kept', async () => {
    const data = randomBytes(300_000);
    const id = addShare({ data, sha256: null });
    const etag = '"short206"';
    content = (share, req, res, n) => {
      if (n === 1) {
        res.writeHead(200, { 'content-length': data.length, etag });
        res.write(data.subarray(0, 150_000), () => res.socket?.destroy());
        return;
      }
      const start = Number(/^bytes=(\d+)-$/.exec(req.headers.range ?? '')?.[1] ?? 0);
      const end = start + Math.floor((data.length - 1 - start) / 2);
      res.writeHead(206, {
        'content-range': `bytes ${start}-${end}/${data.length}`,
        'content-length': end - start + 1,
        etag,
      });
      res.end(data.subarray(start, end + 1));
    };
    const out = join(work, 'short206.bin');
    const res = await cli.run([...at, 'get', id, '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(1);
    expectOneLine(
      res.stderr,
      /^fshare: the server answered bytes 150000-224999\/300000 to a request for bytes 150000-299999$/,
    );
    expect(existsSync(out)).toBe(false);
    expect((await stat(`${out}.part`)).size).toBe(150_000);

    // To standard output: the same failure, never exit 0.
    requests = 0;
    const piped = await cli.runBinary([...at, 'get', id, '-o', '-'], { env });
    expect(piped.exitCode, piped.stderr).toBe(1);
    expectOneLine(piped.stderr, /the server answered bytes 150000-224999\/300000/);
  });

  // Found: `--range 0-99` answered `206 bytes 0-49/5000` saved 50 bytes, exit 0.
  it('a --range answered with fewer bytes than asked is exit 1; nothing saved under the name', async () => {
    const data = randomBytes(5000);
    const id = addShare({ data });
    content = (share, req, res) => {
      res.writeHead(206, { 'content-range': 'bytes 0-49/5000', 'content-length': 50 });
      res.end(data.subarray(0, 50));
    };
    const out = join(work, 'range.bin');
    const res = await cli.run([...at, 'get', id, '--range', '0-99', '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(1);
    expectOneLine(
      res.stderr,
      /^fshare: the server answered bytes 0-49\/5000 to a request for bytes 0-99$/,
    );
    expect(existsSync(out)).toBe(false);
  });

  // Found: a 200 whose Content-Length was 100 less than the share's size (and its body as short),
  // no digest, saved 2,999,900 bytes as the file, exit 0.
  it('a 200 shorter than the share is exit 1, to a file and to standard output', async () => {
    const data = randomBytes(300_000);
    const id = addShare({ data, sha256: null });
    content = (share, req, res) => {
      res.writeHead(200, { 'content-length': data.length - 100 });
      res.end(data.subarray(0, data.length - 100));
    };
    const out = join(work, 'short200.bin');
    const res = await cli.run([...at, 'get', id, '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(1);
    expectOneLine(
      res.stderr,
      /^fshare: the server answered 299900 bytes for a share of 300000 bytes$/,
    );
    expect(existsSync(out)).toBe(false);
    const piped = await cli.runBinary([...at, 'get', id, '-o', '-'], { env });
    expect(piped.exitCode, piped.stderr).toBe(1);
    expect(piped.stdout.length).toBe(0);
    expectOneLine(piped.stderr, /299900 bytes for a share of 300000 bytes/);
  });

  // A body that ends before what was announced is an incomplete download, never a success: a
  // chunked 200 that ended 100 bytes short of the share was "download incomplete" at once; it is
  // now cut short like a broken connection, and the rest is fetched in the same run.
  it('a chunked body that ends early is resumed in the same run and verified', async () => {
    const data = randomBytes(300_000);
    const id = addShare({ data });
    content = (share, req, res, n) => {
      if (n > 1) return honest(share, req, res);
      res.writeHead(200, {});
      res.end(data.subarray(0, data.length - 100)); // chunked: its end looks like the end
    };
    const out = join(work, 'chunked.bin');
    const res = await cli.run([...at, 'get', id, '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/verified sha256/);
    expect(await readFile(out)).toEqual(data);
  });

  // Found: a server answering the share's sha256 in upper case, with the right bytes, was a
  // mismatch (exit 7).
  it('an upper-case sha256 from the server verifies the right bytes', async () => {
    const data = randomBytes(10_000);
    const id = addShare({ data, sha256: sha256(data).toUpperCase() });
    const out = join(work, 'upper.bin');
    const res = await cli.run([...at, 'get', id, '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout).toMatch(/verified sha256/);
    expect(await readFile(out)).toEqual(data);
  });

  // Found: a share whose sha256 was the number 12345 made `get` of flipped bytes say "could not
  // be verified", save the file and exit 0: the record's wrong shape was taken as no digest.
  it('a share record of the wrong shape (sha256 12345) stops the download: exit 1, nothing saved', async () => {
    const data = randomBytes(10_000);
    const flipped = Buffer.from(data);
    flipped[5] ^= 0xff;
    const id = addShare({ data: flipped, sha256: 12345 as unknown as string });
    const out = join(work, 'wrong-shape.bin');
    const res = await cli.run([...at, 'get', id, '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(1);
    expectOneLine(res.stderr, /answer to GET \/files\/[0-9a-f-]{36} is not /);
    expect(existsSync(out)).toBe(false);
  });

  // Found: a 300-byte name from Content-Disposition cut to 240 bytes plus `.0-999999999999999`
  // plus `.part` passed 255 bytes: ENAMETOOLONG, raw. The name now leaves room for both, and a
  // name too long for the file system is one translated line.
  it('a long name from the server with a --range suffix fits; a name too long is one line', async () => {
    const data = randomBytes(3000);
    const id = addShare({ data });
    content = (share, req, res) =>
      honest(share, req, res, {
        'content-disposition': `attachment; filename="${'y'.repeat(300)}"`,
      });
    const dir = join(work, 'long');
    await mkdir(dir);
    const res = await cli.run([...at, 'get', id, '--range', '0-999999999999999', '-o', `${dir}/`], {
      env,
    });
    expect(res.exitCode, res.stderr).toBe(0);
    const [name] = await readdir(dir);
    expect(name).toMatch(/^y+\.0-999999999999999$/);
    expect(Buffer.byteLength(`${name}.part`)).toBeLessThanOrEqual(255);
    expect(await readFile(join(dir, name!))).toEqual(data);

    const tooLong = join(work, 'z'.repeat(300));
    const bad = await cli.run([...at, 'get', id, '-o', tooLong], { env });
    expect(bad.exitCode, bad.stderr).toBe(1);
    expectOneLine(bad.stderr, /^fshare: file name too long: .*z{300}$/);
  });

  // Found: a 304 to a GET that asked for no condition was described as a redirect without a
  // Location.
  it('a 304 to an unconditional get says so: exit 1, one line', async () => {
    const id = addShare({ data: randomBytes(100) });
    content = (share, req, res) => {
      res.writeHead(304);
      res.end();
    };
    const out = join(work, 'not-modified.bin');
    const res = await cli.run([...at, 'get', id, '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(1);
    expectOneLine(
      res.stderr,
      /^fshare: the server answered 304 Not Modified to a request that asked for no condition \(HTTP 304\)$/,
    );
    expect(existsSync(out)).toBe(false);
  });
});
