import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { chmod, mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import https from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  BIN,
  ROOT,
  cleanEnv,
  signIn,
  createCli,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';

/**
 * The CLI says what happened: one line, naming what went wrong and the next step, visible even
 * when a progress bar was on the screen, never a raw Node error.
 */

let serve: Serve;
let admin: Cli;
let work: string;

beforeAll(async () => {
  serve = await startServe();
  admin = await createCli();
  await signIn(admin, serve.url);
  work = await tempDir('messages');
});

afterAll(async () => {
  await serve?.stop();
  await rm(work, { recursive: true, force: true });
});

/** How many shares the server lists (to show that a refused command made none). */
async function shareCount(): Promise<number> {
  return (await admin.json<{ shares: unknown[] }>(['--server', serve.url, 'ls', '--all'])).shares
    .length;
}

/** Uploads a small file called `name`; returns its share's id. */
async function uploaded(name: string): Promise<string> {
  const file = join(work, name);
  await writeFile(file, 'hello');
  const [share] = await admin.json<{ share_id: string }[]>(['--server', serve.url, 'upload', file]);
  return share!.share_id;
}

/** One line on stderr, starting with "fshare: ". */
function oneLine(stderr: string): string {
  const lines = stderr.trim().split('\n');
  expect(lines).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: /);
  expect(stderr).not.toMatch(/\n\s+at |Error:|ENOENT|EISDIR|EACCES/);
  return lines[0]!;
}

describe('errors say what happened', () => {
  it('on a terminal, the error of a failed upload stays visible after its progress bar', async () => {
    const file = join(work, 'tty.bin');
    await writeFile(file, randomBytes(100_000));
    const cfg = await tempDir('tty');
    // `script` gives the command a pseudo-terminal, so the progress bars are drawn.
    const res = await execa(
      'script',
      ['-qec', `node ${BIN} --server ${serve.url} upload ${file}`, '/dev/null'],
      {
        env: cleanEnv({
          FSHARE_CONFIG_DIR: cfg,
          FSHARE_KEYRING: 'off',
          TERM: 'xterm',
          COLUMNS: '100',
        }),
        extendEnv: false,
        reject: false,
        stdin: 'ignore',
      },
    );
    expect(res.exitCode).toBe(3);
    expect(res.stdout).toMatch(/tty\.bin/); // the bar was drawn
    expect(res.stdout).toMatch(/fshare: .*\(HTTP 401\); run `fshare login`/);
  });

  it('local files: missing, a directory, unreadable, each named, exit 2, no share left', async () => {
    const dir = join(work, 'adir');
    await mkdir(dir, { recursive: true });
    const locked = join(work, 'locked.bin');
    await writeFile(locked, 'x');
    await chmod(locked, 0o000);
    const before = await shareCount();
    const missing = await admin.run(['--server', serve.url, 'upload', join(work, 'nope.bin')]);
    expect(missing.exitCode).toBe(2);
    expect(oneLine(missing.stderr)).toContain(join(work, 'nope.bin'));
    const isDir = await admin.run(['--server', serve.url, 'upload', dir]);
    expect(isDir.exitCode).toBe(2);
    expect(oneLine(isDir.stderr)).toMatch(new RegExp(`not a regular file: ${dir}`));
    if (process.getuid?.() !== 0) {
      // root reads any file: the check only means something for other users
      const unreadable = await admin.run(['--server', serve.url, 'upload', locked]);
      expect(oneLine(unreadable.stderr)).toContain(locked);
    }
    const after = await shareCount();
    expect(after).toBe(before);
  });

  // Property: an upload never reports success for bytes it did not send. Found from outside:
  // `upload /proc/cpuinfo` (stat says 0 bytes) made an empty share with exit 0; a sysfs file
  // (stat says 4096) failed as "changed while it was uploading". Such kernel files are refused
  // before any share is made, with the command that uploads them; that command works.
  it('kernel files whose size is unknown until read: exit 2 with the way to upload them, no share left', async () => {
    const before = await shareCount();
    for (const path of ['/proc/cpuinfo', '/sys/devices/system/cpu/online']) {
      const res = await admin.run(['--server', serve.url, 'upload', path]);
      expect(res.exitCode).toBe(2);
      const name = path.split('/').pop()!;
      expect(res.stderr.trim()).toBe(
        `fshare: ${path} is a kernel file, whose size is not known until it is read; upload it from standard input: fshare upload - -n ${name} < ${path}`,
      );
    }
    const after = await shareCount();
    expect(after).toBe(before);
    // The way it names works, and keeps the bytes read.
    const [up] = await admin.json<{ share_id: string; size: number }[]>(
      ['--server', serve.url, 'upload', '-', '-n', 'cpuinfo'],
      { input: await readFile('/proc/cpuinfo') },
    );
    expect(up!.size).toBeGreaterThan(0);
    const got = await admin.runBinary(['--server', serve.url, 'get', up!.share_id, '-o', '-']);
    expect(got.stdout.toString()).toMatch(/^processor\s*:/m);
  });

  // Found from outside: `fshare upload - < DIR` read the directory as nothing and made an empty
  // share, exit 0 (`cat < DIR` says "Is a directory").
  it('upload - with a directory on standard input: exit 2, one line, no share made', async () => {
    const before = await shareCount();
    const res = await execa(
      'bash',
      ['-c', `node ${BIN} --server ${serve.url} upload - < ${work}`],
      {
        env: cleanEnv({ FSHARE_CONFIG_DIR: admin.configDir, FSHARE_KEYRING: 'off' }),
        extendEnv: false,
        reject: false,
      },
    );
    expect(res.exitCode).toBe(2);
    expect(oneLine(res.stderr)).toBe(
      'fshare: - reads standard input, which is a directory here; pipe something in',
    );
    const after = await shareCount();
    expect(after).toBe(before);
  });

  // Property: a closed standard input is not an empty file. Found from outside: `fshare upload -
  // <&-` (a job runner that gives no standard input) made an empty share and said so, exit 0:
  // Node opens /dev/null in place of a closed descriptor. From /dev/null on purpose it still works.
  it('upload - with standard input closed: exit 2, one line, no share made; < /dev/null uploads empty', async () => {
    const env = cleanEnv({ FSHARE_CONFIG_DIR: admin.configDir, FSHARE_KEYRING: 'off' });
    const before = await shareCount();
    const closed = await execa('bash', ['-c', `node ${BIN} --server ${serve.url} upload - <&-`], {
      env,
      extendEnv: false,
      reject: false,
    });
    expect(closed.exitCode).toBe(2);
    expect(oneLine(closed.stderr)).toBe(
      'fshare: - reads standard input, which is closed here; pipe something in',
    );
    expect(await shareCount()).toBe(before);
    const empty = await execa(
      'bash',
      ['-c', `node ${BIN} --server ${serve.url} upload - --json < /dev/null`],
      { env, extendEnv: false, reject: false },
    );
    expect(empty.exitCode).toBe(0);
    expect((JSON.parse(empty.stdout) as { size: number }[])[0]!.size).toBe(0);
    expect(await shareCount()).toBe(before + 1);
  });

  it('get into a directory that does not exist names it; nothing raw leaks', async () => {
    const id = await uploaded('small.bin');
    const target = join(work, 'no', 'such', 'dir', 'out.bin');
    const res = await admin.run(['--server', serve.url, 'get', id, '-o', target]);
    expect(res.exitCode).toBe(1);
    expect(oneLine(res.stderr)).toMatch(/no such file or directory: .*no\/such\/dir\/out\.bin/);
  });

  // Property: a download that cannot end well fails before it starts, and leaves nothing. Found
  // from outside: `get ID --clobber` where a folder has the share's name downloaded it all into
  // NAME.part, then failed to rename it over the folder (exit 1) and left the .part beside it.
  it('get where a folder has the share name: exit 1 before any byte, with or without --clobber; nothing left', async () => {
    const id = await uploaded('folder-named.bin');
    const into = join(work, 'folder-clash');
    await mkdir(join(into, 'folder-named.bin', 'inner'), { recursive: true });
    for (const clobber of [[], ['--clobber']]) {
      const res = await admin.run(['--server', serve.url, 'get', id, '-o', `${into}/`, ...clobber]);
      expect(res.exitCode).toBe(1);
      expect(oneLine(res.stderr)).toBe(
        `fshare: ${join(into, 'folder-named.bin')} is a directory (choose another name with -o)`,
      );
      expect((await readdir(into)).sort()).toEqual(['folder-named.bin']);
      expect(await readdir(join(into, 'folder-named.bin'))).toEqual(['inner']);
    }
  });

  it('not signed in: the 401 says to run fshare login; a wrong password at login does not', async () => {
    const anon = await createCli();
    const res = await anon.run(['--server', serve.url, 'ls']);
    expect(res.exitCode).toBe(3);
    expect(oneLine(res.stderr)).toMatch(/\(HTTP 401\); run `fshare login`/);
    const bad = await anon.run(
      ['--server', serve.url, 'login', '-u', 'admin', '--password-stdin'],
      {
        input: 'wrong\n',
      },
    );
    expect(bad.exitCode).toBe(3);
    expect(oneLine(bad.stderr)).not.toMatch(/run `fshare login`/);
  });

  it('an administrator asking for a user who does not exist: "no such user", exit 4', async () => {
    const res = await admin.run(['--server', serve.url, 'users', 'show', 'ghost']);
    expect(res.exitCode).toBe(4);
    expect(oneLine(res.stderr)).toMatch(/no such user: ghost/);
  });

  it('a server whose TLS certificate cannot be trusted: said in words with the way on, exit 6', async () => {
    const tls = https.createServer(
      {
        key: readFileSync(join(ROOT, 'test/fixtures/tls/key.pem')),
        cert: readFileSync(join(ROOT, 'test/fixtures/tls/cert.pem')),
      },
      (_req, res) => res.end('{}'),
    );
    await new Promise<void>((r) => tls.listen(0, '127.0.0.1', r));
    const url = `https://127.0.0.1:${(tls.address() as AddressInfo).port}`;
    try {
      const res = await admin.run(['--server', url, 'whoami']);
      expect(res.exitCode).toBe(6);
      expect(oneLine(res.stderr)).toMatch(
        /cannot trust https:\/\/127\.0\.0\.1:\d+: its TLS certificate is self-signed .*NODE_EXTRA_CA_CERTS/,
      );
      // https:// to a server that speaks plain HTTP
      const plain = await admin.run(['--server', serve.url.replace('http:', 'https:'), 'whoami']);
      expect(plain.exitCode).toBe(6);
      expect(oneLine(plain.stderr)).toMatch(/does not speak TLS there \(try http:\/\//);
    } finally {
      tls.close();
    }
  });

  it('--debug (or FSHARE_DEBUG=1) shows the error underneath, with its stack', async () => {
    const res = await admin.run([
      '--server',
      serve.url,
      'upload',
      join(work, 'nope.bin'),
      '--debug',
    ]);
    expect(res.stderr.split('\n')[0]).toMatch(/^fshare: no such file: /);
    expect(res.stderr).toMatch(/\n\s+at /);
    const env = await admin.run(['--server', serve.url, 'users', 'show', 'ghost'], {
      env: { FSHARE_DEBUG: '1' },
    });
    expect(env.stderr).toMatch(/ApiError/);
  });

  // Property: a list that shows one page of several says so, wherever its output goes. Found:
  // piped (`fshare ls | cut -f1` in a script), page 1 alone came out with nothing on stderr, and
  // `links --json` (a bare array) had no way to tell either: the rest was lost silently.
  it('ls, users ls and links show one page of several: piped or --json, stderr says which', async () => {
    const file = join(work, 'paged.bin');
    await writeFile(file, randomBytes(100));
    const shares = await admin.json<{ share_id: string }[]>(['upload', file, file, file]);
    for (const share of shares.slice(0, 2)) await admin.json(['link', share.share_id]);
    await admin.run(['users', 'add', 'paged-user', '--password-stdin'], {
      input: 'paged-password-1\n',
    });
    const note = /^\(page 1 of \d+; next: --page 2; --all lists every page\)$/;
    for (const args of [
      ['ls', '--per-page', '2'],
      ['users', 'ls', '--per-page', '1'],
      ['--json', 'links', '--per-page', '1'],
    ]) {
      const res = await admin.run(args);
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stdout.trim(), args.join(' ')).not.toBe('');
      expect(res.stderr.trimEnd().split('\n'), args.join(' ')).toEqual([
        expect.stringMatching(note),
      ]);
    }
    // Every page, or the last one: nothing more to say.
    const all = await admin.run(['ls', '--all']);
    expect(all.stderr).toBe('');
  });
});
