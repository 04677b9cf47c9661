// Share links and expiry from the command line (docs/CLI.md "Share links", "fshare expire",
// "fshare settings limits"; docs/API.md "Expiry", "Share links", "Counting downloads"): the built
// binary against a real `fshare serve`, with an anonymous person opening the links over plain
// HTTP, and against the reference stand-in, which has neither links nor expiry.
import { createHash, randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Link, Settings } from '../../src/shared/types.js';
import { createCli, signIn, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';
import { get, post, type Res } from '../helpers/http.js';
import { startStandIn, type StandIn } from '../helpers/standin.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const HOUR = 3600 * 1000;
const DAY = 24 * HOUR;
/** Slack for "about N from now": the server computes the time, a little before we look. */
const TOLERANCE = 5 * 60 * 1000;

/** A share as `info --json` prints it. */
interface Info {
  share_id: string;
  url: string;
  file_name: string;
  expires: string | null;
  links: LinkShape[] | null;
}

/** A link as the CLI prints it with --json (url and download_url null except where made). */
type LinkShape = Omit<Link, 'url' | 'download_url'> & {
  url: string | null;
  download_url: string | null;
};

interface Transfer {
  share_id: string;
  url: string;
  file_name: string;
  size: number;
  sha256: string;
  expires: string | null;
  link: LinkShape | null;
}

/** One line on stderr, in CLI.md's shape ("fshare: …", the status last when there is one). */
function expectErrorLine(stderr: string, status?: number): string {
  const lines = stderr.trimEnd().split('\n');
  expect(lines, stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: \S/);
  if (status !== undefined) expect(lines[0]).toMatch(new RegExp(`\\(HTTP ${status}\\)(; .+)?$`));
  return lines[0]!;
}

/** An ISO time about `ms` from now. */
function expectAbout(iso: string | null | undefined, ms: number, what: string): void {
  expect(iso, what).toEqual(expect.any(String));
  expect(iso!, what).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$/);
  const away = Date.parse(iso!) - Date.now();
  expect(
    Math.abs(away - ms),
    `${what}: ${iso} is ${away} ms away, expected about ${ms}`,
  ).toBeLessThan(TOLERANCE);
}

/** The anonymous person with the link: no account, no token, plain HTTP. */
const open = (url: string): Promise<Res> => get(url, url);
const download = (url: string): Promise<Res> => get(url, `${url}?download`);

describe('share links and expiry against fshare serve', () => {
  let serve: Serve;
  let admin: Cli;
  let bob: Cli;
  let work: string;
  let data: Buffer;
  let file: string;
  const bobUser = { username: 'bob', password: 'bob-password-456' };

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    await signIn(admin, serve.url);
    work = await tempDir('links');
    data = randomBytes(300_007);
    file = join(work, 'data.bin');
    await writeFile(file, data);
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, bob?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** Uploads the test file as admin; its `upload --json` entry. */
  const uploadAsAdmin = async (args: string[] = []): Promise<Transfer> => {
    const [up] = await admin.json<Transfer[]>(['upload', file, ...args]);
    expect(up!.share_id).toMatch(new RegExp(`^${UUID}$`));
    return up!;
  };

  /** `fshare link … --json` as admin. */
  const makeLink = (share: string, args: string[] = []) =>
    admin.json<LinkShape>(['link', share, ...args]);

  it('upload --expires 7d --max-downloads 2 prints the link; it gives the bytes twice, then 410', async () => {
    const res = await admin.run(['upload', file, '--expires', '7d', '--max-downloads', '2']);
    expect(res.exitCode, res.stderr).toBe(0);
    const lines = res.stdout.split('\n');
    expect(lines).toHaveLength(1);
    const match = new RegExp(`^(${UUID}) {2}(\\S+) {2}data\\.bin$`).exec(lines[0]!);
    expect(match, lines[0]).not.toBeNull();
    const [, id, url] = match!;
    expect(url).toMatch(new RegExp(`^${serve.url}/l/[\\w-]{20,}$`));

    const info = await admin.json<Info>(['info', id!]);
    expectAbout(info.expires, 7 * DAY, 'share expiry');

    for (const n of [1, 2]) {
      const got = await download(url!);
      expect(got.status, `download ${n}: ${got.text.slice(0, 200)}`).toBe(200);
      expect(got.buf.length).toBe(data.length);
      expect(sha256(got.buf), `download ${n}`).toBe(sha256(data));
    }
    const third = await download(url!);
    expect(third.status).toBe(410);

    const links = await admin.json<LinkShape[]>(['links', id!]);
    expect(links).toHaveLength(1);
    expect(links[0]).toMatchObject({
      share_id: id,
      file_name: 'data.bin',
      max_downloads: 2,
      downloads: 2,
      downloads_left: 0,
      has_password: false,
      state: 'used-up',
      url: null, // the token is shown only once
    });
    // The table says the same.
    const table = await admin.run(['links', id!]);
    expect(table.exitCode).toBe(0);
    const row = table.stdout.split('\n').find((l) => l.startsWith(links[0]!.id));
    expect(row, table.stdout).toBeDefined();
    expect(row!.split('\t')).toEqual([
      links[0]!.id,
      id,
      'data.bin',
      '2/2',
      expect.any(String),
      'used-up',
    ]);
  });

  it('a link with --password-stdin: the page is 401 without it, POST with the password gives the bytes', async () => {
    const { share_id: id } = await uploadAsAdmin(['--name', 'secret.bin']);
    const password = 'correct horse & battery';
    // Without --password-stdin standard input is not read: this link has no password.
    const res = await admin.run(['link', id], { input: `${password}\n` });
    expect(res.exitCode, res.stderr).toBe(0);
    const plain = res.stdout;
    expect((await open(plain)).status).toBe(200);

    const made = await admin.run(['link', id, '--password-stdin'], { input: `${password}\n` });
    expect(made.exitCode, made.stderr).toBe(0);
    expect(made.stderr).toBe('');
    const lines = made.stdout.split('\n');
    expect(lines).toHaveLength(1); // the URL, nothing else
    const url = lines[0]!;
    expect(url).toMatch(new RegExp(`^${serve.url}/l/[\\w-]{20,}$`));

    expect((await open(url)).status).toBe(401);
    const noPassword = await download(url);
    expect(noPassword.status).toBe(401);
    expect(noPassword.buf.includes(data.subarray(0, 64))).toBe(false);

    const form = (pw: string) => ({
      body: new URLSearchParams({ password: pw }).toString(),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    const wrong = await post(url, `${url}?download`, form('wrong password'));
    expect(wrong.status).toBe(401);
    const right = await post(url, `${url}?download`, form(password));
    expect(right.status, right.text.slice(0, 200)).toBe(200);
    expect(sha256(right.buf)).toBe(sha256(data));
    // The browser's way: the password form answers with a cookie that opens the link.
    const viaForm = await post(url, url, form(password));
    expect(viaForm.status).toBe(303);
    const cookie = String(viaForm.headers['set-cookie']?.[0] ?? '').split(';')[0]!;
    expect(cookie).toMatch(/^fshare_link_[0-9a-f]{16}=/);
    expect((await get(url, url, { headers: { cookie } })).status).toBe(200);

    const links = await admin.json<LinkShape[]>(['links', id]);
    expect(links.map((l) => [l.has_password, l.downloads])).toEqual([
      [false, 0],
      [true, 1],
    ]);
    const table = await admin.run(['links', id]);
    expect(table.stdout).toMatch(/\tactive \(password\)$/m);
  });

  it('link rm revokes at once (404 afterwards); an unknown id is exit 4 with one line', async () => {
    const { share_id: id } = await uploadAsAdmin(['--name', 'revoke.bin']);
    const link = await makeLink(id);
    expect(link).toMatchObject({ share_id: id, state: 'active', downloads: 0 });
    expect(link.id).toMatch(/^[0-9a-f]{16}$/);
    expect(link.download_url).toBe(`${link.url}?download`);
    expect((await open(link.url!)).status).toBe(200);
    expect((await download(link.url!)).status).toBe(200);

    const res = await admin.run(['link', 'rm', link.id]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stdout).toBe(`Revoked link ${link.id}`);
    expect((await open(link.url!)).status).toBe(404);
    expect((await download(link.url!)).status).toBe(404);
    expect(await admin.json<LinkShape[]>(['links', id])).toEqual([]);

    const other = await makeLink(id);
    expect(await admin.json(['link', 'rm', other.id])).toEqual([{ id: other.id, revoked: true }]);
    expect((await download(other.url!)).status).toBe(404);

    const unknown = await admin.run(['link', 'rm', '0123456789abcdef']);
    expect(unknown.exitCode).toBe(4);
    expect(unknown.stdout).toBe('');
    expectErrorLine(unknown.stderr, 404);
    // A link already revoked is unknown too.
    const again = await admin.run(['link', 'rm', link.id]);
    expect(again.exitCode).toBe(4);
    expectErrorLine(again.stderr, 404);

    // A typo in one id must not leave the other links working: every id is tried.
    const kept = await makeLink(id);
    const mixed = await admin.run(['link', 'rm', '0123456789abcdef', kept.id]);
    expect(mixed.exitCode).toBe(4);
    expect(mixed.stdout).toBe(`Revoked link ${kept.id}`);
    // Of several ids, the line names the one that failed (found from outside: it did not).
    expect(expectErrorLine(mixed.stderr, 404)).toMatch(/^fshare: 0123456789abcdef: /);
    expect((await download(kept.url!)).status).toBe(404);
  });

  it('link rm of "", "." or ".." is exit 2 "not a link id", and the other ids are still revoked (found: 405 exit 1, and ".." said the server offers no links)', async () => {
    const { share_id: id } = await uploadAsAdmin(['--name', 'dots.bin']);
    const kept = await makeLink(id);
    for (const bad of ['', '.', '..']) {
      const res = await admin.run(['link', 'rm', bad]);
      expect(res.exitCode, res.stderr).toBe(2);
      expect(res.stdout).toBe('');
      expect(expectErrorLine(res.stderr)).toBe(`fshare: not a link id: "${bad}"`);
    }
    const mixed = await admin.run(['link', 'rm', '..', kept.id]);
    expect(mixed.exitCode).toBe(2);
    expect(mixed.stdout).toBe(`Revoked link ${kept.id}`);
    expect((await download(kept.url!)).status).toBe(404);
  });

  it('expire sets and clears the expiry; a bad duration is exit 2 and changes nothing', async () => {
    const up = await uploadAsAdmin(['--name', 'expire.bin', '--expires', '7d']);
    expectAbout(up.expires, 7 * DAY, 'upload --json expires');
    const id = up.share_id;

    const never = await admin.run(['expire', id, 'never']);
    expect(never.exitCode, never.stderr).toBe(0);
    expect(never.stdout).toBe(`${id} never expires`);
    expect((await admin.json<Info>(['info', id])).expires).toBeNull();
    expect((await admin.run(['info', id])).stdout).toMatch(/^expires: +never$/m);

    const soon = await admin.run(['expire', id, '2h']);
    expect(soon.exitCode, soon.stderr).toBe(0);
    expect(soon.stdout).toMatch(
      new RegExp(`^${id} expires \\d{4}-\\d\\d-\\d\\d \\d\\d:\\d\\d UTC`),
    );
    const info = await admin.json<Info>(['info', id]);
    expectAbout(info.expires, 2 * HOUR, 'expire 2h');
    expect((await admin.run(['info', id])).stdout).toMatch(
      /^expires: +\d{4}-\d\d-\d\d \d\d:\d\d UTC \(in \d+ (hours|minutes)\)$/m,
    );

    const shaped = await admin.json<Info>(['expire', id, '3h']);
    expect(shaped.share_id).toBe(id);
    expectAbout(shaped.expires, 3 * HOUR, 'expire --json');

    const bad = await admin.run(['expire', id, '3x']);
    expect(bad.exitCode).toBe(2);
    expect(bad.stdout).toBe('');
    expect(expectErrorLine(bad.stderr)).toContain('3x');
    expect((await admin.json<Info>(['info', id])).expires).toBe(shaped.expires);
  });

  it('info --json has expires and the links made; the table has expires: and links: rows', async () => {
    const [up] = await admin.json<Transfer[]>([
      'upload',
      file,
      '--name',
      'info.bin',
      '--expires',
      '1d',
      '--link',
    ]);
    expectAbout(up!.expires, DAY, 'upload --json expires');
    expect(up!.link).toMatchObject({
      share_id: up!.share_id,
      file_name: 'info.bin',
      created_by: 'admin',
      max_downloads: null,
      downloads: 0,
      downloads_left: null,
      has_password: false,
      state: 'active',
    });
    expect(up!.link!.url).toMatch(new RegExp(`^${serve.url}/l/[\\w-]{20,}$`));
    // The link ends with the share: its expiry is the share's.
    expect(up!.link!.expires).toBe(up!.expires);
    const id = up!.share_id;
    const second = await makeLink(id, ['--max-downloads', '3', '--expires', '2h']);
    expect(second).toMatchObject({ max_downloads: 3, downloads_left: 3 });
    expectAbout(second.expires, 2 * HOUR, 'link --expires 2h');
    expect(sha256((await download(second.url!)).buf)).toBe(sha256(data));

    const info = await admin.json<Info>(['info', id]);
    expect(info.expires).toBe(up!.expires);
    expect(info.links?.map((l) => l.id)).toEqual([up!.link!.id, second.id]);
    expect(info.links?.[1]).toMatchObject({ downloads: 1, downloads_left: 2, max_downloads: 3 });

    const table = await admin.run(['info', id]);
    expect(table.exitCode).toBe(0);
    expect(table.stdout).toMatch(/^expires: +\d{4}-\d\d-\d\d \d\d:\d\d UTC \(in \d+ hours\)$/m);
    expect(table.stdout).toMatch(
      new RegExp(`^links: +2 active of 2 \\(fshare links ${id}\\)$`, 'm'),
    );

    // Without --expires or --link, upload says so in its JSON.
    const [plain] = await admin.json<Transfer[]>(['upload', file, '--name', 'plain.bin']);
    expect(plain).toMatchObject({ expires: null, link: null });
    const plainInfo = await admin.json<Info>(['info', plain!.share_id]);
    expect(plainInfo).toMatchObject({ expires: null, links: [] });
    expect((await admin.run(['info', plain!.share_id])).stdout).toMatch(/^links: +none$/m);
  });

  it('a user without ADMIN: no links on shares of others, and held to the settings limits', async () => {
    const add = await admin.run(
      ['users', 'add', 'bob', '--perms', 'CREATE,READ,LIST,DELETE,MODIFY', '--password-stdin'],
      { input: `${bobUser.password}\n` },
    );
    expect(add.exitCode, add.stderr).toBe(0);
    bob = await createCli();
    await signIn(bob, serve.url, bobUser);

    const { share_id: adminShare } = await uploadAsAdmin(['--name', 'admins.bin']);
    const refused = await bob.run(['link', adminShare]);
    expect(refused.exitCode).toBe(3);
    expect(refused.stdout).toBe('');
    expectErrorLine(refused.stderr, 403);
    expect(await admin.json<LinkShape[]>(['links', adminShare])).toEqual([]);
    const list = await bob.run(['links', adminShare]);
    expect(list.exitCode).toBe(3);
    expectErrorLine(list.stderr, 403);
    // bob may read the share, not see its links
    expect(await bob.json<Info>(['info', adminShare])).toMatchObject({
      share_id: adminShare,
      links: null,
    });

    // bob's own share, made before any limit: it never expires, so his links' expiry is their own.
    const [own] = await bob.json<Transfer[]>(['upload', file, '--name', 'bobs.bin']);
    expect(own!.expires).toBeNull();

    const limits = await admin.run([
      'settings',
      'limits',
      '--max-expiry',
      '1d',
      '--max-downloads',
      '5',
    ]);
    expect(limits.exitCode, limits.stderr).toBe(0);
    expect(await admin.json<Settings>(['settings', 'show'])).toEqual({
      default_permissions: [],
      max_expiry: 86400,
      max_downloads: 5,
    });
    const shown = await admin.run(['settings', 'show']);
    expect(shown.stdout).toMatch(/^max expiry: +1 day$/m);
    expect(shown.stdout).toMatch(/^max downloads: +5$/m);

    const tooMany = await bob.run(['link', own!.share_id, '--max-downloads', '6']);
    expect(tooMany.exitCode).toBe(1);
    expect(tooMany.stdout).toBe('');
    expect(expectErrorLine(tooMany.stderr, 400)).toMatch(/at most 5 downloads/);
    const tooLong = await bob.run(['link', own!.share_id, '--expires', '2d']);
    expect(tooLong.exitCode).toBe(1);
    expect(expectErrorLine(tooLong.stderr, 400)).toMatch(/at most 86400 s \(1 day\)/);
    const never = await bob.run(['expire', own!.share_id, 'never']);
    expect(never.exitCode).toBe(1);
    expect(expectErrorLine(never.stderr, 400)).toMatch(/at most 86400 s/);
    expect(await bob.json<LinkShape[]>(['links', own!.share_id])).toEqual([]);

    const capped = await bob.json<LinkShape>(['link', own!.share_id]);
    expect(capped).toMatchObject({
      share_id: own!.share_id,
      created_by: 'bob',
      max_downloads: 5,
      downloads_left: 5,
      state: 'active',
    });
    expectAbout(capped.expires, DAY, "bob's link without flags");
    expect(sha256((await download(capped.url!)).buf)).toBe(sha256(data));
    // The limits bind only users without ADMIN.
    const adminLink = await makeLink(own!.share_id, ['--max-downloads', '50']);
    expect(adminLink).toMatchObject({ max_downloads: 50, expires: null });
    // A share bob makes without an expiry gets the longest one allowed.
    const [later] = await bob.json<Transfer[]>(['upload', file, '--name', 'bobs-later.bin']);
    expectAbout((await bob.json<Info>(['info', later!.share_id])).expires, DAY, "bob's new share");

    const lifted = await admin.json<Settings>(['settings', 'limits', '--max-expiry', 'none']);
    expect(lifted).toEqual({ default_permissions: [], max_expiry: null, max_downloads: 5 });
    expect(await admin.json<Settings>(['settings', 'show'])).toMatchObject({ max_expiry: null });
    const unbounded = await bob.json<LinkShape>(['link', own!.share_id]);
    expect(unbounded).toMatchObject({ expires: null, max_downloads: 5 });
    expect((await bob.run(['expire', own!.share_id, 'never'])).exitCode).toBe(0);
    // Lifting a limit does not touch the links made under it.
    const kept = (await bob.json<LinkShape[]>(['links', own!.share_id])).find(
      (l) => l.id === capped.id,
    );
    expect(kept?.expires).toBe(capped.expires);
    // Without a share, `links` lists the links of one's own shares; ADMIN sees every link.
    const bobs = await bob.json<LinkShape[]>(['links']);
    expect(bobs.map((l) => l.id).sort()).toEqual([capped.id, adminLink.id, unbounded.id].sort());
    const all = (await admin.json<LinkShape[]>(['links', '--all'])).map((l) => l.id);
    expect(all).toEqual(expect.arrayContaining([capped.id, adminLink.id, unbounded.id]));

    const bad = await admin.run(['settings', 'limits', '--max-expiry', '3x']);
    expect(bad.exitCode).toBe(2);
    expectErrorLine(bad.stderr);
    expect((await admin.run(['settings', 'limits', '--max-downloads', 'none'])).exitCode).toBe(0);
    expect(await admin.json<Settings>(['settings', 'show'])).toEqual({
      default_permissions: [],
      max_expiry: null,
      max_downloads: null,
    });
  });

  it('a bad duration or count is exit 2 before anything is made', async () => {
    const before = await admin.json<{ shares: unknown[] }>(['ls', '--all']);
    const upload = await admin.run(['upload', file, '--expires', '3x']);
    expect(upload.exitCode).toBe(2);
    expect(expectErrorLine(upload.stderr)).toContain('3x');
    const count = await admin.run(['upload', file, '--max-downloads', '0']);
    expect(count.exitCode).toBe(2);
    expectErrorLine(count.stderr);
    expect((await admin.json<{ shares: unknown[] }>(['ls', '--all'])).shares).toHaveLength(
      before.shares.length,
    );
    const { share_id: id } = await uploadAsAdmin(['--name', 'flags.bin']);
    const link = await admin.run(['link', id, '--expires', '3x']);
    expect(link.exitCode).toBe(2);
    expect(expectErrorLine(link.stderr)).toContain('3x');
    expect(await admin.json<LinkShape[]>(['links', id])).toEqual([]);
  });

  // Property: an expiry past the ten years a server takes is the flag's usage error (exit 2, in
  // the flag's units), before anything is made. Found from outside: `--expires 100000d` made the
  // share, then failed with the server's 400 "must be a number of seconds from 1 to 316224000",
  // exit 1. Ten years to the day is taken.
  it('an expiry past ten years is exit 2 naming the flag, for every command that takes one', async () => {
    const before = await admin.json<{ shares: unknown[] }>(['ls', '--all']);
    const { share_id: id } = await uploadAsAdmin(['--name', 'ten-years.bin']);
    const cases: [string[], string][] = [
      [
        ['upload', file, '--expires', '100000d'],
        '--expires must be at most 3660d (ten years): 100000d',
      ],
      [
        ['upload', file, '--expires', '3661d'],
        '--expires must be at most 3660d (ten years): 3661d',
      ],
      [['link', id, '--expires', '523w'], '--expires must be at most 3660d (ten years): 523w'],
      [['expire', id, '316224001'], 'the expiry must be at most 3660d (ten years): 316224001'],
      [
        ['settings', 'limits', '--max-expiry', '9999999999s'],
        '--max-expiry must be at most 3660d (ten years): 9999999999s',
      ],
    ];
    for (const [args, line] of cases) {
      const res = await admin.run(args);
      expect(res.exitCode, args.join(' ')).toBe(2);
      expect(expectErrorLine(res.stderr)).toBe(`fshare: ${line}`);
    }
    expect((await admin.json<{ shares: unknown[] }>(['ls', '--all'])).shares).toHaveLength(
      before.shares.length + 1,
    );
    expect(await admin.json<LinkShape[]>(['links', id])).toEqual([]);
    const share = await admin.json<{ expires: string | null }>(['info', id]);
    expect(share.expires).toBeNull();
    expect((await admin.json<Settings>(['settings', 'show'])).max_expiry).toBeNull();
    const tenYears = await admin.json<{ expires: string }[]>([
      'upload',
      file,
      '--expires',
      '3660d',
    ]);
    expect(Date.parse(tenYears[0]!.expires) - Date.now()).toBeGreaterThan(3659 * 86400_000);
  });
});

describe('share links and expiry against a server without them (the reference stand-in)', () => {
  let standIn: StandIn;
  let cli: Cli;
  let work: string;
  let file: string;
  const run = (args: string[]) =>
    cli.run(['--server', standIn.url, ...args], { env: { FSHARE_TOKEN: 'any-token' } });

  beforeAll(async () => {
    standIn = await startStandIn();
    cli = await createCli();
    work = await tempDir('links-standin');
    file = join(work, 'small.bin');
    await writeFile(file, randomBytes(10_000));
  });
  afterAll(async () => {
    await standIn?.close();
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('link and links exit 1 saying the server does not offer share links', async () => {
    const up = await run(['--json', 'upload', file]);
    expect(up.exitCode, up.stderr).toBe(0);
    const [{ share_id: id }] = JSON.parse(up.stdout) as { share_id: string }[];

    const link = await run(['link', id!]);
    expect(link.exitCode).toBe(1);
    expect(link.stdout).toBe('');
    expect(expectErrorLine(link.stderr)).toMatch(
      new RegExp(`^fshare: ${standIn.url} does not offer share links`),
    );
    const links = await run(['links', id!]);
    expect(links.exitCode).toBe(1);
    expect(expectErrorLine(links.stderr)).toMatch(/does not offer share links/);
    // A missing share is still "not found", not "no links here".
    const missing = await run(['link', '00000000-0000-4000-8000-000000000000']);
    expect(missing.exitCode).toBe(4);
    expectErrorLine(missing.stderr, 404);
  });

  it('upload --link exits 1 after the upload, saying so; the share stays', async () => {
    const res = await run(['--json', 'upload', file, '--name', 'linked.bin', '--link']);
    expect(res.exitCode).toBe(1);
    expect(res.stderr).toMatch(/does not offer share links/);
    expect(JSON.parse(res.stdout)).toEqual([]);
    const kept = [...standIn.shares.values()].filter((s) => s.file_name === 'linked.bin');
    expect(kept).toHaveLength(1);
    expect(kept[0]!.initialized).toBe(true);
  });

  // The real reference (sachet-server) refuses expires_in on the create with 400 "Invalid data:
  // {'expires_in': ['Unknown field.']}" rather than ignoring it; fshare printed that line instead
  // of saying the server has no expiry. The stand-in refuses it as the reference does.
  it('upload --expires exits 1 saying the server does not support expiry, and leaves no share', async () => {
    const before = [...standIn.shares.keys()];
    const contentPosts = () =>
      standIn.requests.filter((r) => /^(POST|PUT) \/files\/[^/]+\/content$/.test(r)).length;
    const postsBefore = contentPosts();
    const res = await run(['upload', file, '--name', 'expiring.bin', '--expires', '1d']);
    expect(res.exitCode).toBe(1);
    expect(res.stdout).toBe('');
    expect(expectErrorLine(res.stderr)).toMatch(/does not support share expiry/);
    // The share it made to find out is gone again, and no byte was sent.
    const listed = JSON.parse((await run(['--json', 'ls', '--all'])).stdout) as {
      shares: { share_id: string; file_name: string }[];
    };
    expect(listed.shares.map((s) => s.share_id).sort()).toEqual(before.sort());
    expect(listed.shares.some((s) => s.file_name === 'expiring.bin')).toBe(false);
    expect(contentPosts()).toBe(postsBefore);
  });

  // fshare expire against the real reference printed its 400 "Invalid patch: {'expires_in':
  // ['Unknown field.']}" as the error: the line now says the server has no expiry, exit 1.
  it('expire exits 1 saying the server does not support expiry; the share is unchanged', async () => {
    const up = await run(['--json', 'upload', file, '--name', 'to-expire.bin']);
    expect(up.exitCode).toBe(0);
    const [{ share_id: id }] = JSON.parse(up.stdout) as { share_id: string }[];
    const res = await run(['expire', id, '1d']);
    expect(res.exitCode).toBe(1);
    expect(res.stdout).toBe('');
    expect(expectErrorLine(res.stderr)).toBe(
      `fshare: ${standIn.url} does not support share expiry (an fshare serve extension)`,
    );
    expect(standIn.shares.get(id)?.file_name).toBe('to-expire.bin');
  });

  // fshare settings limits against the real reference printed its 400 "Invalid patch:
  // {'max_downloads': ['Unknown field.']}" with exit 1; CLI.md says exit 2 naming the setting.
  it('settings limits exits 2 naming the setting the server does not have', async () => {
    const res = await run(['settings', 'limits', '--max-downloads', '5']);
    expect(res.exitCode).toBe(2);
    expect(res.stdout).toBe('');
    expect(expectErrorLine(res.stderr)).toBe(
      `fshare: ${standIn.url} has no setting max_downloads (an fshare serve extension)`,
    );
    const both = await run(['settings', 'limits', '--max-expiry', '7d', '--max-downloads', '5']);
    expect(both.exitCode).toBe(2);
    expect(expectErrorLine(both.stderr)).toMatch(/has no setting max_expiry /);
  });
});

describe('upload --link whose link the server refuses', () => {
  let serve: Serve;
  let admin: Cli;
  let carol: Cli;
  let work: string;
  let file: string;
  const carolUser = { username: 'carol', password: 'carol-password-789' };

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    await signIn(admin, serve.url);
    const add = await admin.run(
      ['users', 'add', 'carol', '--perms', 'CREATE,READ,LIST,DELETE,MODIFY', '--password-stdin'],
      { input: `${carolUser.password}\n` },
    );
    expect(add.exitCode, add.stderr).toBe(0);
    carol = await createCli();
    await signIn(carol, serve.url, carolUser);
    const limits = await admin.run(['settings', 'limits', '--max-downloads', '2']);
    expect(limits.exitCode, limits.stderr).toBe(0);
    work = await tempDir('links-refused');
    file = join(work, 'report.bin');
    await writeFile(file, randomBytes(20_000));
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, carol?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  // A link refused after the upload (here more downloads than the server's max_downloads allows
  // a user without ADMIN) left a share that nothing named: the one line gave only the server's
  // refusal, stdout and the JSON had nothing, so the user uploaded it again. The line now says
  // which share was uploaded, and how to make its link or remove it.
  it('names the share it uploaded, which stays, in its one error line', async () => {
    for (const json of [false, true]) {
      const res = await carol.run([
        ...(json ? ['--json'] : []),
        'upload',
        file,
        '--name',
        `refused-${json}.bin`,
        '--max-downloads',
        '5',
      ]);
      expect(res.exitCode).toBe(1);
      expect(res.stdout).toBe(json ? '[]' : '');
      const listed = await carol.json<{ shares: { share_id: string; file_name: string }[] }>([
        'ls',
        '--all',
      ]);
      const made = listed.shares.filter((s) => s.file_name === `refused-${json}.bin`);
      expect(made).toHaveLength(1);
      const id = made[0]!.share_id;
      expect(expectErrorLine(res.stderr)).toBe(
        `fshare: refused-${json}.bin was uploaded as ${id}, but no link was made: The server ` +
          `allows at most 2 downloads per link (HTTP 400); fshare link ${id} makes one, ` +
          `fshare rm ${id} removes the share`,
      );
      expect(await carol.json<LinkShape[]>(['links', id])).toEqual([]);
    }
  });
});

describe('a share link given where a share is expected', () => {
  let serve: Serve;
  let admin: Cli;
  let work: string;

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    await signIn(admin, serve.url);
    work = await tempDir('links-as-share');
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  // `fshare info <the URL fshare link printed>` said 'not a share id or URL: http://…/l/…', of a
  // URL, and nothing of what it is or how it downloads. It is still exit 2 before any request,
  // and the line now says it is a share link and gives the command that downloads it (`fshare
  // get` takes a link: link-get.test.ts).
  it('info or rm of a link URL: exit 2, one line saying it is a share link and how it downloads', async () => {
    const file = join(work, 'linked.bin');
    await writeFile(file, randomBytes(5_000));
    const [up] = await admin.json<Transfer[]>(['upload', file]);
    const link = await admin.json<LinkShape>(['link', up!.share_id]);
    const url = link.url!;
    for (const [args, given] of [
      [['info', `${url}/`], `${url}/`],
      [['info', `${url}?download`], `${url}?download`],
      [['rm', url], url],
    ] as const) {
      const res = await admin.run([...args]);
      expect(res.exitCode, res.stderr).toBe(2);
      expect(res.stdout).toBe('');
      const path = new URL(given).pathname;
      expect(expectErrorLine(res.stderr)).toBe(
        `fshare: a share link, not a share id or URL: ${given} ` +
          `(download a link with fshare get '${serve.url}${path}')`,
      );
    }
    // Nothing was asked of the server: the link counted nothing, and the share is still there.
    expect(await admin.json<LinkShape[]>(['links', up!.share_id])).toMatchObject([
      { id: link.id, downloads: 0 },
    ]);
  });
});
