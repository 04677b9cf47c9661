// `fshare get <share link URL>` (docs/CLI.md "fshare get", "Share links"): the built binary
// downloads a link as anyone given it would, without an account or a token, verified against the
// sha256 the link states, against a real `fshare serve` (through a recording proxy where the test
// must see or break the requests) and against a server that lies about the bytes.
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingMessage, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import type { TransferShape } from '../../src/cli/shapes.js';
import type { Link } from '../../src/shared/types.js';
import { createCli, signIn, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';
import { startFaultProxy, type Fault } from '../helpers/fault-proxy.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

type Transfer = TransferShape;

/** One line on stderr, in CLI.md's shape. */
function oneLine(stderr: string): string {
  const lines = stderr.trimEnd().split('\n');
  expect(lines, stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: \S/);
  return lines[0]!;
}

describe('fshare get of a share link, against fshare serve', () => {
  let serve: Serve;
  let owner: Cli;
  let proxy: ReturnType<typeof startFaultProxy>;
  let fault: (req: IncomingMessage) => Fault | Promise<Fault> = () => 'pass';
  let proxyUrl: string;
  let work: string;
  let data: Buffer;
  let file: string;

  beforeAll(async () => {
    serve = await startServe();
    owner = await createCli();
    await signIn(owner, serve.url);
    proxy = startFaultProxy(serve.url, (req) => fault(req));
    proxyUrl = await proxy.url;
    work = await tempDir('link-get');
    data = randomBytes(3_000_017);
    file = join(work, 'report.bin');
    await writeFile(file, data);
  });

  afterAll(async () => {
    await proxy?.close();
    await serve?.stop();
    for (const dir of [owner?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  beforeEach(() => {
    proxy.seen.length = 0;
    fault = () => 'pass';
  });

  /** A new share of the test file, and a link to it (args for `fshare link`), through the proxy. */
  const linked = async (args: string[] = [], input?: string) => {
    const [up] = await owner.json<{ share_id: string }[]>(['upload', file]);
    const link = await owner.json<Link>(['link', up!.share_id, ...args], { input });
    return {
      share: up!.share_id,
      link,
      url: link.url!.replace(serve.url, proxyUrl),
    };
  };

  const downloadsOf = async (share: string, id: string) =>
    (await owner.json<Link[]>(['links', share])).find((l) => l.id === id)!.downloads;

  /** Someone with the link and nothing else: a config of their own, never signed in. */
  const stranger = () => createCli();

  // Property: a link is downloaded as its page offers it, by anyone given it, with no account,
  // and verified: the bytes saved under the share's name are the ones whose sha256 the link
  // states, and the download counts once. Found: `fshare get <link>` was refused (exit 2,
  // "download a link with curl"), and curl checks nothing.
  it('downloads a link without signing in: the share name, verified, counted once', async () => {
    const { share, link, url } = await linked();
    const anyone = await stranger();
    const dir = await tempDir('link-get-out');
    try {
      const res = await anyone.run(['get', url], { cwd: dir });
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stdout.trim()).toBe('Saved report.bin (2.9 MiB, verified sha256)');
      expect((await readFile(join(dir, 'report.bin'))).equals(data)).toBe(true);
      expect(await readdir(dir)).toEqual(['report.bin']);
      expect(await downloadsOf(share, link.id)).toBe(1);
      // The download names the content the link stated, so nothing else can be saved under it.
      const gets = proxy.seen.filter((s) => s.url.includes('?download'));
      expect(gets.map((s) => s.url)).toEqual([
        `${new URL(link.url!).pathname}?download&sha256=${sha256(data)}`,
      ]);

      // The page's download URL is a link too; --json says what was saved and that it was
      // checked, with no share id or URL (a link does not say which share it is for).
      const out = join(dir, 'again.bin');
      const json = await anyone.json<Transfer>(['get', `${url}?download`, '-o', out]);
      expect(json).toEqual({
        share_id: null,
        url: null,
        file_name: 'again.bin',
        path: out,
        size: data.length,
        sha256: sha256(data),
        verified: true,
        resumed_bytes: 0,
        expires: null,
        link: null,
      });
      expect(await downloadsOf(share, link.id)).toBe(2);
    } finally {
      await rm(dir, { recursive: true, force: true });
      await rm(anyone.configDir, { recursive: true, force: true });
    }
  });

  // Property: a link URL (which may come from anyone) never gets our token. Found: not sending
  // it was a choice to make, since the link may be on the very server FSHARE_TOKEN is for.
  it('sends no token to the link, not even the one FSHARE_TOKEN holds for that server', async () => {
    const { url } = await linked();
    const token = (await owner.json<{ token: string }>(['token'])).token;
    const out = join(work, 'no-token.bin');
    const res = await owner.run(['get', url, '-o', out], {
      env: { FSHARE_TOKEN: token, FSHARE_SERVER: proxyUrl },
    });
    expect(res.exitCode, res.stderr).toBe(0);
    expect(proxy.seen.length).toBeGreaterThan(1);
    expect(proxy.seen.filter((s) => s.authorization !== undefined)).toEqual([]);
  });

  // Property: the link's token (which is the link) is never shown by fshare, as the server's log
  // never shows it. Found: --debug's retry line named the request's path, /l/<token>.
  it('--debug never shows the link token: a retried download is named /l/[token]', async () => {
    const { link, url } = await linked();
    const token = new URL(link.url!).pathname.split('/').pop()!;
    let downloads = 0;
    fault = (req) => (req.url?.includes('?download') && ++downloads === 1 ? 'http503' : 'pass');
    const res = await owner.run(['get', url, '-o', join(work, 'debug.bin'), '--debug']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(downloads).toBe(2);
    expect(res.stderr).toMatch(
      /GET \/l\/\[token\]\?download&sha256=[0-9a-f]{64} answered 503; retrying/,
    );
    expect(res.stderr + res.stdout).not.toContain(token);
  });

  // Property: --debug says every retry, a body cut and resumed too. Found from outside: a
  // download whose body broke off and was resumed in the same run printed nothing.
  it('--debug says a body cut and resumed, the link token hidden', async () => {
    const { link, url } = await linked();
    const token = new URL(link.url!).pathname.split('/').pop()!;
    let downloads = 0;
    fault = (req) =>
      req.url?.includes('?download') && ++downloads === 1 ? { cutAfter: 1_000_000 } : 'pass';
    const res = await owner.run(['get', url, '-o', join(work, 'debug-cut.bin'), '--debug']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(downloads).toBe(2);
    expect(res.stderr).toMatch(
      /GET \/l\/\[token\]\?download&sha256=[0-9a-f]{64}: the body broke off after 1000000 bytes \(.+\); resuming in [\d.]+ s \(attempt 2 of 5\)/,
    );
    expect(res.stderr + res.stdout).not.toContain(token);
    expect((await readFile(join(work, 'debug-cut.bin'))).equals(data)).toBe(true);
  });

  // Property: a password link asks for its password and gives nothing without it: no bytes, no
  // count. Without a terminal and without --password-stdin it says how to give it (exit 3); a
  // wrong one is the server's 401 (exit 3); the right one on stdin downloads.
  it('a password link: refused without it or with a wrong one, downloaded with --password-stdin', async () => {
    const { share, link, url } = await linked(['--password-stdin'], 'link-secret-1');
    const out = join(work, 'locked.bin');
    const none = await owner.run(['get', url, '-o', out]);
    expect(none.exitCode, none.stderr).toBe(3);
    expect(oneLine(none.stderr)).toBe(
      'fshare: This link needs a password; give it with --password-stdin (HTTP 401)',
    );
    const wrong = await owner.run(['get', url, '-o', out, '--password-stdin'], {
      input: 'not-it\n',
    });
    expect(wrong.exitCode, wrong.stderr).toBe(3);
    expect(oneLine(wrong.stderr)).toBe('fshare: Wrong password for this link (HTTP 401)');
    expect(existsSync(out) || existsSync(`${out}.part`)).toBe(false);
    expect(await downloadsOf(share, link.id)).toBe(0);

    const right = await owner.json<Transfer>(['get', url, '-o', out, '--password-stdin'], {
      input: 'link-secret-1\n',
    });
    expect(right).toMatchObject({ size: data.length, verified: true, sha256: sha256(data) });
    expect((await readFile(out)).equals(data)).toBe(true);
    expect(await downloadsOf(share, link.id)).toBe(1);
  });

  // Property: a download cut in the middle goes on from the bytes received, and is still one
  // download: a link with one download left is not used up by its own resume.
  it('a cut download of a one-download link resumes (Range + If-Range) and counts once', async () => {
    const { share, link, url } = await linked(['--max-downloads', '1']);
    let downloads = 0;
    fault = (req) =>
      req.url?.includes('?download') && ++downloads === 1 ? { cutAfter: 1_000_000 } : 'pass';
    const out = join(work, 'cut.bin');
    const res = await owner.json<Transfer>(['get', url, '-o', out]);
    expect(res).toMatchObject({ size: data.length, verified: true });
    expect((await readFile(out)).equals(data)).toBe(true);
    const gets = proxy.seen.filter((s) => s.url.includes('?download'));
    expect(gets).toHaveLength(2);
    expect(gets[1]!.range).toMatch(/^bytes=[1-9]\d*-$/);
    expect(gets[1]!.ifRange).toBeTruthy();
    expect(gets[1]!.status).toBe(206);
    expect(await downloadsOf(share, link.id)).toBe(1);

    // Used up now: one line, exit 1, nothing written.
    const again = await owner.run(['get', url, '-o', join(work, 'cut-again.bin')]);
    expect(again.exitCode, again.stderr).toBe(1);
    expect(oneLine(again.stderr)).toBe(
      'fshare: This link has reached its download limit (HTTP 410)',
    );
    expect(existsSync(join(work, 'cut-again.bin'))).toBe(false);
  });

  // Property: a download of a link's last download, cut and given up, goes on in a later run
  // (`get --continue`) within the resume window, as it does within one run; the link still counts
  // one. Found from outside: the later run read the link's page first, which a used-up link
  // answered 410, and it could not resume at all. Others still find the link used up.
  it('a one-download link cut and given up resumes in a later run with --continue; counted once', async () => {
    const { share, link, url } = await linked(['--max-downloads', '1']);
    let downloads = 0;
    fault = (req) => {
      if (!req.url?.includes('?download')) return 'pass';
      return ++downloads === 1 ? { cutAfter: 1_000_000 } : 'drop';
    };
    const out = join(work, 'given-up.bin');
    const first = await owner.run(['get', url, '-o', out]);
    expect(first.exitCode, first.stderr).toBe(6);
    expect(existsSync(`${out}.part`)).toBe(true);
    expect(await downloadsOf(share, link.id)).toBe(1);

    fault = () => 'pass';
    proxy.seen.length = 0;
    const later = await owner.json<Transfer>(['get', url, '-o', out, '--continue']);
    expect(later).toMatchObject({ size: data.length, verified: true, sha256: sha256(data) });
    expect((await readFile(out)).equals(data)).toBe(true);
    const resumed = proxy.seen.filter((s) => s.method === 'GET' && s.url.includes('?download'));
    expect(resumed).toHaveLength(1);
    expect(resumed[0]!.range).toMatch(/^bytes=[1-9]\d*-$/);
    expect(resumed[0]!.status).toBe(206);
    expect(await downloadsOf(share, link.id)).toBe(1);

    // Anyone else, or this address from byte 0: the link is used up.
    const fresh = await owner.run(['get', url, '-o', join(work, 'given-up-again.bin')]);
    expect(fresh.exitCode, fresh.stderr).toBe(1);
    expect(oneLine(fresh.stderr)).toBe(
      'fshare: This link has reached its download limit (HTTP 410)',
    );
  }, 60_000);

  // Property: the bytes saved are the content the link stated, never content that replaced it
  // while the download started. The share is replaced between the link's description and the
  // download's request: the server refuses (412), nothing is saved, nothing counted.
  it('a share replaced after the link was read: 412, nothing saved, the download not counted', async () => {
    const { share, link, url } = await linked();
    const other = join(work, 'other.bin');
    await writeFile(other, randomBytes(4_000));
    fault = async (req): Promise<Fault> => {
      if (!req.url?.includes('?download')) return 'pass';
      const res = await owner.run(['replace', share, other]);
      expect(res.exitCode, res.stderr).toBe(0);
      return 'pass';
    };
    const out = join(work, 'replaced.bin');
    const res = await owner.run(['get', url, '-o', out]);
    expect(res.exitCode, res.stderr).toBe(1);
    expect(oneLine(res.stderr)).toBe(
      'fshare: the share was replaced as the download started, and nothing was saved; run the command again for the new content (HTTP 412)',
    );
    expect(existsSync(out)).toBe(false);
    expect(await downloadsOf(share, link.id)).toBe(0);

    // A URL naming a sha256 (the page's Download button) that is no longer the content's:
    // refused before anything is downloaded.
    fault = () => 'pass';
    const named = await owner.run(['get', `${url}?download&sha256=${sha256(data)}`, '-o', out]);
    expect(named.exitCode, named.stderr).toBe(1);
    expect(oneLine(named.stderr)).toContain(
      `the link's content is no longer the one its URL names (sha256 ${sha256(data)}): it now has sha256 `,
    );
    expect(existsSync(out)).toBe(false);
  });

  // Property: what is not a link's URL is said in one line before any request (and credentials in
  // one, which would never be sent, are refused without being echoed).
  it('a malformed link token or sha256=, or --password-stdin for a share: exit 2, no request', async () => {
    const { share } = await linked();
    for (const [args, line] of [
      [['get', `${proxyUrl}/l/short`], `fshare: not a share link's token in ${proxyUrl}/l/short`],
      [
        ['get', `${proxyUrl}/l/${'a'.repeat(32)}?sha256=abc`],
        "fshare: the link's sha256= is not a sha256: abc",
      ],
      [
        ['get', share, '--password-stdin'],
        "fshare: --password-stdin is for a share link's password",
      ],
      [
        ['get', `${proxyUrl.replace('//', '//ann:secret@')}/l/${'a'.repeat(32)}`],
        `fshare: a user name or password in a share link's URL is never sent: leave it out of ${proxyUrl}/l/${'a'.repeat(32)}`,
      ],
      // A share's URL too (found from outside: http://files.example.com@HOST/files/ID
      // downloaded from HOST, exit 0: a look-alike host).
      [
        ['get', `${proxyUrl.replace('//', '//files.example.com@')}/files/${share}`],
        `fshare: a user name or password in a share's URL is never sent: leave it out of ${proxyUrl}/files/${share}`,
      ],
      [
        ['info', `${proxyUrl.replace('//', '//ann:secret@')}/files/${share}`],
        `fshare: a user name or password in a share's URL is never sent: leave it out of ${proxyUrl}/files/${share}`,
      ],
      // Whatever else is wrong with the URL, the password is never echoed.
      [
        ['info', `${proxyUrl.replace('//', '//ann:secret@')}/files/nope`],
        `fshare: a user name or password in a share's URL is never sent: leave it out of ${proxyUrl}/files/nope`,
      ],
      [
        ['info', `${proxyUrl.replace('//', '//ann:secret@')}/l/abc`],
        `fshare: a user name or password in a share's URL is never sent: leave it out of ${proxyUrl}/l/abc`,
      ],
      [
        ['get', `${proxyUrl.replace('//', '//ann:secret@')}/files/`],
        `fshare: a user name or password in a share's URL is never sent: leave it out of ${proxyUrl}/files/`,
      ],
    ] as const) {
      const res = await owner.run([...args], { input: 'x\n' });
      expect(res.exitCode, res.stderr).toBe(2);
      expect(oneLine(res.stderr)).toBe(line);
    }
    expect(proxy.seen).toEqual([]);
  });
});

describe('fshare get of a share link whose server lies', () => {
  let server: Server;
  let url: string;
  let work: string;
  const real = randomBytes(200_000);
  const sent = Buffer.from(real);
  sent[100_000] ^= 0xff;
  /** The next download answer states the sent bytes' own sha256 in Repr-Digest. */
  let reprDigest = false;

  beforeAll(async () => {
    // States the real content's size and sha256, and sends other bytes (one flipped) with no
    // digest header of its own: only the link's stated sha256 can catch it.
    server = createServer((req, res) => {
      if (req.url?.includes('?download')) {
        res.writeHead(200, {
          'content-type': 'application/octet-stream',
          'content-length': sent.length,
          'content-disposition': 'attachment; filename="lie.bin"',
          etag: '"x"',
          ...(reprDigest
            ? {
                'repr-digest': `sha-256=:${createHash('sha256').update(sent).digest('base64')}:`,
              }
            : {}),
        });
        res.end(sent);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(
        JSON.stringify({
          file_name: 'lie.bin',
          size: real.length,
          sha256: sha256(real),
          expires: null,
          downloads_left: null,
        }),
      );
    });
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/l/${'b'.repeat(32)}`;
    work = await tempDir('link-lie');
  });

  afterAll(async () => {
    server?.closeAllConnections();
    await new Promise<void>((done) => server?.close(() => done()));
    if (work) await rm(work, { recursive: true, force: true });
  });

  // Property: the client verifies what it received against what the link stated: other bytes
  // are exit 7, never saved under the name (kept in NAME.part, as for a share).
  it('other bytes than the link stated: exit 7, nothing saved under the name', async () => {
    const cli = await createCli();
    try {
      const res = await cli.run(['get', url], { cwd: work });
      expect(res.exitCode, res.stderr).toBe(7);
      expect(oneLine(res.stderr)).toBe(
        `fshare: the downloaded bytes have sha256 ${sha256(sent)}, not the server's ${sha256(real)}; they are kept in lie.bin.part`,
      );
      expect(existsSync(join(work, 'lie.bin'))).toBe(false);
    } finally {
      await rm(cli.configDir, { recursive: true, force: true });
    }
  });

  // Property: every sha256 the server states is checked, and the link's wins over none. Found
  // from outside: a Repr-Digest of the bytes sent (other than the link stated, or than the URL's
  // sha256=) was taken instead, and the bytes saved as verified, exit 0.
  it("other bytes with a Repr-Digest of their own: exit 7 against the link's sha256, named or stated", async () => {
    const cli = await createCli();
    reprDigest = true;
    try {
      for (const [i, target] of [url, `${url}?download&sha256=${sha256(real)}`].entries()) {
        const dir = join(work, `repr-${i}`);
        await mkdir(dir);
        const res = await cli.run(['get', target, '--json'], { cwd: dir });
        expect(res.exitCode, res.stderr).toBe(7);
        expect(oneLine(res.stderr)).toBe(
          `fshare: the downloaded bytes have sha256 ${sha256(sent)}, not the server's ${sha256(real)}; they are kept in lie.bin.part`,
        );
        expect(res.stdout).toBe('');
        expect(await readdir(dir)).toEqual(['lie.bin.part']);
      }
    } finally {
      reprDigest = false;
      await rm(cli.configDir, { recursive: true, force: true });
    }
  });
});
