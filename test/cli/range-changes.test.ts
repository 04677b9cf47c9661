// A download whose connection breaks is picked up in the same run from the bytes received. Where
// nothing checks the whole afterwards (a --range, never verified) the rest must be of the same
// content, or the download must fail: found from outside against `fshare serve` through a proxy
// that cut the first answer and let the share be replaced before the client came back. Here a
// small node:http stand-in plays that server (ETag, If-Range and Range as fshare serve answers
// them), so the cut and the replacement happen at a known byte.
import { createHash, randomUUID } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCli, tempDir, type Cli } from '../helpers/cli.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

interface Share {
  data: Buffer;
  /** Whether answers carry an ETag (a server without validators sends none). */
  etag: boolean;
  /** The content that replaces `data` when the first answer for the bytes is cut. */
  next: Buffer;
  requests: number;
}

/** Bytes of the first answer that reach the client before its connection is cut. */
const CUT_AT = 60_000;

/** Answers a content GET as fshare serve does: Range, and If-Range against the strong ETag. */
function answer(share: Share, req: IncomingMessage, res: ServerResponse): void {
  const data = share.data;
  const etag = `"${sha256(data)}"`;
  const headers: Record<string, string | number> = {
    'accept-ranges': 'bytes',
    'repr-digest': `sha-256=:${Buffer.from(sha256(data), 'hex').toString('base64')}:`,
  };
  if (share.etag) headers.etag = etag;
  const m = /^bytes=(\d*)-(\d*)$/.exec(req.headers.range ?? '');
  const ifRange = req.headers['if-range'];
  let [start, end] = [0, data.length - 1];
  if (!m || (ifRange !== undefined && (!share.etag || ifRange !== etag))) {
    res.writeHead(200, { ...headers, 'content-length': data.length });
  } else {
    start = m[1] === '' ? Math.max(0, data.length - Number(m[2])) : Number(m[1]);
    if (m[1] !== '' && m[2] !== '') end = Math.min(Number(m[2]), end);
    res.writeHead(206, {
      ...headers,
      'content-range': `bytes ${start}-${end}/${data.length}`,
      'content-length': end - start + 1,
    });
  }
  if (++share.requests > 1) {
    res.end(data.subarray(start, end + 1));
    return;
  }
  // The first answer: part of the old bytes, then the share is replaced, then the cut.
  res.write(data.subarray(start, start + CUT_AT), () => {
    share.data = share.next;
    res.socket?.destroy();
  });
}

describe('a cut download is resumed only from the same content', () => {
  let cli: Cli;
  let work: string;
  let server: ReturnType<typeof createServer>;
  let at: string[];
  const shares = new Map<string, Share>();
  const env = { FSHARE_TOKEN: 'secret-token-value' };

  const addShare = (etag: boolean) => {
    const id = randomUUID();
    const share: Share = {
      data: Buffer.alloc(200_000, 'A'),
      next: Buffer.alloc(200_000, 'B'),
      etag,
      requests: 0,
    };
    shares.set(id, share);
    return { id, share };
  };

  beforeAll(async () => {
    cli = await createCli();
    work = await tempDir('range-changes');
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
      if (m[2]) return answer(share, req, res);
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          share_id: m[1],
          file_name: 'big.bin',
          owner_name: null,
          initialized: true,
          locked: false,
          create_date: '2026-01-01T00:00:00',
          size: share.data.length,
          sha256: sha256(share.data),
        }),
      );
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    at = ['--server', `http://127.0.0.1:${(server.address() as AddressInfo).port}`];
  });

  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise((r) => server?.close(r));
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  // Found: `get --range 0-149999 -o -` resumed the cut answer without If-Range (a stream keeps no
  // validator), so 60,000 old bytes were followed by 90,000 bytes of the content that replaced
  // them, exit 0 (a range is never verified). The resume now carries the first answer's ETag in
  // If-Range; the server's 200 says the share changed: exit 1, and only old bytes were written.
  it('--range to standard output, the share replaced during a cut: exit 1, never a mix', async () => {
    for (const range of ['0-149999', '-150000']) {
      const { id } = addShare(true);
      const res = await cli.runBinary([...at, 'get', id, '--range', range, '-o', '-'], { env });
      expect(res.exitCode, res.stderr).toBe(1);
      expect(res.stderr.trimEnd()).toBe('fshare: the share changed during the download');
      expect(res.stdout.includes('B'), 'bytes of the new content were written').toBe(false);
      expect(res.stdout.length).toBeLessThanOrEqual(CUT_AT);
    }
  });

  // Found: the same with the whole content to standard output wrote the mix and only then failed
  // its digest (exit 7); it now stops where the old bytes end, as a download to a file does.
  it('the whole content to standard output, replaced during a cut: exit 1, only old bytes', async () => {
    const { id } = addShare(true);
    const res = await cli.runBinary([...at, 'get', id, '-o', '-'], { env });
    expect(res.exitCode, res.stderr).toBe(1);
    expect(res.stderr.trimEnd()).toBe('fshare: the share changed during the download');
    expect(res.stdout.includes('B'), 'bytes of the new content were written').toBe(false);
    expect(res.stdout.length).toBeLessThanOrEqual(CUT_AT);
  });

  // Found: against a server that gives no validator (no ETag, no Last-Modified) a cut --range was
  // resumed blindly: the same mix, exit 0. It is now not resumed: exit 6 with one line, and the
  // .part's hint no longer says `--continue`, which cannot be combined with --range.
  it('--range from a server without validators is not resumed after a cut: exit 6, one line', async () => {
    const { id } = addShare(false);
    const out = join(work, 'range.bin');
    const res = await cli.run([...at, 'get', id, '--range', '0-149999', '-o', out], { env });
    expect(res.exitCode, res.stderr).toBe(6);
    const lines = res.stderr.trimEnd().split('\n');
    expect(lines, res.stderr).toHaveLength(1);
    expect(lines[0]).toMatch(
      /^fshare: download from .* broke off: .*\(not resumed: the server gives no validator \(ETag or Last-Modified\) to ask for the same content with\); 60000 bytes kept in .*range\.bin\.part, run the command again for the whole range$/,
    );
    expect(existsSync(out)).toBe(false);
    const piped = await cli.runBinary(
      [...at, 'get', addShare(false).id, '--range', '0-149999', '-o', '-'],
      {
        env,
      },
    );
    expect(piped.exitCode, piped.stderr).toBe(6);
    expect(piped.stdout.includes('B'), 'bytes of the new content were written').toBe(false);
  });

  // Found: `get ID --range ""` (a script's `--range "$R"` with R unset) downloaded the whole
  // content, exit 0: an empty option was taken for none. It is a usage error, before any request.
  it('an empty --range is exit 2 with one line, and asks the server nothing', async () => {
    const { id, share } = addShare(true);
    const out = join(work, 'empty-range.bin');
    for (const range of ['', ' ']) {
      const res = await cli.run([...at, 'get', id, '--range', range, '-o', out], { env });
      expect(res.exitCode, res.stderr).toBe(2);
      expect(res.stderr.trimEnd()).toBe(
        `fshare: not a byte range (A-B, A- or -N): ${JSON.stringify(range)}`,
      );
      const both = await cli.run([...at, 'get', id, '--range', range, '--continue', '-o', out], {
        env,
      });
      expect(both.exitCode, both.stderr).toBe(2);
      expect(both.stderr.trimEnd()).toBe('fshare: --continue and --range cannot be combined');
    }
    expect(share.requests).toBe(0);
    expect(existsSync(out)).toBe(false);
  });

  // Found from outside: `get ID -o ""` (a script's `-o "$OUT"` with OUT unset) wrote the whole
  // content to standard output and left a file named `.part` in the current directory, exit 1.
  it('an empty -o is exit 2 with one line, writes nothing anywhere, and asks the server nothing', async () => {
    const { id, share } = addShare(true);
    const cwd = await mkdtemp(join(work, 'empty-o-'));
    for (const args of [['-o', ''], ['--output=']]) {
      const res = await cli.run([...at, 'get', id, ...args], { env, cwd });
      expect(res.exitCode, res.stderr).toBe(2);
      expect(res.stderr.trimEnd()).toBe(
        'fshare: -o needs a path, or - for standard output; it was empty',
      );
      expect(res.stdout).toBe('');
    }
    expect(share.requests).toBe(0);
    expect(await readdir(cwd)).toEqual([]);
  });
});
