// The CLI's own files, through the built binary against a real `fshare serve`: a damaged
// credentials.json or config.json, and a config directory that cannot be written. Found broken:
// a damaged credentials.json read as "signed out" without a word and the next login wrote over
// it, losing the tokens it held for other servers; a damaged config.json fell back to the default
// server, unnamed; a logout that could not rewrite credentials.json said only "permission denied"
// about a temporary file, not that the token was revoked and its copy kept.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import {
  chmod,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  stat,
  statfs,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  ADMIN,
  BIN,
  closedPort,
  createCli,
  signIn,
  startServe,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import { mountSmallDisk } from '../helpers/mount.js';

let serve: Serve;
const clis: Cli[] = [];

beforeAll(async () => {
  serve = await startServe();
});
afterAll(async () => {
  await serve?.stop();
  for (const cli of clis) await rm(cli.configDir, { recursive: true, force: true });
});

async function signedIn(): Promise<Cli> {
  const cli = await createCli();
  clis.push(cli);
  await signIn(cli, serve.url);
  return cli;
}

function fshareLines(stderr: string): string[] {
  const lines = stderr.trimEnd().split('\n').filter(Boolean);
  for (const line of lines) expect(line).toMatch(/^fshare: /);
  expect(stderr).not.toMatch(/\s+at .+:\d+:\d+/); // never a stack trace
  return lines;
}

/** Another server's entry, as a second login would have left it. */
const OTHER = { 'bob@https://other.example.com': 'token-of-another-server' };

describe('a damaged credentials.json (FSHARE_KEYRING=off)', () => {
  it('is named with what is wrong, and the command goes on signed out (exit 3)', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'credentials.json');
    for (const [text, why] of [
      ['{"admin@http://127.0.0.1:1": "abc', 'it is not valid JSON'],
      ['{"tokens": 5}', 'the entry "tokens" is not a token'],
      // Text no header can carry (it failed every command with a header error).
      ['{"admin@x": "abc\\ndef"}', 'the entry "admin@x" is not a token'],
      ['{"admin@x": "jeton-é"}', 'the entry "admin@x" is not a token'],
      ['["a"]', 'it is not a JSON object'],
    ] as const) {
      await writeFile(file, text, { mode: 0o600 });
      const res = await cli.run(['token']);
      expect(res.exitCode).toBe(3);
      expect(fshareLines(res.stderr)).toEqual([
        `fshare: the credentials file ${file} is damaged (${why}); no token in it is used until it is fixed or moved away`,
        `fshare: not signed in to ${serve.url}; run fshare login`,
      ]);
      expect(await readFile(file, 'utf8')).toBe(text); // reading it changed nothing
    }
  });

  // A read of a directory fails with an error that names no path: the line said only "is a
  // directory, not a file".
  it('a directory in its place is named in one line (exit 1)', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'credentials.json');
    await rm(file);
    await mkdir(file);
    const res = await cli.run(['whoami']);
    expect(res.exitCode).toBe(1);
    expect(fshareLines(res.stderr)).toEqual([`fshare: is a directory, not a file: ${file}`]);
  });

  it('login sets it aside (0600) instead of writing over the tokens it holds', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'credentials.json');
    const mine = JSON.parse(await readFile(file, 'utf8')) as Record<string, string>;
    const whole = JSON.stringify({ ...mine, ...OTHER });
    const damaged = whole.slice(0, whole.length - 3); // cut short
    await writeFile(file, damaged, { mode: 0o600 });

    const login = await cli.run(
      ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
      { input: `${ADMIN.password}\n` },
    );
    expect(login.exitCode, login.stderr).toBe(0);
    const aside = (await readdir(cli.configDir)).filter((n) => n.startsWith('credentials.json.d'));
    expect(aside).toEqual([expect.stringMatching(/^credentials\.json\.damaged-\d{8}T\d{6}Z$/)]);
    const asidePath = join(cli.configDir, aside[0]!);
    expect(fshareLines(login.stderr)).toEqual([
      `fshare: the credentials file ${file} was damaged (it is not valid JSON); it was moved to ${asidePath} and a new one started`,
    ]);
    // The other server's token is still there, byte for byte, and readable by nobody else.
    expect(await readFile(asidePath, 'utf8')).toBe(damaged);
    expect((await stat(asidePath)).mode & 0o777).toBe(0o600);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    const who = await cli.run(['whoami']);
    expect(who.stdout).toMatch(/^admin on /);
    expect(who.stderr).toBe('');

    // A second damaged file never replaces the first one set aside.
    await writeFile(file, '{', { mode: 0o600 });
    const again = await cli.run(
      ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
      { input: `${ADMIN.password}\n` },
    );
    expect(again.exitCode, again.stderr).toBe(0);
    const both = (await readdir(cli.configDir)).filter((n) => n.startsWith('credentials.json.d'));
    expect(both).toHaveLength(2);
    expect(await readFile(asidePath, 'utf8')).toBe(damaged);
  });
});

// Found from outside: a credentials.json restored from a backup, copied with `cp -r` or synced as
// a dotfile under a umask of 022 (mode 644) was used as it was, its tokens readable by every user
// of the machine. Property: the first command that reads it makes it 0600 again and says once
// what that means; the command goes on with its token.
describe('a credentials.json open to other users (FSHARE_KEYRING=off)', () => {
  it('is made 0600 again by the next command, which says so once and goes on', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'credentials.json');
    const before = await readFile(file, 'utf8');
    await chmod(file, 0o644);
    const who = await cli.run(['whoami']);
    expect(who.exitCode, who.stderr).toBe(0);
    expect(who.stdout).toMatch(/^admin on /);
    expect(fshareLines(who.stderr)).toEqual([
      `fshare: the credentials file ${file} was open to other users (mode 644); it is 0600 again, but its tokens may have been read: fshare logout --everywhere ends every token of yours on a server`,
    ]);
    expect((await stat(file)).mode & 0o777).toBe(0o600);
    expect(await readFile(file, 'utf8')).toBe(before);
    const again = await cli.run(['whoami']);
    expect(again.exitCode).toBe(0);
    expect(again.stderr).toBe('');
  });
});

// Found from outside: a command run without HOME by a user the system has no entry for (a
// container started with an arbitrary uid, a script under `env -i`) failed, FSHARE_TOKEN and
// FSHARE_SERVER set, with Node's "A system error occurred: uv_os_homedir returned ENOENT".
// Property: one line naming what to set, exit 2; FSHARE_CONFIG_DIR or XDG_CONFIG_HOME is enough.
describe('no HOME, and no entry for the user', () => {
  it('is one line naming what to set (exit 2); FSHARE_CONFIG_DIR or XDG_CONFIG_HOME is enough', async () => {
    // Root, with no entry: an empty passwd, read from files only, in a mount namespace of its own.
    const etc = await mkdtemp(join(tmpdir(), 'fshare-etc-'));
    await writeFile(join(etc, 'passwd'), '');
    await writeFile(join(etc, 'nsswitch.conf'), 'passwd: files\ngroup: files\n');
    const token = (await signedIn()).configDir;
    const tokenText = Object.values(
      JSON.parse(await readFile(join(token, 'credentials.json'), 'utf8')) as Record<string, string>,
    )[0]!;
    const run = (env: Record<string, string>) => {
      try {
        const stdout = execFileSync(
          'unshare',
          [
            '-m',
            'sh',
            '-c',
            'mount --bind "$1/passwd" /etc/passwd && mount --bind "$1/nsswitch.conf" /etc/nsswitch.conf && shift && exec "$@"',
            'sh',
            etc,
            process.execPath,
            BIN,
            'ls',
          ],
          {
            env: {
              PATH: process.env.PATH!,
              FSHARE_SERVER: serve.url,
              FSHARE_TOKEN: tokenText,
              ...env,
            },
            stdio: 'pipe',
          },
        );
        return { exitCode: 0, stdout: stdout.toString(), stderr: '' };
      } catch (err) {
        const e = err as { status: number; stdout: Buffer; stderr: Buffer };
        return { exitCode: e.status, stdout: e.stdout.toString(), stderr: e.stderr.toString() };
      }
    };
    const res = run({});
    expect(res.exitCode).toBe(2);
    expect(fshareLines(res.stderr)).toEqual([
      'fshare: no config directory: HOME is not set and user 0 has no home directory; set FSHARE_CONFIG_DIR (or HOME) to a directory of yours',
    ]);
    const envs: Record<string, string>[] = [
      { FSHARE_CONFIG_DIR: join(etc, 'config') },
      { XDG_CONFIG_HOME: join(etc, 'xdg') },
    ];
    for (const env of envs) {
      const ok = run(env);
      expect(ok.exitCode, ok.stderr).toBe(0);
      expect(ok.stderr).toBe('');
    }
    await rm(etc, { recursive: true, force: true });
  });
});

describe('a damaged config.json', () => {
  const LINE = (file: string, why: string) =>
    `fshare: the config file ${file} is damaged (${why}); fix it or remove it`;

  it('stops every command that needs it with one line and exit 2, changing nothing', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'config.json');
    const credentials = await readFile(join(cli.configDir, 'credentials.json'), 'utf8');
    const cut = (await readFile(file, 'utf8')).slice(0, 30);
    for (const [text, why] of [
      [cut, 'it is not valid JSON'],
      ['', 'it is empty'],
      ['{"server": 5}', '"server" is not a string'],
      ['{"server": "ftp://x"}', '"server": server URL must be http or https: ftp://x'],
    ] as const) {
      await writeFile(file, text, { mode: 0o600 });
      for (const args of [['whoami'], ['ls'], ['logout']]) {
        const res = await cli.run(args);
        expect(res.exitCode, `${args[0]} with ${text}`).toBe(2);
        expect(fshareLines(res.stderr)).toEqual([LINE(file, why)]);
      }
      expect(await readFile(file, 'utf8')).toBe(text);
    }
    expect(await readFile(join(cli.configDir, 'credentials.json'), 'utf8')).toBe(credentials);
    // --help and --version do not need it.
    expect((await cli.run(['--help'])).exitCode).toBe(0);
    expect((await cli.run(['whoami', '--help'])).exitCode).toBe(0);
    expect((await cli.run(['--version'])).exitCode).toBe(0);
  });

  it('with --server or FSHARE_SERVER: said in a warning, and the command goes on', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'config.json');
    await writeFile(file, '{"server": ', { mode: 0o600 });
    const warning = `${LINE(file, 'it is not valid JSON')}; going on with the server given, without its settings`;
    for (const res of [
      await cli.run(['--server', serve.url, 'whoami']),
      await cli.run(['whoami'], { env: { FSHARE_SERVER: serve.url } }),
    ]) {
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stdout).toMatch(/^admin on /); // the server's only stored account
      expect(fshareLines(res.stderr)).toEqual([warning]);
    }
  });

  it('login, token extend and passwd refuse to write over it, before asking the server', async () => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'config.json');
    const credentialsFile = join(cli.configDir, 'credentials.json');
    const credentials = await readFile(credentialsFile, 'utf8');
    await writeFile(file, '{"server": ', { mode: 0o600 });
    for (const args of [
      ['login', '-u', ADMIN.username, '--password-stdin'],
      ['token', 'extend'],
      ['passwd', '--password-stdin'],
    ]) {
      const res = await cli.run(['--server', serve.url, ...args], {
        input: `${ADMIN.password}\nnew-password-456\n`,
      });
      expect(res.exitCode, args.join(' ')).toBe(2);
      expect(fshareLines(res.stderr)).toEqual([LINE(file, 'it is not valid JSON')]);
      expect(await readFile(file, 'utf8')).toBe('{"server": ');
      expect(await readFile(credentialsFile, 'utf8')).toBe(credentials);
    }
    // passwd never reached the server: the password is the old one.
    const again = await createCli();
    clis.push(again);
    await signIn(again, serve.url);
  });
});

/**
 * Makes `dir` read-only for root too: a read-only bind mount of itself (CI runs as root, which
 * ignores mode bits). A string is the reason it cannot be done here.
 */
function readOnly(dir: string): (() => void) | string {
  try {
    execFileSync('mount', ['--bind', dir, dir], { stdio: 'pipe' });
  } catch (err) {
    const why = (err as { stderr?: Buffer }).stderr?.toString().trim() || String(err);
    return `cannot bind-mount ${dir} here (${why}); run the tests as root to include them`;
  }
  try {
    execFileSync('mount', ['-o', 'remount,bind,ro', dir], { stdio: 'pipe' });
  } catch (err) {
    execFileSync('umount', [dir], { stdio: 'pipe' });
    return `cannot remount ${dir} read-only here (${String(err)})`;
  }
  return () => execFileSync('umount', [dir], { stdio: 'pipe' });
}

describe('logout when credentials.json cannot be rewritten', () => {
  it('says the token was revoked but its local copy stays, naming the file and why (exit 1)', async (ctx) => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'credentials.json');
    const stored = await readFile(file, 'utf8');
    const token = Object.values(JSON.parse(stored) as Record<string, string>)[0]!;
    const release = readOnly(cli.configDir);
    if (typeof release === 'string') return ctx.skip(release);
    let res;
    try {
      res = await cli.run(['logout']);
    } finally {
      release();
    }
    expect(res.exitCode).toBe(1);
    expect(fshareLines(res.stderr)).toEqual([
      `fshare: the token was revoked on the server (so it no longer works), but its local copy could not be removed from ${file} (read-only file system)`,
    ]);
    expect(await readFile(file, 'utf8')).toBe(stored);
    const after = await cli.run(['whoami'], { env: { FSHARE_TOKEN: token } });
    expect(after.exitCode).toBe(3); // revoked indeed
  });

  it('revocation and removal both failing: one line with both, the server error code', async (ctx) => {
    const cli = await signedIn();
    const file = join(cli.configDir, 'credentials.json');
    const down = `http://127.0.0.1:${await closedPort()}`;
    const tokens = JSON.parse(await readFile(file, 'utf8')) as Record<string, string>;
    const token = Object.values(tokens)[0]!;
    await writeFile(file, JSON.stringify({ ...tokens, [`admin@${down}`]: token }));
    const stored = await readFile(file, 'utf8');
    const release = readOnly(cli.configDir);
    if (typeof release === 'string') return ctx.skip(release);
    let res;
    try {
      res = await cli.run(['--server', down, 'logout']);
    } finally {
      release();
    }
    expect(res.exitCode).toBe(6);
    expect(fshareLines(res.stderr)).toEqual([
      expect.stringMatching(
        new RegExp(
          `^fshare: the server did not revoke the token \\(cannot reach ${down}: .*\\), and its local copy could not be removed from ${file} \\(read-only file system\\)$`,
        ),
      ),
    ]);
    expect(await readFile(file, 'utf8')).toBe(stored);
  });

  it("logout from a server other than the last login's removes that server's copy", async () => {
    // Found: only the last login's account was removed; another server's token stayed on disk
    // after "Signed out of SERVER".
    const cli = await signedIn();
    const other = await startServe();
    try {
      await signIn(cli, other.url);
      await signIn(cli, serve.url); // the last login is to `serve` again
      const out = await cli.run(['--server', other.url, 'logout']);
      expect(out.exitCode, out.stderr).toBe(0);
      expect(out.stdout).toBe(`Signed out of ${other.url}`);
      const left = JSON.parse(await readFile(join(cli.configDir, 'credentials.json'), 'utf8'));
      expect(Object.keys(left)).toEqual([`admin@${serve.url}`]);
    } finally {
      await other.stop();
    }
  });
});

// Found from outside: Node's recursive mkdir says ENOENT when a directory cannot be made for
// another reason (nodejs/node#42808, #47098), and fshare passed it on: a config directory, a data
// directory or a pull's target on a read-only or full disk was "no such file or directory: DIR",
// which sends the user looking for a missing parent. Property: the line names the real cause.
describe('a directory that cannot be made is named with the real cause', () => {
  it('on a read-only file system: login, serve and pull each say so (exit 1)', async (ctx) => {
    const parent = await mkdtemp(join(tmpdir(), 'fshare-ro-'));
    const pusher = await signedIn();
    const tree = join(parent, 'tree');
    await mkdir(tree);
    await writeFile(join(tree, 'a.txt'), 'a');
    const pushed = await pusher.run(['push', tree, '--name', 'ro-set']);
    expect(pushed.exitCode, pushed.stderr).toBe(0);
    const release = readOnly(parent);
    if (typeof release === 'string') return ctx.skip(release);
    try {
      const cli = await createCli(join(parent, 'config'));
      const login = await cli.run(
        ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
        {
          input: `${ADMIN.password}\n`,
        },
      );
      expect(login.exitCode).toBe(1);
      expect(fshareLines(login.stderr)).toEqual([
        `fshare: read-only file system: ${join(parent, 'config')}`,
      ]);
      const server = await pusher.run([
        'serve',
        '--port',
        '0',
        '--data-dir',
        join(parent, 'd', 'data'),
      ]);
      expect(server.exitCode).toBe(1);
      expect(fshareLines(server.stderr)).toEqual([
        `fshare: read-only file system: ${join(parent, 'd')}`,
      ]);
      const pull = await pusher.run(['pull', 'ro-set', join(parent, 'pulled')]);
      expect(pull.exitCode).toBe(1);
      expect(fshareLines(pull.stderr)).toEqual([
        `fshare: read-only file system: ${join(parent, 'pulled')}`,
      ]);
    } finally {
      release();
      await rm(parent, { recursive: true, force: true });
    }
  });

  // Found: a pull into a read-only DIR of a set with a name the file system is asked about
  // (x:y.txt) said `read-only file system: DIR/.fshare-tmp-…-:`, a probe file the user never
  // made. Property: the line names DIR.
  it('pull into a read-only directory names it, never a probe file of its own', async (ctx) => {
    const parent = await mkdtemp(join(tmpdir(), 'fshare-ro-pull-'));
    const pusher = await signedIn();
    const tree = join(parent, 'tree');
    await mkdir(join(tree, 'sub'), { recursive: true });
    await writeFile(join(tree, 'sub', 'x:y.txt'), 'colon');
    const pushed = await pusher.run(['push', tree, '--name', 'ro-probe']);
    expect(pushed.exitCode, pushed.stderr).toBe(0);
    const into = join(parent, 'into');
    await mkdir(into);
    const release = readOnly(into);
    if (typeof release === 'string') return ctx.skip(release);
    try {
      const pull = await pusher.run(['pull', 'ro-probe', into]);
      expect(pull.exitCode).toBe(1);
      expect(fshareLines(pull.stderr)).toEqual([`fshare: read-only file system: ${into}`]);
    } finally {
      release();
      await rm(parent, { recursive: true, force: true });
    }
  });

  it('on a disk out of inodes: login says no space is left, naming the directory', async (ctx) => {
    const disk = await mountSmallDisk(8, 40);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      for (let n = 0; (await statfs(disk.dir)).ffree > 0; n++)
        await writeFile(join(disk.dir, String(n)), '');
      const cli = await createCli(join(disk.dir, 'config'));
      const login = await cli.run(
        ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
        {
          input: `${ADMIN.password}\n`,
        },
      );
      expect(login.exitCode).toBe(1);
      expect(fshareLines(login.stderr)).toEqual([
        `fshare: no space left on the device: ${join(disk.dir, 'config')}`,
      ]);
      // The directory there, no inode for config.json's temporary file: the line named that
      // file (config.json.<pid>-<host>-….tmp), not config.json.
      await rm(join(disk.dir, '0'));
      await mkdir(join(disk.dir, 'config'));
      const again = await cli.run(
        ['--server', serve.url, 'login', '-u', ADMIN.username, '--password-stdin'],
        { input: `${ADMIN.password}\n` },
      );
      expect(again.exitCode).toBe(1);
      expect(fshareLines(again.stderr)).toEqual([
        `fshare: no space left on the device: ${join(disk.dir, 'config', 'config.json')}`,
      ]);
    } finally {
      await disk.unmount();
    }
  });
});

// Property: a login that fails changes nothing. Found from outside: on a full disk the token was
// stored, then config.json could not be written; the login said "no space left on the device",
// exit 1, and the next commands were signed in all the same (as the new user, or, where the
// login changed users, under the old user's name with the new user's token beside it).
describe('a login on a full disk', () => {
  const bob = { username: 'bob-fulldisk', password: 'bob-password-123' };

  beforeAll(async () => {
    const admin = await signedIn();
    const res = await admin.run(
      ['users', 'add', bob.username, '--perms', 'LIST', '--password-stdin'],
      {
        input: `${bob.password}\n`,
      },
    );
    expect(res.exitCode, res.stderr).toBe(0);
  });

  /** Leaves `pages` pages of 4 KiB free on the disk (a tmpfs counts its files' pages). */
  async function leaveFree(dir: string, pages: number): Promise<void> {
    const { bavail, bsize } = await statfs(dir);
    expect(bsize).toBe(4096);
    await writeFile(join(dir, 'filler'), Buffer.alloc((bavail - pages) * bsize));
    expect((await statfs(dir)).bavail).toBe(pages);
  }

  function login(cli: Cli, user: { username: string; password: string }) {
    return cli.run(['--server', serve.url, 'login', '-u', user.username, '--password-stdin'], {
      input: `${user.password}\n`,
    });
  }

  it('a first login with room for config.json and not for the token: exit 1, one line, no token kept', async (ctx) => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const dir = join(disk.dir, 'config');
      await mkdir(dir);
      // One page: config.json takes it, and credentials.json finds none.
      await leaveFree(disk.dir, 1);
      const cli = await createCli(dir);
      const res = await login(cli, ADMIN);
      expect(res.exitCode).toBe(1);
      expect(fshareLines(res.stderr)).toEqual([
        `fshare: no space left on the device: ${join(dir, 'credentials.json')}`,
      ]);
      expect(existsSync(join(dir, 'credentials.json'))).toBe(false);
      const who = await cli.run(['whoami']);
      expect(who.stdout).toMatch(/^anonymous on /);
      // With room again, the same login holds.
      await rm(join(disk.dir, 'filler'));
      expect((await login(cli, ADMIN)).exitCode).toBe(0);
      expect((await cli.run(['whoami'])).stdout).toMatch(/^admin on /);
    } finally {
      await disk.unmount();
    }
  });

  it('a login as another user that cannot write config.json leaves the stored tokens as they were', async (ctx) => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const dir = join(disk.dir, 'config');
      const cli = await createCli(dir);
      expect((await login(cli, bob)).exitCode).toBe(0);
      expect((await login(cli, ADMIN)).exitCode).toBe(0); // admin is the default now
      // config.json made two pages long (downloads' validators, as fshare 0.1 kept them there),
      // so that its rewrite needs two free pages and credentials.json's one.
      const config = JSON.parse(await readFile(join(dir, 'config.json'), 'utf8')) as object;
      const partials = Object.fromEntries(
        Array.from({ length: 60 }, (_, i) => [
          `/tmp/download-${i}.bin.part`,
          `"${'e'.repeat(64)}"`,
        ]),
      );
      await writeFile(join(dir, 'config.json'), JSON.stringify({ ...config, partials }));
      const tokensBefore = await readFile(join(dir, 'credentials.json'), 'utf8');
      const bobToken = (JSON.parse(tokensBefore) as Record<string, string>)[
        `${bob.username}@${serve.url}`
      ];
      expect(bobToken).toBeDefined();
      await leaveFree(disk.dir, 1);

      const res = await login(cli, bob);
      expect(res.exitCode).toBe(1);
      expect(fshareLines(res.stderr)).toEqual([
        `fshare: no space left on the device: ${join(dir, 'config.json')}`,
      ]);
      expect(await readFile(join(dir, 'credentials.json'), 'utf8')).toBe(tokensBefore);
      expect((await cli.run(['whoami'])).stdout).toMatch(/^admin on /);
      // bob's earlier token is the one kept, and it still signs bob in.
      const asBob = await cli.run(['whoami'], { env: { FSHARE_TOKEN: bobToken! } });
      expect(asBob.stdout).toMatch(new RegExp(`^${bob.username} on `));

      // The same user again changes nothing in config.json: on the same full disk it holds.
      const again = await login(cli, ADMIN);
      expect(again.exitCode, again.stderr).toBe(0);
      expect((await cli.run(['whoami'])).stdout).toMatch(/^admin on /);
    } finally {
      await disk.unmount();
    }
  });

  /** The tokens the server has revoked (its journal and its compacted state). */
  async function revokedTokens(): Promise<Set<string>> {
    const jtis = new Set<string>();
    const journal = await readFile(join(serve.dataDir, 'db.journal'), 'utf8').catch(() => '');
    for (const m of journal.matchAll(/"op":"revoke","jti":"([^"]+)"/g)) jtis.add(m[1]!);
    const state = JSON.parse(await readFile(join(serve.dataDir, 'db.json'), 'utf8')) as {
      revoked?: Record<string, unknown>;
    };
    for (const jti of Object.keys(state.revoked ?? {})) jtis.add(jti);
    return jtis;
  }

  // Found from outside: `token extend` on a full disk said "no space left" (exit 1) and kept the
  // old token, as it should, but the new token it could not keep stayed valid on the server for
  // its whole lifetime, held by nobody; `passwd` said the same error line although the password
  // had been changed. Property: a new token that cannot be kept is revoked; what changed on the
  // server is said.
  it('token extend and passwd that cannot keep the new token: it is revoked, the old one goes on', async (ctx) => {
    const disk = await mountSmallDisk(1);
    if (typeof disk === 'string') return ctx.skip(disk);
    const carol = { username: 'carol-fulldisk', password: 'carol-password-1' };
    const admin = await signedIn();
    const added = await admin.run(
      ['users', 'add', carol.username, '--perms', 'LIST', '--password-stdin'],
      { input: `${carol.password}\n` },
    );
    expect(added.exitCode, added.stderr).toBe(0);
    try {
      const dir = join(disk.dir, 'config');
      const cli = await createCli(dir);
      expect((await login(cli, carol)).exitCode).toBe(0);
      const tokensBefore = await readFile(join(dir, 'credentials.json'), 'utf8');
      await leaveFree(disk.dir, 0);

      let revoked = await revokedTokens();
      const extend = await cli.run(['token', 'extend']);
      expect(extend.exitCode).toBe(1);
      expect(fshareLines(extend.stderr)).toEqual([
        `fshare: no space left on the device: ${join(dir, 'credentials.json')}`,
      ]);
      expect(await readFile(join(dir, 'credentials.json'), 'utf8')).toBe(tokensBefore);
      expect((await cli.run(['whoami'])).stdout).toMatch(new RegExp(`^${carol.username} on `));
      const afterExtend = await revokedTokens();
      expect(afterExtend.size).toBe(revoked.size + 1);

      revoked = afterExtend;
      const newPassword = 'carol-password-2';
      const passwd = await cli.run(['passwd', '--password-stdin'], {
        input: `${carol.password}\n${newPassword}\n`,
      });
      expect(passwd.exitCode, passwd.stderr).toBe(0);
      expect(passwd.stdout.trim()).toBe('Password changed; every other session was signed out');
      expect(fshareLines(passwd.stderr)).toEqual([
        `fshare: the new token could not be kept (no space left on the device: ${join(dir, 'credentials.json')}): the token kept before goes on`,
      ]);
      expect(await readFile(join(dir, 'credentials.json'), 'utf8')).toBe(tokensBefore);
      expect((await cli.run(['whoami'])).stdout).toMatch(new RegExp(`^${carol.username} on `));
      expect((await revokedTokens()).size).toBe(revoked.size + 1);
      // The password did change.
      await rm(join(disk.dir, 'filler'));
      expect((await login(cli, { ...carol, password: newPassword })).exitCode).toBe(0);
    } finally {
      await disk.unmount();
    }
  });
});
