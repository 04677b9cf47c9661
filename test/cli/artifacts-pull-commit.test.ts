// fshare pull into a folder holding the previous version of a set (docs/CLI.md "fshare pull",
// "Old set or new, never a mix"): every file is downloaded and verified before anything in DIR
// changes, so a pull that fails or is killed while downloading leaves DIR as it was; only a
// SIGKILL during the short commit can leave a mix, and the next pull into DIR finishes it.
// The built binary against a real `fshare serve`.
import { execFileSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import {
  chmod,
  lstat,
  mkdir,
  readdir,
  readFile,
  readlink,
  rename,
  rm,
  writeFile,
} from 'node:fs/promises';
import { createServer, request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createCli, signIn, startServe, tempDir, type Cli, type Serve } from '../helpers/cli.js';
import { content, expectStatus, get, until, upload, type ShareJson } from '../helpers/http.js';
import { mountSmallDisk } from '../helpers/mount.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');
const MiB = 1024 * 1024;
const PREFIX = 'fshare-artifact:';
const TEMP = '.fshare-tmp-';
const JOURNAL = /^\.fshare-pull-\d+-[0-9a-f]{8}-[0-9a-f]{12}$/;

interface PullJson {
  files: number;
  downloaded: { files: number; bytes: number };
  skipped: { files: number; bytes: number };
  deleted: { files: number };
}

interface ManifestFile {
  path: string;
  share: string | null;
  offset: number;
  size: number;
}

/** Every path under root (files, directories, links) with what matters about it. */
type Tree = Record<string, string>;

/**
 * What a tree holds: each file's size, mode and sha256, each directory and link. With
 * `withoutTemps`, the temporary files and the lock file of a killed pull are left out (the next
 * pull removes them).
 */
async function snapshot(root: string, withoutTemps = false): Promise<Tree> {
  const tree: Tree = {};
  const walk = async (abs: string, rel: string) => {
    for (const name of (await readdir(abs)).sort()) {
      if (withoutTemps && (name.startsWith(TEMP) || name === '.fshare-pull.lock')) continue;
      const childAbs = join(abs, name);
      const childRel = rel ? `${rel}/${name}` : name;
      const st = await lstat(childAbs);
      if (st.isSymbolicLink()) tree[childRel] = `link ${await readlink(childAbs)}`;
      else if (st.isDirectory()) {
        tree[childRel] = 'dir';
        await walk(childAbs, childRel);
      } else
        tree[childRel] =
          `file ${st.size} ${(st.mode & 0o777).toString(8)} ${sha256(await readFile(childAbs))}`;
    }
  };
  await walk(root, '');
  return tree;
}

/** Writes a file (making its directories) and gives it exactly `mode`. */
async function put(root: string, rel: string, data: Buffer | string, mode = 0o644): Promise<void> {
  const abs = join(root, ...rel.split('/'));
  await mkdir(dirname(abs), { recursive: true });
  await writeFile(abs, data);
  await chmod(abs, mode);
}

/** The entries under dir, at any depth, whose name says they are a pull's temporary file. */
async function leftovers(dir: string): Promise<string[]> {
  return Object.keys(await snapshot(dir)).filter((p) => p.split('/').pop()!.startsWith(TEMP));
}

const journals = async (dir: string) => (await readdir(dir)).filter((n) => JOURNAL.test(n));

describe('fshare pull leaves DIR holding the old set or the new set, never a mix', () => {
  let serve: Serve;
  let admin: Cli;
  let token: string;
  let work: string;

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    await signIn(admin, serve.url);
    token = (await admin.run(['token'])).stdout.trim();
    work = await tempDir('pull-commit');
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  let dirs = 0;
  const freshDir = async (label: string) => {
    const dir = join(work, `${label}-${++dirs}`);
    await mkdir(dir, { recursive: true });
    return dir;
  };

  /** A pull run as a process of its own (to be killed), through `server`. */
  const pullProcess = (server: string, args: string[], env: Record<string, string> = {}) =>
    admin.start(['--server', server, 'pull', ...args], {
      env: { FSHARE_TOKEN: token, ...env },
      timeout: 120_000,
    });

  /** The files of `name`'s stored manifest, read over HTTP as the administrator. */
  const manifestFiles = async (name: string): Promise<ManifestFile[]> => {
    const res = await get(
      serve.url,
      `/files?per_page=1000&file_name=${encodeURIComponent(`${PREFIX}${name}`)}`,
      { token },
    );
    expectStatus(res, 200);
    const shares = res.body.data as ShareJson[];
    expect(shares).toHaveLength(1);
    const text = (await content(serve.url, token, shares[0]!.share_id)).toString('utf8');
    return (JSON.parse(text) as { files: ManifestFile[] }).files;
  };

  /**
   * A set pushed as version 1 and pulled into `out`, then version 2 pushed (--delete): every
   * kind of change a pull makes. Large files are shares of their own, small ones one pack; a
   * file becomes a directory and a directory a file, a file only changes its mode, a new
   * directory comes, a file goes. Returns both versions as trees.
   */
  const twoVersions = async (name: string) => {
    const src = await freshDir(`${name}-src`);
    await put(src, 'a.bin', randomBytes(MiB + 10));
    await put(src, 'b/one.txt', 'one v1\n');
    await put(src, 'b/two.txt', 'two v1\n');
    await put(src, 'd', 'd is a file\n');
    await put(src, 'm/n/f.txt', 'm is a directory\n');
    await put(src, 'mode.txt', 'same bytes, another mode\n', 0o644);
    await put(src, 'old-only.txt', 'only in version 1\n');
    await put(src, 'z.bin', randomBytes(MiB + 30));
    await admin.json(['push', src, '--name', name]);
    const out = await freshDir(`${name}-out`);
    await admin.json(['pull', name, out]);
    const v1 = await snapshot(out);
    expect(v1).toEqual(await snapshot(src));

    await put(src, 'a.bin', randomBytes(MiB + 20));
    await put(src, 'b/one.txt', 'one v2\n');
    await put(src, 'b/two.txt', 'two v2\n');
    await rm(join(src, 'd'));
    await put(src, 'd/g.txt', 'd is a directory now\n');
    await rm(join(src, 'm'), { recursive: true });
    await put(src, 'm', 'm is a file now\n');
    await chmod(join(src, 'mode.txt'), 0o600);
    await put(src, 'n/new.txt', 'a new directory\n');
    await rm(join(src, 'old-only.txt'));
    await put(src, 'z.bin', randomBytes(MiB + 40));
    await admin.json(['push', src, '--name', name, '--delete']);
    const v2 = await snapshot(src);
    expect(v2).not.toEqual(v1);
    return { out, v1, v2 };
  };

  /**
   * A proxy in front of the server that holds every request `hold` picks until `release()` (or
   * for ever: the client is killed while it waits); `held` says whether one came.
   */
  const holdingProxy = async (hold: (req: IncomingMessage) => boolean) => {
    const waiting: (() => void)[] = [];
    let released = false;
    const proxy = createServer((req, res) => {
      const forward = () =>
        req.pipe(
          httpRequest(
            `${serve.url}${req.url}`,
            { method: req.method, headers: req.headers },
            (up) => {
              res.writeHead(up.statusCode ?? 502, up.headers);
              up.pipe(res);
            },
          ).on('error', () => res.destroy()),
        );
      if (!released && hold(req)) waiting.push(forward);
      else forward();
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
      held: () => waiting.length > 0,
      release: () => {
        released = true;
        for (const forward of waiting.splice(0)) forward();
      },
      close: async () => {
        proxy.closeAllConnections();
        await new Promise((resolve) => proxy.close(resolve));
      },
    };
  };

  it('a pull of version 2 one of whose data shares has other bytes than the manifest says: exit 7, and DIR is byte for byte version 1 (files, modes, directories, nothing extra); it was a mix: the files before it renamed into place, what was in the way removed, a mode changed', async () => {
    const name = 'fail-keeps-old';
    const { out, v1, v2 } = await twoVersions(name);
    // z.bin's data share now holds other bytes of the same size (the server's sha256 follows).
    const z = (await manifestFiles(name)).find((f) => f.path === 'z.bin')!;
    await upload(serve.url, token, z.share!, randomBytes(z.size), 1, 'PUT');

    // One download at a time: the others are verified before z.bin's is refused.
    const res = await admin.run(['pull', name, out, '--delete', '-p', '1']);
    expect(res.exitCode, res.stderr).toBe(7);
    expect(res.stderr).toMatch(/^fshare: z\.bin: sha256 [0-9a-f]{64} does not match/);
    expect(await snapshot(out)).toEqual(v1);
    expect(await snapshot(out)).not.toEqual(v2);
  }, 120_000);

  it('SIGKILL of a pull while it downloads leaves DIR version 1 (but for its temporary files), and the next pull gives version 2 exactly, its temporary files gone; the killed pull had already put files of version 2 in place and removed what was in the way', async () => {
    const name = 'killed-downloading';
    const { out, v1, v2 } = await twoVersions(name);
    const z = (await manifestFiles(name)).find((f) => f.path === 'z.bin')!;
    const proxy = await holdingProxy(
      (req) => req.method === 'GET' && req.url === `/files/${z.share}/content`,
    );
    try {
      // One download at a time, z.bin's last: every other file is verified when it is held.
      const child = pullProcess(proxy.url, [name, out, '--delete', '-p', '1']);
      await until(proxy.held, "the pull's download of z.bin", 25, 60_000);
      child.kill('SIGKILL');
      const killed = await child;
      expect(killed.signal, String(killed.stderr)).toBe('SIGKILL');
      expect(await snapshot(out, true)).toEqual(v1);
    } finally {
      await proxy.close();
    }

    const res = await admin.run(['--json', 'pull', name, out, '--delete']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(await snapshot(out)).toEqual(v2);
    expect(await leftovers(out)).toEqual([]);
  }, 120_000);

  it('a pull SIGKILLed in the middle of its commit (test hook FSHARE_TEST_KILL_AFTER_RENAMES) is finished by the next pull into DIR, of any set, before anything else: DIR is exactly version 2, the journal gone; push leaves the journal out', async () => {
    const name = 'killed-committing';
    const { out, v1, v2 } = await twoVersions(name);
    const killed = await pullProcess(serve.url, [name, out, '--delete'], {
      FSHARE_TEST_KILL_AFTER_RENAMES: '2',
    });
    expect(killed.signal, String(killed.stderr)).toBe('SIGKILL');
    // Killed halfway: a mix, and the journal that says how to finish.
    const mixed = await snapshot(out, true);
    const journal = await journals(out);
    expect(journal).toHaveLength(1);
    delete mixed[journal[0]!];
    expect(mixed).not.toEqual(v1);
    expect(mixed).not.toEqual(v2);

    // A push of the folder leaves the journal (and the temporary files) out.
    const pushed = await admin.run(['push', out, '--name', `${name}-copy`]);
    expect(pushed.exitCode, pushed.stderr).toBe(0);
    expect(pushed.stderr).toContain(
      `fshare: ${journal[0]}: the journal of an interrupted fshare pull, skipped`,
    );
    expect((await manifestFiles(`${name}-copy`)).map((f) => f.path)).not.toContain(journal[0]);

    // The next pull into DIR, even of a set that does not exist, finishes the commit first.
    const other = await admin.run(['pull', 'no-such-set', out]);
    expect(other.exitCode, other.stderr).toBe(4);
    expect(other.stderr).toContain('fshare: finished an interrupted pull into ');
    expect(await snapshot(out)).toEqual(v2);
    expect(await journals(out)).toEqual([]);
    expect(await leftovers(out)).toEqual([]);

    // Nothing is left to do: every file of version 2 is already there.
    const again = await admin.json<PullJson>(['pull', name, out, '--delete']);
    expect(again.downloaded.files).toBe(0);
    expect(again.deleted.files).toBe(0);
    expect(await snapshot(out)).toEqual(v2);
  }, 120_000);

  it("a pull into a subdirectory of DIR, between a commit killed there and the next pull into DIR, keeps the temporary files the journal names, so that pull still finishes the commit: DIR is exactly version 2 (with the subdirectory pull's file); it took them for leftovers of a dead pull and removed them, and their files stayed version 1", async () => {
    const name = 'killed-then-subdir';
    const { out, v2 } = await twoVersions(name);
    const killed = await pullProcess(serve.url, [name, out, '--delete'], {
      FSHARE_TEST_KILL_AFTER_RENAMES: '1', // b/one.txt: b/two.txt's waits in b/
    });
    expect(killed.signal, String(killed.stderr)).toBe('SIGKILL');
    expect(await journals(out)).toHaveLength(1);
    const waiting = (await leftovers(out)).filter((p) => p.includes('/'));
    expect(waiting.length).toBeGreaterThan(0);
    const sub = dirname(waiting[0]!);

    // Another set pulled into that subdirectory (a pull of its own, with its own sweep).
    const src = await freshDir(`${name}-sub-src`);
    await put(src, 'extra.txt', 'a set of its own\n');
    await admin.json(['push', src, '--name', `${name}-sub`]);
    await admin.json(['pull', `${name}-sub`, join(out, ...sub.split('/'))]);
    expect(await leftovers(out)).toEqual(expect.arrayContaining(waiting));

    const next = await admin.run(['pull', 'no-such-set', out]);
    expect(next.exitCode, next.stderr).toBe(4);
    expect(next.stderr).toContain('fshare: finished an interrupted pull into ');
    expect(await snapshot(out)).toEqual({
      ...v2,
      [`${sub}/extra.txt`]: (await snapshot(src))['extra.txt'],
    });
    expect(await journals(out)).toEqual([]);
    expect(await leftovers(out)).toEqual([]);
  }, 120_000);

  it("two pulls into one DIR at once run one after the other: the second waits (saying so) and plans against what the first left, so DIR ends holding its set; it planned against DIR as it was before, skipped f.bin as already right, and reported its set while f.bin held the first pull's bytes", async () => {
    const name = 'one-at-a-time';
    const srcP = await freshDir(`${name}-p`);
    await put(srcP, 'f.bin', randomBytes(MiB + 50));
    await put(srcP, 'a.txt', 'only in p\n');
    const srcQ = await freshDir(`${name}-q`);
    await put(srcQ, 'f.bin', randomBytes(MiB + 60));
    await put(srcQ, 'b.txt', 'only in q\n');
    await admin.json(['push', srcP, '--name', `${name}-p`]);
    await admin.json(['push', srcQ, '--name', `${name}-q`]);
    const out = await freshDir(`${name}-out`);
    await admin.json(['pull', `${name}-q`, out]);
    await rm(join(out, 'b.txt')); // the second pull has a file to fetch between plan and commit
    const pF = (await manifestFiles(`${name}-p`)).find((f) => f.path === 'f.bin')!;
    const qB = (await manifestFiles(`${name}-q`)).find((f) => f.path === 'b.txt')!;
    const contentOf = (share: string | null) => (req: IncomingMessage) =>
      req.method === 'GET' && req.url === `/files/${share}/content`;
    const gateP = await holdingProxy(contentOf(pF.share));
    const gateQ = await holdingProxy(contentOf(qB.share));
    try {
      const first = pullProcess(gateP.url, [`${name}-p`, out]);
      await until(gateP.held, "the first pull's download of f.bin", 25, 60_000);
      const second = pullProcess(gateQ.url, [`${name}-q`, out]);
      let stderr = '';
      second.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      await until(
        () => stderr.includes('waiting for another fshare pull') || gateQ.held(),
        'the second pull to wait or to fetch b.txt',
        25,
        60_000,
      );
      expect(stderr).toContain(`fshare: waiting for another fshare pull into `);
      gateP.release();
      const done = await first;
      expect(done.exitCode, String(done.stderr)).toBe(0);
      gateQ.release();
      const later = await second;
      expect(later.exitCode, String(later.stderr)).toBe(0);
    } finally {
      gateP.release();
      gateQ.release();
      await gateP.close();
      await gateQ.close();
    }
    const p = await snapshot(srcP);
    const q = await snapshot(srcQ);
    expect(await snapshot(out)).toEqual({ 'a.txt': p['a.txt'], ...q });
  }, 120_000);

  it('the journal of a commit killed on another host (a DIR shared over NFS) or by a process whose pid now runs something else is finished by the next pull into DIR, which holds the lock no commit is made without: DIR exactly version 2; it was left alone for good, DIR a mix', async () => {
    for (const owner of ['another host', 'a live pid'] as const) {
      const name = `killed-${owner.replace(/ /g, '-')}`;
      const { out, v1, v2 } = await twoVersions(name);
      const killed = await pullProcess(serve.url, [name, out, '--delete'], {
        FSHARE_TEST_KILL_AFTER_RENAMES: '2',
      });
      expect(killed.signal, String(killed.stderr)).toBe('SIGKILL');
      const [journal] = await journals(out);
      const [, pid, host, rest] = /^\.fshare-pull-(\d+)-([0-9a-f]{8})-(.*)$/.exec(journal!)!;
      const renamed =
        owner === 'another host'
          ? `.fshare-pull-${pid}-${host === '0badf00d' ? '0badcafe' : '0badf00d'}-${rest}`
          : `.fshare-pull-${process.pid}-${host}-${rest}`; // this test's own process: alive
      await rename(join(out, journal!), join(out, renamed));
      const mixed = await snapshot(out, true);
      delete mixed[renamed];
      expect(mixed).not.toEqual(v1);
      expect(mixed).not.toEqual(v2);

      const next = await admin.run(['pull', 'no-such-set', out]);
      expect(next.exitCode, next.stderr).toBe(4);
      expect(next.stderr).toContain('fshare: finished an interrupted pull into ');
      expect(await snapshot(out)).toEqual(v2);
      expect(await journals(out)).toEqual([]);
    }
  }, 120_000);

  it('a killed commit that cannot be finished (a file put where its directory goes) stops the next pull with exit 1 and one line naming the journal and what to do, the journal kept; once the journal is removed, the pull with --delete gives version 2 exactly', async () => {
    const name = 'killed-unfinishable';
    const { out, v2 } = await twoVersions(name);
    const killed = await pullProcess(serve.url, [name, out, '--delete'], {
      FSHARE_TEST_KILL_AFTER_RENAMES: '2',
    });
    expect(killed.signal, String(killed.stderr)).toBe('SIGKILL');
    const [journal] = await journals(out);
    await writeFile(join(out, 'n'), 'a file where the set makes a directory\n');
    const stuck = await admin.run(['pull', name, out, '--delete']);
    expect(stuck.exitCode, stuck.stderr).toBe(1);
    expect(stuck.stderr.trim().split('\n')).toEqual([
      `fshare: an interrupted pull into ${out} could not be finished (${join(out, 'n')} is not a directory); its journal is ${join(out, journal!)}: remove it to pull without finishing that step`,
    ]);
    expect(await journals(out)).toEqual([journal]); // kept, as the line says

    await rm(join(out, journal!));
    const res = await admin.run(['pull', name, out, '--delete']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(await snapshot(out)).toEqual(v2);
  }, 120_000);
  // Property: a pull whose directories have no room on DIR's disk fails before its commit
  // changes anything. Found from outside (ext4, and a tmpfs out of inodes): the commit stopped at
  // a mkdir (no space left), DIR part old, part new, holding a journal for the next pull.
  it('a pull whose new directories do not fit on the disk: exit 1, one line naming DIR, DIR as it was and nothing left; it stopped in the middle of its commit, DIR a mix', async (ctx) => {
    const src = await freshDir('no-room-src');
    for (let d = 0; d < 20; d++)
      for (let f = 0; f < 10; f++) await put(src, `d${d}/f${f}.txt`, `${d}/${f}\n`);
    await admin.json(['push', src, '--name', 'no-room']);
    // Inodes for the 200 downloaded files, not for the 20 directories they go into as well.
    const disk = await mountSmallDisk(4, 215);
    if (typeof disk === 'string') return ctx.skip(disk);
    try {
      const out = join(disk.dir, 'out');
      await put(out, 'keep.txt', 'in DIR before the pull\n');
      const before = await snapshot(out);
      const res = await admin.run(['pull', 'no-room', out]);
      expect(res.exitCode).toBe(1);
      expect(res.stderr.trim().split('\n')).toEqual([
        `fshare: no space left on the device: ${out}`,
      ]);
      expect(await snapshot(out)).toEqual(before);

      // With room, the same pull gives the set whole.
      execFileSync('mount', ['-o', 'remount,nr_inodes=1000', disk.dir]);
      await admin.json(['pull', 'no-room', out]);
      expect(await snapshot(out)).toEqual({ ...(await snapshot(src)), ...before });
    } finally {
      await disk.unmount();
    }
  });
});
