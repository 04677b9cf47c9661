// Artifacts from the command line (docs/CLI.md "Artifacts": fshare push, pull, artifacts, and
// `upload -`): the built binary against a real `fshare serve`, the server's shares read over plain
// HTTP as the administrator, hostile manifests planted in the puller's own account, and sets of the
// same name that another user made (never used: a set is its owner's).
import { createHash, randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import {
  chmod,
  link,
  lstat,
  mkdir,
  open,
  readdir,
  readFile,
  readlink,
  rm,
  stat,
  symlink,
  unlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { createServer, request as httpRequest, type IncomingMessage } from 'node:http';
import type { AddressInfo } from 'node:net';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { formatSize } from '../../src/shared/size.js';
import {
  BIN,
  cleanEnv,
  createCli,
  signIn,
  startServe,
  tempDir,
  type Cli,
  type Serve,
} from '../helpers/cli.js';
import {
  allShares,
  content,
  createShareWithContent,
  createUser,
  del,
  expectStatus,
  get,
  getShare,
  setDefaultPermissions,
  until,
  upload,
  walkAll,
  type ShareJson,
} from '../helpers/http.js';
import { chunkCounter } from '../helpers/chunk-proxy.js';
import { startStandIn, type StandIn } from '../helpers/standin.js';

const sha256 = (data: Buffer) => createHash('sha256').update(data).digest('hex');

const MiB = 1024 * 1024;
/** docs/CLI.md: a file of 1 MiB or more is a share of its own; smaller ones go into packs … */
const PACK_FILE_LIMIT = MiB;
/** … of up to 8 MiB. */
const PACK_BYTES = 8 * MiB;
const PREFIX = 'fshare-artifact:';

interface Counts {
  files: number;
  bytes: number;
}

interface PushJson {
  name: string;
  manifest_id: string;
  files: number;
  bytes: number;
  uploaded: Counts;
  skipped: Counts;
  deleted: { files: number };
  changed: boolean;
}

interface PullJson {
  name: string;
  manifest_id: string;
  dir: string;
  files: number;
  bytes: number;
  downloaded: Counts;
  skipped: Counts;
  deleted: { files: number };
}

interface ArtifactJson {
  name: string;
  manifest_id: string;
  files: number;
  bytes: number;
  created: string;
}

interface ManifestFile {
  path: string;
  size: number;
  mode: number;
  sha256: string;
  share: string | null;
  offset: number;
}

interface Manifest {
  format: string;
  name: string;
  created: string;
  files: ManifestFile[];
  dirs: string[];
}

/** What a tree holds: every path (files, directories, links) with what matters about it. */
type Tree = Record<
  string,
  | { kind: 'file'; size: number; mode: number; sha256: string }
  | { kind: 'dir' }
  | { kind: 'link'; target: string }
>;

async function snapshot(root: string): Promise<Tree> {
  const tree: Tree = {};
  const walk = async (abs: string, rel: string) => {
    for (const name of (await readdir(abs)).sort()) {
      const childAbs = join(abs, name);
      const childRel = rel ? `${rel}/${name}` : name;
      const st = await lstat(childAbs);
      if (st.isSymbolicLink()) tree[childRel] = { kind: 'link', target: await readlink(childAbs) };
      else if (st.isDirectory()) {
        tree[childRel] = { kind: 'dir' };
        await walk(childAbs, childRel);
      } else
        tree[childRel] = {
          kind: 'file',
          size: st.size,
          mode: st.mode & 0o777,
          sha256: sha256(await readFile(childAbs)),
        };
    }
  };
  await walk(root, '');
  return tree;
}

/** The directories of a tree that hold nothing. */
function emptyDirs(tree: Tree): string[] {
  return Object.keys(tree)
    .filter((p) => tree[p]!.kind === 'dir')
    .filter((d) => !Object.keys(tree).some((p) => p.startsWith(`${d}/`)))
    .sort();
}

/** Writes a file (making its directories) and gives it exactly `mode`. */
async function put(root: string, rel: string, data: Buffer | string, mode = 0o644): Promise<void> {
  const abs = join(root, ...rel.split('/'));
  await mkdir(dirname(abs), { recursive: true });
  await writeFile(abs, data);
  await chmod(abs, mode);
}

/** One line on stderr, in CLI.md's shape ("fshare: …"). */
function expectErrorLine(stderr: string): string {
  const lines = stderr.trimEnd().split('\n');
  expect(lines, stderr).toHaveLength(1);
  expect(lines[0]).toMatch(/^fshare: \S/);
  return lines[0]!;
}

/** Every `.fshare-tmp-*` entry under dir. */
async function leftovers(dir: string): Promise<string[]> {
  return (await walkAll(dir)).filter((p) => p.split('/').pop()!.startsWith('.fshare-tmp-'));
}

describe('fshare push, pull and artifacts against fshare serve', () => {
  let serve: Serve;
  let admin: Cli;
  let token: string;
  let work: string;

  beforeAll(async () => {
    serve = await startServe();
    admin = await createCli();
    await signIn(admin, serve.url);
    token = (await admin.run(['token'])).stdout.trim();
    work = await tempDir('artifacts');
  });

  afterAll(async () => {
    await serve?.stop();
    for (const dir of [admin?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  /** A fresh directory under the test's work directory. */
  let dirs = 0;
  const freshDir = async (label: string) => {
    const dir = join(work, `${label}-${++dirs}`);
    await mkdir(dir, { recursive: true });
    return dir;
  };

  const push = (dir: string, name: string, args: string[] = []) =>
    admin.json<PushJson>(['push', dir, '--name', name, ...args]);
  const pull = (name: string, dir: string, args: string[] = []) =>
    admin.json<PullJson>(['pull', name, dir, ...args]);

  /**
   * A proxy in front of the server that holds the requests `hold` picks (only the first, with
   * `once`) until `release()`; `held` says whether one came. Everything else passes through.
   * With `bodies`, `hold` also sees each request's body (read whole first: small ones only).
   */
  const holdingProxy = async (
    hold: (req: IncomingMessage, body?: Buffer) => boolean,
    { once = false, bodies = false } = {},
  ) => {
    let release!: () => void;
    const released = new Promise<void>((resolve) => (release = resolve));
    let held = false;
    const proxy = createServer(async (req, res) => {
      let body: Buffer | undefined;
      if (bodies) {
        const parts: Buffer[] = [];
        for await (const part of req) parts.push(part as Buffer);
        body = Buffer.concat(parts);
      }
      const forward = () => {
        const up = httpRequest(
          `${serve.url}${req.url}`,
          { method: req.method, headers: req.headers },
          (answer) => {
            res.writeHead(answer.statusCode ?? 502, answer.headers);
            answer.pipe(res);
          },
        );
        if (body) up.end(body);
        else req.pipe(up);
      };
      if (!(once && held) && hold(req, body)) {
        held = true;
        void released.then(forward);
      } else forward();
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    return {
      url: `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`,
      held: () => held,
      release,
      close: () => new Promise((resolve) => proxy.close(resolve)),
    };
  };

  /**
   * Pushes `src` as `name` through a holding proxy; `change` runs while the request `hold`
   * picks is held. The push must be exit 7 with the one line `line`.
   */
  const changedDuringPush = async (
    src: string,
    name: string,
    o: {
      hold: (req: IncomingMessage) => boolean;
      once?: boolean;
      what: string;
      change: () => Promise<unknown>;
      line: string;
    },
  ) => {
    const proxy = await holdingProxy(o.hold, { once: o.once });
    try {
      const pushing = admin.run(['--server', proxy.url, 'push', src, '--name', name], {
        env: { FSHARE_TOKEN: token },
      });
      await until(proxy.held, o.what, 25, 20_000);
      await o.change();
      proxy.release();
      const res = await pushing;
      expect(res.exitCode, res.stderr).toBe(7);
      expect(expectErrorLine(res.stderr)).toBe(o.line);
    } finally {
      proxy.release();
      await proxy.close();
    }
  };

  /** Shares whose name starts with `prefix`, read over HTTP as the administrator. */
  const sharesByPrefix = async (prefix: string): Promise<ShareJson[]> => {
    const res = await get(
      serve.url,
      `/files?per_page=1000&name_prefix=${encodeURIComponent(prefix)}`,
      { token },
    );
    expectStatus(res, 200);
    expect(res.body.next).toBeNull();
    return res.body.data as ShareJson[];
  };
  const dataShares = (name: string) => sharesByPrefix(`${PREFIX}${name}:data:`);

  /** The stored manifest of `name` (exactly one manifest share), read over HTTP. */
  const manifestOf = async (name: string): Promise<{ share: ShareJson; manifest: Manifest }> => {
    const res = await get(
      serve.url,
      `/files?per_page=1000&file_name=${encodeURIComponent(`${PREFIX}${name}`)}`,
      { token },
    );
    expectStatus(res, 200);
    const shares = res.body.data as ShareJson[];
    expect(shares, `manifest shares of ${name}`).toHaveLength(1);
    const manifest = JSON.parse(
      (await content(serve.url, token, shares[0]!.share_id)).toString('utf8'),
    ) as Manifest;
    return { share: shares[0]!, manifest };
  };

  /** The share ids a manifest names. */
  const referenced = (m: Manifest) =>
    new Set(m.files.map((f) => f.share).filter((s): s is string => s !== null));

  it('push then pull gives back a byte-identical tree: nested and empty dirs, empty and unicode files, modes, large files as shares of their own and small files packed', async () => {
    const src = await freshDir('tree-src');
    await put(src, 'top.txt', 'top\n');
    await put(src, 'empty.txt', '');
    await put(src, 'bin/run.sh', '#!/bin/sh\necho hi\n', 0o755);
    await put(src, 'secret/key.pem', randomBytes(512), 0o600);
    await put(src, 'ünïcödé/çà.txt', 'accents\n');
    await put(src, '日本語/ファイル.txt', 'nihongo\n', 0o640);
    await put(src, 'deep/er/and/deeper/leaf.txt', 'leaf\n');
    await mkdir(join(src, 'emptydir'));
    await mkdir(join(src, 'nested', 'deeper', 'empty-inside'), { recursive: true });
    const large = randomBytes(3 * MiB + 17);
    await put(src, 'big/large.bin', large);
    await put(src, 'edge/below.bin', randomBytes(PACK_FILE_LIMIT - 1)); // packed
    await put(src, 'edge/at.bin', randomBytes(PACK_FILE_LIMIT)); // a share of its own
    for (let i = 0; i < 100; i++)
      await put(src, `small/${String(i).padStart(3, '0')}.txt`, randomBytes(1 + ((i * 97) % 3000)));
    // 9 MiB of small files: more than one pack
    for (let i = 0; i < 10; i++) await put(src, `medium/${i}.bin`, randomBytes(900 * 1024));
    const want = await snapshot(src);
    const fileCount = Object.values(want).filter((e) => e.kind === 'file').length;
    const byteCount = Object.values(want).reduce((n, e) => n + (e.kind === 'file' ? e.size : 0), 0);

    const name = 'tree';
    const pushed = await push(src, name);
    expect(pushed).toEqual({
      name,
      manifest_id: expect.stringMatching(/^[0-9a-f-]{36}$/),
      files: fileCount,
      bytes: byteCount,
      uploaded: { files: fileCount - 1, bytes: byteCount }, // the empty file needs no upload
      skipped: { files: 1, bytes: 0 },
      deleted: { files: 0 },
      changed: true,
    });

    const out = await freshDir('tree-out');
    const pulled = await pull(name, out);
    expect(pulled).toEqual({
      name,
      manifest_id: pushed.manifest_id,
      dir: out,
      files: fileCount,
      bytes: byteCount,
      downloaded: { files: fileCount, bytes: byteCount },
      skipped: { files: 0, bytes: 0 },
      deleted: { files: 0 },
    });
    const got = await snapshot(out);
    expect(got).toEqual(want);
    expect(emptyDirs(got)).toEqual(['emptydir', 'nested/deeper/empty-inside']);
    expect((await readFile(join(out, 'big', 'large.bin'))).equals(large)).toBe(true);
    for (const [path, mode] of [
      ['bin/run.sh', 0o755],
      ['secret/key.pem', 0o600],
      ['top.txt', 0o644],
      ['日本語/ファイル.txt', 0o640],
    ] as const)
      expect(got[path], path).toMatchObject({ kind: 'file', mode });

    // How it is stored: the manifest, large files as shares of their own, small ones packed.
    const { share, manifest } = await manifestOf(name);
    expect(share.share_id).toBe(pushed.manifest_id);
    expect(manifest).toMatchObject({ format: 'fshare-artifact/1', name });
    expect(manifest.files.map((f) => f.path)).toEqual(
      Object.keys(want)
        .filter((p) => want[p]!.kind === 'file')
        .sort((a, b) => (a < b ? -1 : a > b ? 1 : 0)),
    );
    expect([...manifest.dirs].sort()).toEqual(['emptydir', 'nested/deeper/empty-inside']);
    const data = new Map((await dataShares(name)).map((s) => [s.share_id, s]));
    for (const s of data.values()) {
      expect(s.initialized).toBe(true);
      expect(s.file_name).toBe(`${PREFIX}${name}:data:${s.sha256}`);
    }
    expect(new Set(data.keys())).toEqual(referenced(manifest));
    const entry = (p: string) => manifest.files.find((f) => f.path === p)!;
    expect(entry('empty.txt')).toMatchObject({ size: 0, share: null });
    for (const p of ['big/large.bin', 'edge/at.bin']) {
      const own = data.get(entry(p).share!)!;
      expect(own.size, p).toBe(entry(p).size);
      expect(own.sha256, p).toBe(entry(p).sha256);
      expect(entry(p).offset).toBe(0);
      expect(manifest.files.filter((f) => f.share === own.share_id)).toHaveLength(1);
    }
    const packed = manifest.files.filter((f) => f.size > 0 && f.size < PACK_FILE_LIMIT);
    const packs = new Set(packed.map((f) => f.share!));
    expect(packs.size).toBeGreaterThanOrEqual(2); // 10 MiB of small files
    expect(packs.size).toBeLessThan(packed.length / 10); // packed, not a share each
    for (const id of packs) expect(data.get(id)!.size!).toBeLessThanOrEqual(PACK_BYTES);
    expect(data.size).toBe(packs.size + 2);

    // A second pull into the same folder finds everything there already.
    const again = await pull(name, out);
    expect(again.downloaded).toEqual({ files: 0, bytes: 0 });
    expect(again.skipped).toEqual({ files: fileCount, bytes: byteCount });
    expect(await snapshot(out)).toEqual(want);
  }, 120_000);

  it('a second push of an unchanged folder uploads nothing and creates no share', async () => {
    const src = await freshDir('same-src');
    for (let i = 0; i < 20; i++) await put(src, `f${i}.txt`, randomBytes(1000 + i));
    await put(src, 'large.bin', randomBytes(2 * MiB));
    const name = 'unchanged';
    const first = await push(src, name);
    expect(first.changed).toBe(true);
    const before = await allShares(serve.url, token);
    const manifestBefore = (await manifestOf(name)).share;

    const second = await push(src, name);
    expect(second).toEqual({
      name,
      manifest_id: first.manifest_id,
      files: 21,
      bytes: first.bytes,
      uploaded: { files: 0, bytes: 0 },
      skipped: { files: 21, bytes: first.bytes },
      deleted: { files: 0 },
      changed: false,
    });
    const after = await allShares(serve.url, token);
    expect(after.map((s) => s.share_id).sort()).toEqual(before.map((s) => s.share_id).sort());
    // the manifest was not even rewritten
    expect((await manifestOf(name)).share.sha256).toBe(manifestBefore.sha256);

    const text = await admin.run(['push', src, '--name', name]);
    expect(text.exitCode, text.stderr).toBe(0);
    expect(text.stdout).toBe(
      `${name}: unchanged (21 files, ${formatSize(first.bytes)}); nothing uploaded`,
    );
    expect((await allShares(serve.url, token)).length).toBe(before.length);
  }, 60_000);

  // Found from outside: a file rewritten in place (same inode and size) with its mtime put back
  // (`touch -d`) kept its cached hash: the push said "unchanged" and the set kept the old bytes.
  // The cache now also compares the ctime, which every write changes.
  it('a file rewritten in place with its old mtime put back is pushed again, small or large', async () => {
    const src = await freshDir('touched-src');
    await put(src, 'small.txt', randomBytes(3000));
    await put(src, 'large.bin', randomBytes(2 * MiB));
    // Whole seconds, so that putting the mtime back is exact.
    const when = Math.floor(Date.now() / 1000) - 3600;
    for (const file of ['small.txt', 'large.bin']) await utimes(join(src, file), when, when);
    const name = 'touched';
    await push(src, name);
    for (const file of ['small.txt', 'large.bin']) {
      const path = join(src, file);
      const before = await stat(path);
      await new Promise((r) => setTimeout(r, 20)); // a ctime the rewrite cannot share
      const handle = await open(path, 'r+');
      await handle.write(randomBytes(before.size), 0, before.size, 0);
      await handle.close();
      await utimes(path, when, when);
      expect((await stat(path)).mtimeMs).toBe(before.mtimeMs);
      expect((await stat(path)).ino).toBe(before.ino);
    }
    const second = await push(src, name);
    expect(second.changed).toBe(true);
    expect(second.uploaded.files).toBe(2);
    const out = await freshDir('touched-out');
    await pull(name, out);
    expect(await snapshot(out)).toEqual(await snapshot(src));
  }, 60_000);

  it('only a changed file goes up, small or large, and a pull into the old folder fetches only it', async () => {
    const src = await freshDir('delta-src');
    for (let i = 0; i < 30; i++) await put(src, `s/${i}.txt`, randomBytes(500 + i * 10));
    await put(src, 'large.bin', randomBytes(2 * MiB + 5));
    const name = 'delta';
    await push(src, name);
    const out = await freshDir('delta-out');
    await pull(name, out);
    expect(await snapshot(out)).toEqual(await snapshot(src));

    // one small file
    const small = randomBytes(777);
    await put(src, 's/7.txt', small);
    const pushedSmall = await push(src, name);
    expect(pushedSmall).toMatchObject({
      files: 31,
      uploaded: { files: 1, bytes: small.length },
      skipped: { files: 30 },
      changed: true,
    });
    const pulledSmall = await pull(name, out);
    expect(pulledSmall.downloaded).toEqual({ files: 1, bytes: small.length });
    expect(pulledSmall.skipped.files).toBe(30);
    expect(await snapshot(out)).toEqual(await snapshot(src));

    // one large file: only it goes up, and its old share goes away
    const oldLarge = (await manifestOf(name)).manifest.files.find((f) => f.path === 'large.bin')!;
    const large = randomBytes(2 * MiB + 9);
    await put(src, 'large.bin', large);
    const pushedLarge = await push(src, name);
    expect(pushedLarge).toMatchObject({
      uploaded: { files: 1, bytes: large.length },
      skipped: { files: 30 },
      changed: true,
    });
    const { manifest } = await manifestOf(name);
    expect(new Set((await dataShares(name)).map((s) => s.share_id))).toEqual(referenced(manifest));
    expect(referenced(manifest).has(oldLarge.share!)).toBe(false);
    expectStatus(await get(serve.url, `/files/${oldLarge.share}`, { token }), 404);
    const pulledLarge = await pull(name, out);
    expect(pulledLarge.downloaded).toEqual({ files: 1, bytes: large.length });
    expect(pulledLarge.skipped.files).toBe(30);
    expect(await snapshot(out)).toEqual(await snapshot(src));
  }, 120_000);

  it('--delete: push keeps files gone from the folder unless told, then drops them and their data; pull --delete removes extras inside DIR only', async () => {
    const src = await freshDir('del-src');
    await put(src, 'keep.txt', 'keep\n');
    await put(src, 'sub/x.txt', 'x\n');
    const big = randomBytes(2 * MiB);
    await put(src, 'big.bin', big);
    const name = 'deletions';
    await push(src, name);
    const bigShare = (await manifestOf(name)).manifest.files.find(
      (f) => f.path === 'big.bin',
    )!.share!;

    await unlink(join(src, 'big.bin'));
    const kept = await push(src, name);
    expect(kept).toMatchObject({ files: 3, deleted: { files: 0 } });
    const withBig = await freshDir('del-out-kept');
    await pull(name, withBig);
    expect((await readFile(join(withBig, 'big.bin'))).equals(big)).toBe(true);

    const dropped = await push(src, name, ['--delete']);
    expect(dropped).toMatchObject({ files: 2, deleted: { files: 1 }, changed: true });
    const { manifest } = await manifestOf(name);
    expect(manifest.files.map((f) => f.path)).toEqual(['keep.txt', 'sub/x.txt']);
    expectStatus(await get(serve.url, `/files/${bigShare}`, { token }), 404);
    expect(new Set((await dataShares(name)).map((s) => s.share_id))).toEqual(referenced(manifest));
    const without = await freshDir('del-out-dropped');
    await pull(name, without);
    expect(Object.keys(await snapshot(without)).sort()).toEqual(['keep.txt', 'sub', 'sub/x.txt']);

    // pull --delete: extras inside DIR go, nothing outside DIR is touched
    const parent = await freshDir('del-parent');
    const out = join(parent, 'out');
    const outside = join(parent, 'outside');
    await put(parent, 'sibling.txt', 'sibling\n');
    await put(outside, 'precious.txt', 'precious\n');
    await put(out, 'extra.txt', 'extra\n');
    await put(out, 'sub/extra-in-sub.txt', 'extra\n');
    await mkdir(join(out, 'extra-dir', 'inner'), { recursive: true });
    await symlink(outside, join(out, 'escape'));
    const res = await pull(name, out, ['--delete']);
    expect(res.deleted).toEqual({ files: 3 }); // extra.txt, sub/extra-in-sub.txt, the link
    expect(await snapshot(out)).toEqual(await snapshot(src));
    expect(await readFile(join(parent, 'sibling.txt'), 'utf8')).toBe('sibling\n');
    expect(await snapshot(outside)).toEqual({
      'precious.txt': {
        kind: 'file',
        size: 9,
        mode: 0o644,
        sha256: sha256(Buffer.from('precious\n')),
      },
    });
  }, 120_000);

  it('a pull that wants only the first file of a pack (the others already there) fetches it; it was exit 7, the whole pack written into it and refused', async () => {
    const src = await freshDir('first-src');
    await put(src, 'a.txt', 'first in the pack\n');
    await put(src, 'b.txt', 'second\n');
    await put(src, 'c.txt', 'third\n');
    const name = 'first-of-pack';
    await push(src, name);
    const { manifest } = await manifestOf(name);
    expect(manifest.files.find((f) => f.path === 'a.txt')!.offset).toBe(0);
    expect(referenced(manifest).size).toBe(1); // one pack
    const out = await freshDir('first-out');
    await pull(name, out);
    await put(out, 'a.txt', 'edited by a build step\n');

    const again = await pull(name, out);
    expect(again.downloaded).toEqual({ files: 1, bytes: 'first in the pack\n'.length });
    expect(again.skipped.files).toBe(2);
    expect(await snapshot(out)).toEqual(await snapshot(src));
    expect(await leftovers(out)).toEqual([]);
  }, 60_000);

  it('push without --delete after a directory became a file (and a file a directory): the folder wins, the set stays pullable and pushable; it was a manifest every later pull and push refused', async () => {
    const src = await freshDir('shape-src');
    await put(src, 'x/inner.txt', 'in x\n');
    await put(src, 'y', 'y was a file\n');
    await mkdir(join(src, 'e', 'sub'), { recursive: true });
    await put(src, 'kept.txt', 'kept\n');
    const name = 'changed-shape';
    await push(src, name);

    await rm(join(src, 'x'), { recursive: true });
    await put(src, 'x', 'x is a file now\n');
    await unlink(join(src, 'y'));
    await put(src, 'y/inner.txt', 'y is a directory now\n');
    await rm(join(src, 'e'), { recursive: true });
    await put(src, 'e', 'e is a file now\n');
    await unlink(join(src, 'kept.txt'));
    const pushed = await push(src, name);
    expect(pushed).toMatchObject({ files: 4, deleted: { files: 2 }, changed: true });
    const { manifest } = await manifestOf(name);
    expect(manifest.files.map((f) => f.path)).toEqual(['e', 'kept.txt', 'x', 'y/inner.txt']);
    expect(manifest.dirs).toEqual([]);

    const out = await freshDir('shape-out');
    await pull(name, out);
    await put(src, 'kept.txt', 'kept\n');
    expect(await snapshot(out)).toEqual(await snapshot(src));
    expect((await push(src, name)).changed).toBe(false);
  }, 60_000);

  it('pull into a folder of the set before it changed shape: refused with nothing written, or with --delete replaced; it stopped halfway, the folder a mix of two versions', async () => {
    const src = await freshDir('reshape-src');
    await put(src, 'a.txt', 'a v1\n');
    await put(src, 'm/n/f.txt', 'm was a directory\n');
    await put(src, 'd', 'd was a file\n');
    await put(src, 'z.txt', 'z v1\n');
    const name = 'reshaped';
    await push(src, name);
    const out = await freshDir('reshape-out');
    await pull(name, out);

    await put(src, 'a.txt', 'a v2\n');
    await rm(join(src, 'm'), { recursive: true });
    await put(src, 'm', 'm is a file now\n');
    await unlink(join(src, 'd'));
    await put(src, 'd/g.txt', 'd is a directory now\n');
    await put(src, 'z.txt', 'z v2\n');
    await push(src, name, ['--delete']);

    const before = await snapshot(out);
    const refused = await admin.run(['pull', name, out]);
    expect(refused.exitCode, refused.stderr).toBe(1);
    expect(expectErrorLine(refused.stderr)).toMatch(/--delete/);
    expect(await snapshot(out)).toEqual(before);

    const replaced = await pull(name, out, ['--delete']);
    expect(replaced.deleted).toEqual({ files: 2 }); // m/n/f.txt and the file d
    expect(await snapshot(out)).toEqual(await snapshot(src));
    expect(await leftovers(out)).toEqual([]);
  }, 60_000);

  it('push refuses a name no pull could write (a backslash, a name that is not UTF-8, x:y at the top): exit 2, one line, nothing uploaded; --exclude leaves it out. Such a path made a manifest every later pull and push refused', async () => {
    const before = (await allShares(serve.url, token)).length;
    const backslash = await freshDir('bs-src');
    await put(backslash, 'ok.txt', 'ok\n');
    await put(backslash, 'sub/a\\b.txt', 'backslash\n');
    const res = await admin.run(['push', backslash, '--name', 'backslash-name']);
    expect(res.exitCode, res.stderr).toBe(2);
    expect(expectErrorLine(res.stderr)).toMatch(/sub\/a\\b\.txt: a name with a backslash/);

    const latin1 = await freshDir('latin1-src');
    await put(latin1, 'ok.txt', 'ok\n');
    await writeFile(Buffer.from(`${latin1}/caf\xe9.txt`, 'latin1'), 'not utf-8\n');
    const bad = await admin.run(['push', latin1, '--name', 'latin1-name']);
    expect(bad.exitCode, bad.stderr).toBe(2);
    expect(expectErrorLine(bad.stderr)).toMatch(/not UTF-8/);

    // Found from outside: x:y.txt at the top of a folder was pushed, and every pull of the set
    // then stopped with "absolute path refused" (it reads as a Windows drive). Deeper, it is fine.
    const drive = await freshDir('drive-src');
    await put(drive, 'x:y.txt', 'drive\n');
    await put(drive, 'sub/x:y.txt', 'deeper\n');
    const driven = await admin.run(['push', drive, '--name', 'drive-name']);
    expect(driven.exitCode, driven.stderr).toBe(2);
    expect(expectErrorLine(driven.stderr)).toBe(
      'fshare: x:y.txt: a name that begins with a letter and a colon, as a Windows drive does, cannot be at the top of a set; rename it or leave it out with --exclude',
    );
    expect((await allShares(serve.url, token)).length).toBe(before);
    const deeper = await push(drive, 'drive-name', ['--exclude', 'x:y.txt']);
    expect(deeper.files).toBe(1);
    const driveOut = await freshDir('drive-out');
    await pull('drive-name', driveOut);
    expect(await readFile(join(driveOut, 'sub', 'x:y.txt'), 'utf8')).toBe('deeper\n');

    const without = await push(latin1, 'latin1-name', ['--exclude', 'caf*']);
    expect(without.files).toBe(1);
    const out = await freshDir('latin1-out');
    await pull('latin1-name', out);
    expect(await readdir(out)).toEqual(['ok.txt']);
  }, 60_000);

  it('a pull while a push replaces the set ends with the new set whole; it stopped halfway (exit 1, "the data of … is missing on the server"), DIR part old, part new', async () => {
    const src = await freshDir('race-src');
    await put(src, 'a.txt', 'a v1\n');
    await put(src, 'z.txt', 'z v1\n');
    const name = 'replaced-under-pull';
    await push(src, name);
    const pack = (await manifestOf(name)).manifest.files[0]!.share!;

    // A proxy that holds the pull's download of the old pack until the push is done.
    const proxy = await holdingProxy(
      (req) => req.method === 'GET' && req.url === `/files/${pack}/content`,
    );
    try {
      const out = await freshDir('race-out');
      const pulling = admin.run(['--server', proxy.url, 'pull', name, out], {
        env: { FSHARE_TOKEN: token },
      });
      await until(proxy.held, 'the pull asked for the old pack');
      await put(src, 'a.txt', 'a v2\n');
      await put(src, 'z.txt', 'z v2\n');
      await push(src, name);
      expectStatus(await get(serve.url, `/files/${pack}`, { token }), 404);
      proxy.release();

      const res = await pulling;
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr).toContain(`${name} was replaced while it was pulled; pulling the new set`);
      expect(await snapshot(out)).toEqual(await snapshot(src));
      expect(await leftovers(out)).toEqual([]);
    } finally {
      proxy.release();
      await proxy.close();
    }
  }, 60_000);

  it('a server whose bytes do not match its sha256: exit 7, the line names the file of the set (or the manifest), never a temporary file it says is kept but was removed', async () => {
    const src = await freshDir('flip-src');
    await put(src, 'big.bin', randomBytes(PACK_FILE_LIMIT + 10));
    await put(src, 'small.txt', 'small\n');
    const name = 'flipped-bytes';
    await push(src, name);
    const { share: manifestShare, manifest } = await manifestOf(name);
    const big = manifest.files.find((f) => f.path === 'big.bin')!.share!;

    // A proxy that flips one byte of the content of the share `target` names.
    let target = '';
    const proxy = createServer((req, res) => {
      const flip = req.method === 'GET' && req.url === `/files/${target}/content`;
      req.pipe(
        httpRequest(
          `${serve.url}${req.url}`,
          { method: req.method, headers: req.headers },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            let first = flip;
            up.on('data', (chunk: Buffer) => {
              if (first && chunk.length > 0) {
                chunk = Buffer.from(chunk);
                chunk[0] = chunk[0]! ^ 1;
                first = false;
              }
              res.write(chunk);
            });
            up.on('end', () => res.end());
          },
        ),
      );
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const via = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    try {
      for (const [share, said] of [
        [big, `the data of big.bin (share ${big}): the downloaded bytes have sha256`],
        [
          manifestShare.share_id,
          `the manifest (share ${manifestShare.share_id}): the downloaded bytes have sha256`,
        ],
      ] as const) {
        target = share;
        const out = await freshDir('flip-out');
        const res = await admin.run(['--server', via, 'pull', name, out], {
          env: { FSHARE_TOKEN: token },
        });
        expect(res.exitCode, res.stderr).toBe(7);
        const line = expectErrorLine(res.stderr);
        expect(line).toContain(said);
        expect(line).not.toMatch(/kept in|\.fshare-tmp-|fshare-manifest-/);
        expect(existsSync(join(out, 'big.bin'))).toBe(false);
        expect(await leftovers(out)).toEqual([]);
      }
    } finally {
      await new Promise((resolve) => proxy.close(resolve));
    }
  }, 60_000);

  // Property: a push that was told its files are in the set finds them there, whatever pushed
  // meanwhile. Found from outside: two pushes of one set at once (a CI matrix, each job its own
  // files, no --delete) both said "Pushed", and the set held only the last one's files: its
  // manifest replaced the other's, made from the set as it was before either.
  it('two pushes of one set at once: the later one merges on top of the other (no file of either is lost), and finds data the other deleted', async () => {
    const base = await freshDir('two-base');
    await put(base, 'one.bin', randomBytes(PACK_FILE_LIMIT + 10));
    await put(base, 'two.bin', randomBytes(PACK_FILE_LIMIT + 20));
    const name = 'two-at-once';
    await push(base, name);
    const manifestId = (await manifestOf(name)).share.share_id;
    const first = await freshDir('two-first');
    const second = await freshDir('two-second');
    for (const dir of [first, second])
      for (const f of ['one.bin', 'two.bin']) await put(dir, f, await readFile(join(base, f)));
    await put(first, 'one.bin', randomBytes(PACK_FILE_LIMIT + 30)); // keeps two.bin's old data
    await put(second, 'two.bin', randomBytes(PACK_FILE_LIMIT + 40)); // keeps one.bin's old data
    await put(first, 'only-first.txt', 'first job');
    await put(second, 'only-second.txt', 'second job');

    // The second push's manifest write is held until the first push is over (which replaced the
    // manifest the second read, and deleted one.bin's old data, which the second reuses).
    const proxy = await holdingProxy(
      (req) =>
        req.url!.startsWith(`/files/${manifestId}/content`) &&
        req.method !== 'GET' &&
        req.method !== 'HEAD',
      { once: true },
    );
    try {
      const late = admin.run(['--server', proxy.url, 'push', second, '--name', name], {
        env: { FSHARE_TOKEN: token },
      });
      await until(proxy.held, 'the second push writes its manifest');
      await push(first, name);
      proxy.release();
      const res = await late;
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr).toContain(
        `another push of ${name} changed the set meanwhile; pushing again on top of it`,
      );
      const out = await freshDir('two-out');
      await pull(name, out);
      // The second's files where both have one, and each one's own file.
      const want = { ...(await snapshot(first)), ...(await snapshot(second)) };
      expect(await snapshot(out)).toEqual(want);
      expect(Object.keys(want)).toEqual(
        expect.arrayContaining(['one.bin', 'two.bin', 'only-first.txt', 'only-second.txt']),
      );
    } finally {
      proxy.release();
      await proxy.close();
    }
  }, 60_000);

  // Property: a push whose set was removed (`artifacts rm`) while it ran makes the set anew, with
  // its data, and says so; it was exit 4 ("No share with this id").
  it('a push whose set is removed while it runs makes it anew', async () => {
    const name = 'removed-meanwhile';
    const src = await freshDir('removed-src');
    await put(src, 'a.txt', 'kept\n');
    await put(src, 'big.bin', randomBytes(PACK_FILE_LIMIT + 5));
    await push(src, name);
    const manifestId = (await manifestOf(name)).share.share_id;
    await put(src, 'b.txt', 'new\n');
    const proxy = await holdingProxy(
      (req) => req.url === `/files/${manifestId}/content` && req.method === 'PUT',
      { once: true },
    );
    try {
      const late = admin.run(['--server', proxy.url, 'push', src, '--name', name], {
        env: { FSHARE_TOKEN: token },
      });
      await until(proxy.held, 'the push writes its manifest');
      const removed = await admin.run(['artifacts', 'rm', name]);
      expect(removed.exitCode, removed.stderr).toBe(0);
      proxy.release();
      const res = await late;
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr).toContain(`the set ${name} was removed meanwhile; pushing it anew`);
      const out = await freshDir('removed-out');
      await pull(name, out);
      expect(await snapshot(out)).toEqual(await snapshot(src));
    } finally {
      proxy.release();
      await proxy.close();
    }
  }, 60_000);

  // Property: the same for the first two pushes of a set that does not exist yet. Each made a
  // manifest share of its own, and the clean-up of one deleted the other's (which had said
  // "Pushed"). Now both creates name one share (its Idempotency-Key is the set's), the push that
  // gives it content first made the set, and the other is told 423 and pushes on top of it.
  it('two first pushes of a new set at once: one manifest share, and the files of both', async () => {
    const name = 'first-at-once';
    const mine = await freshDir('first-mine');
    const theirs = await freshDir('first-theirs');
    await put(mine, 'common.txt', 'mine');
    await put(mine, 'mine.txt', 'only mine');
    await put(theirs, 'common.txt', 'theirs');
    await put(theirs, 'theirs.txt', 'only theirs');
    // Mine creates its manifest once theirs is pushed whole.
    const proxy = await holdingProxy(
      (req, body) =>
        req.method === 'POST' &&
        req.url === '/files' &&
        (JSON.parse(body!.toString()) as { file_name?: string }).file_name === `${PREFIX}${name}`,
      { once: true, bodies: true },
    );
    try {
      const late = admin.run(['--server', proxy.url, 'push', mine, '--name', name], {
        env: { FSHARE_TOKEN: token },
      });
      await until(proxy.held, 'my push creates its manifest');
      await push(theirs, name);
      proxy.release();
      const res = await late;
      expect(res.exitCode, res.stderr).toBe(0);
      expect(res.stderr).toContain(
        `another push of ${name} changed the set meanwhile; pushing again on top of it`,
      );
      await manifestOf(name); // one manifest share
      const out = await freshDir('first-out');
      await pull(name, out);
      expect(await snapshot(out)).toEqual({
        ...(await snapshot(theirs)),
        ...(await snapshot(mine)),
      });
    } finally {
      proxy.release();
      await proxy.close();
    }
  }, 60_000);

  it('Ctrl-C (SIGINT) or SIGTERM during a pull removes its temporary files in DIR; they stayed until the next pull into DIR', async () => {
    const src = await freshDir('sig-src');
    await put(src, 'big.bin', randomBytes(PACK_FILE_LIMIT + 10));
    await put(src, 'a.txt', 'small\n');
    const name = 'interrupted-pull';
    await push(src, name);
    const big = (await manifestOf(name)).manifest.files.find((f) => f.path === 'big.bin')!.share!;

    // A proxy that sends the first bytes of big.bin's data, then nothing more.
    const proxy = createServer((req, res) => {
      const stall = req.method === 'GET' && req.url === `/files/${big}/content`;
      req.pipe(
        httpRequest(
          `${serve.url}${req.url}`,
          { method: req.method, headers: req.headers },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            if (!stall) return void up.pipe(res);
            up.once('data', (chunk: Buffer) => {
              res.write(chunk);
              up.pause();
            });
          },
        ),
      );
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const via = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    try {
      for (const [signal, ending] of [
        ['SIGINT', { exitCode: 130 }],
        ['SIGTERM', { signal: 'SIGTERM' }],
      ] as const) {
        const out = await freshDir('sig-out');
        const child = admin.start(['--server', via, 'pull', name, out], {
          env: { FSHARE_TOKEN: token },
        });
        await until(
          async () => (await leftovers(out)).length > 0,
          'the temporary file of big.bin',
          25,
          20_000,
        );
        child.kill(signal);
        const res = await child;
        if ('exitCode' in ending) expect(res.exitCode, String(res.stderr)).toBe(ending.exitCode);
        else expect(res.signal, String(res.stderr)).toBe(ending.signal);
        expect(await leftovers(out)).toEqual([]);
        expect(existsSync(join(out, 'big.bin'))).toBe(false);
        expect(await readdir(out)).toEqual([]); // nor its lock file (.fshare-pull.lock)
      }
    } finally {
      proxy.closeAllConnections();
      await new Promise((resolve) => proxy.close(resolve));
    }
  }, 60_000);

  it('push without --delete drops a file of the set that the folder lacks and whose data is gone from the server, with a line; it kept it, and every pull was exit 1 ("the data of … is missing")', async () => {
    const src = await freshDir('gone-src');
    await put(src, 'big.bin', randomBytes(PACK_FILE_LIMIT + 10));
    await put(src, 's.txt', 'small\n');
    const name = 'data-gone';
    await push(src, name);
    const big = (await manifestOf(name)).manifest.files.find((f) => f.path === 'big.bin')!.share!;
    expectStatus(await del(serve.url, `/files/${big}`, { token }), 200);
    await unlink(join(src, 'big.bin'));
    await put(src, 't.txt', 'new\n');

    const res = await admin.run(['--json', 'push', src, '--name', name]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr).toContain(
      `fshare: big.bin: its data (share ${big}) is no longer on the server and it is not in the folder; dropped from the set`,
    );
    expect(JSON.parse(res.stdout)).toMatchObject({ files: 2, deleted: { files: 1 } });
    const out = await freshDir('gone-out');
    await pull(name, out);
    expect(await snapshot(out)).toEqual(await snapshot(src));
  }, 60_000);

  // Property: a pull changes nothing outside DIR. Found: a file already there with the set's
  // bytes but another mode was chmod-ed in place, so a hard link to it outside DIR (a cache
  // restored with cp -al) had its mode changed too.
  it('a file already there but hard-linked from outside DIR gets its mode as a copy of its own; the outside file keeps its mode', async () => {
    const src = await freshDir('hardlink-src');
    const data = randomBytes(5000);
    await put(src, 'run.sh', data, 0o755);
    const name = 'hard-linked';
    await push(src, name);
    const outside = await freshDir('hardlink-outside');
    await put(outside, 'run.sh', data, 0o644);
    const out = await freshDir('hardlink-out');
    await link(join(outside, 'run.sh'), join(out, 'run.sh'));

    await pull(name, out);
    expect(await snapshot(out)).toEqual(await snapshot(src));
    const kept = await lstat(join(outside, 'run.sh'));
    expect(kept.mode & 0o777).toBe(0o644);
    expect(kept.nlink).toBe(1);
    expect((await readFile(join(outside, 'run.sh'))).equals(data)).toBe(true);
    expect(await leftovers(out)).toEqual([]);
  }, 60_000);

  // Property: a line about a name of DIR is one line, whatever the name holds. Found from outside:
  // a symbolic link named with a newline was said on two lines, and a terminal's escape in a
  // name reached the terminal.
  it('a skipped name holding a newline or an escape is said on one line, shown safe', async () => {
    const src = await freshDir('odd-skipped');
    await put(src, 'kept.txt', 'kept\n');
    await symlink('kept.txt', join(src, 'evil\nname\u001b[31m'));
    const res = await admin.run(['push', src, '--name', 'odd-skipped']);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr.trimEnd().split('\n')).toEqual([
      'fshare: evil?name?[31m: a symbolic link, skipped',
    ]);
  });

  // Property: push says in its own words that a large file changed while it was pushed. Found:
  // a file written after it was hashed got the server's long 422 about dzsha256 instead.
  it('a large file written after it was hashed: exit 7, "changed while it was pushed", the old set whole', async () => {
    const src = await freshDir('grown-src');
    const big = randomBytes(PACK_FILE_LIMIT + 5000);
    await put(src, 'big.bin', big);
    const name = 'grown-while-pushed';
    await push(src, name);
    const before = await manifestOf(name);
    await put(src, 'big.bin', randomBytes(big.length));

    // The data share's creation is held until big.bin, hashed by then, is written again.
    await changedDuringPush(src, name, {
      hold: (req) => req.method === 'POST' && req.url === '/files',
      once: true,
      what: 'the push creates the data share',
      change: async () => {
        const handle = await open(join(src, 'big.bin'), 'r+');
        await handle.write(randomBytes(100), 0, 100, 1000);
        await handle.close();
      },
      line: 'fshare: big.bin changed while it was pushed; push again',
    });
    expect((await manifestOf(name)).manifest).toEqual(before.manifest);
  }, 60_000);

  it('a file removed while it is pushed: exit 7 and one line naming it, the old set whole; it was exit 1 ("no such file"), and Node could add warnings about a descriptor closed on garbage collection', async () => {
    const src = await freshDir('removed-src');
    await put(src, 'a.txt', 'a v1\n');
    await put(src, 'b.txt', 'b v1\n');
    const name = 'removed-while-pushed';
    await push(src, name);
    const before = await manifestOf(name);
    await put(src, 'a.txt', 'a v2\n');
    await put(src, 'b.txt', 'b v2\n');

    // The push's look at the stored set is held until b.txt, already scanned, is gone.
    await changedDuringPush(src, name, {
      hold: (req) => req.method === 'GET' && req.url!.startsWith('/files?'),
      what: 'the push reads the stored set',
      change: () => unlink(join(src, 'b.txt')),
      line: 'fshare: b.txt was removed while it was pushed; push again',
    });
    expect((await manifestOf(name)).manifest).toEqual(before.manifest);
  }, 60_000);

  it('artifacts never leaves a set out silently: a damaged manifest is named on stderr, a manifest the server fails to give is exit 1; such a set was left out of the list, exit 0', async () => {
    const src = await freshDir('listing-src');
    await put(src, 'f.txt', 'f\n');
    const name = 'listed-despite';
    const pushed = await push(src, name);
    await createShareWithContent(serve.url, token, `${PREFIX}damaged-listing`, Buffer.from('{'));

    const listed = await admin.run(['artifacts']);
    expect(listed.exitCode, listed.stderr).toBe(0);
    expect(listed.stdout).toContain(`${name}\t`);
    expect(listed.stderr).toMatch(
      /^fshare: damaged-listing: its manifest is damaged \(the manifest is not JSON: .*\); not listed$/m,
    );

    // A server that fails to give one manifest's content: the listing fails, it does not shrink.
    const proxy = createServer((req, res) => {
      if (req.method === 'GET' && req.url === `/files/${pushed.manifest_id}/content`) {
        res.writeHead(500, { 'content-type': 'application/json' });
        return void res.end('{"status":"fail","message":"injected failure"}');
      }
      req.pipe(
        httpRequest(
          `${serve.url}${req.url}`,
          { method: req.method, headers: req.headers },
          (up) => {
            res.writeHead(up.statusCode ?? 502, up.headers);
            up.pipe(res);
          },
        ),
      );
    });
    await new Promise<void>((resolve) => proxy.listen(0, '127.0.0.1', resolve));
    const via = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
    try {
      const failed = await admin.run(['--server', via, 'artifacts'], {
        env: { FSHARE_TOKEN: token },
      });
      expect(failed.exitCode, failed.stderr).toBe(1);
      expect(failed.stdout).toBe('');
      expect(failed.stderr.trimEnd().split('\n').pop()).toMatch(/^fshare: injected failure/);
    } finally {
      await new Promise((resolve) => proxy.close(resolve));
      await admin.run(['artifacts', 'rm', 'damaged-listing']);
    }
  }, 60_000);

  it('push leaves out what a killed pull left in the folder (.fshare-tmp-…), with a line; it went into the set, and pulls took it for their own leftover', async () => {
    const src = await freshDir('pull-temp-src');
    await put(src, 'a.txt', 'a\n');
    await put(src, 'sub/.fshare-tmp-1-00000000-aaaaaaaaaaaa.part', 'half a file\n');
    await put(src, '.fshare-tmp-notes.txt', 'a file of the user\n'); // not a pull's name
    const name = 'with-pull-temps';
    const res = await admin.run(['--json', 'push', src, '--name', name]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr.trimEnd()).toBe(
      'fshare: sub/.fshare-tmp-1-00000000-aaaaaaaaaaaa.part: a temporary file of fshare pull, skipped',
    );
    const { manifest } = await manifestOf(name);
    expect(manifest.files.map((f) => f.path)).toEqual(['.fshare-tmp-notes.txt', 'a.txt']);
    expect(manifest.dirs).toEqual(['sub']);
  }, 60_000);

  // Property: what push sends, pull can write. Pull refuses a path with a name it gives its own
  // files in any part; push leaves out folders of such names too, with a line. Found from
  // outside: a folder `.fshare-pull.lock/` was pushed (exit 0), and every pull refused the set.
  it('push leaves out folders named as pull names its own files, with a line; the set pulls', async () => {
    const src = await freshDir('pull-names-src');
    await put(src, 'ok.txt', 'ok\n');
    await put(src, '.fshare-pull.lock/inside.txt', 'a\n');
    await put(src, 'a/.fshare-tmp-0123456789ab/in.txt', 'b\n');
    await mkdir(join(src, '.fshare-pull-1-5bce98f7-abcdefabcdef'));
    await put(src, '.fshare-tmp-notes.d/kept.txt', 'a folder of the user\n'); // not a pull's name
    const name = 'with-pull-names';
    const res = await admin.run(['--json', 'push', src, '--name', name]);
    expect(res.exitCode, res.stderr).toBe(0);
    expect(res.stderr.trimEnd().split('\n').sort()).toEqual(
      [
        'fshare: .fshare-pull-1-5bce98f7-abcdefabcdef/: a name fshare pull uses for its own files, skipped',
        'fshare: .fshare-pull.lock/: a name fshare pull uses for its own files, skipped',
        'fshare: a/.fshare-tmp-0123456789ab/: a name fshare pull uses for its own files, skipped',
      ].sort(),
    );
    const { manifest } = await manifestOf(name);
    expect(manifest.files.map((f) => f.path).sort()).toEqual(
      ['.fshare-tmp-notes.d/kept.txt', 'ok.txt'].sort(),
    );
    const out = await freshDir('pull-names-out');
    const pulled = await admin.run(['pull', name, out]);
    expect(pulled.exitCode, pulled.stderr).toBe(0);
    expect(await readFile(join(out, 'ok.txt'), 'utf8')).toBe('ok\n');
    expect(await readFile(join(out, '.fshare-tmp-notes.d', 'kept.txt'), 'utf8')).toBe(
      'a folder of the user\n',
    );
  }, 60_000);

  it('a push killed midway leaves the old set whole; running it again completes, resumes the large file and leaves no stray data', async () => {
    const src = await freshDir('kill-src');
    for (let i = 0; i < 40; i++) await put(src, `s/${i}.txt`, randomBytes(2000 + i));
    await put(src, 'large-v1.bin', randomBytes(2 * MiB));
    const name = 'killed';
    const proxy = chunkCounter(serve.url);
    const via = await proxy.start();
    const env = { FSHARE_TOKEN: token };
    try {
      const v1Push = await admin.json<PushJson>(
        ['--server', via, 'push', src, '--name', name, '-p', '1'],
        { env },
      );
      expect(v1Push.changed).toBe(true);
      const v1 = await snapshot(src);
      const v1Manifest = await manifestOf(name);
      const v1Data = new Set((await dataShares(name)).map((s) => s.share_id));

      // v2: a 40 MiB file, the other large file and half the small files changed
      const huge = randomBytes(40 * MiB);
      await put(src, 'huge.bin', huge);
      const largeV2 = randomBytes(2 * MiB);
      await put(src, 'large-v1.bin', largeV2);
      for (let i = 0; i < 40; i += 2) await put(src, `s/${i}.txt`, randomBytes(3000 + i));
      const v2 = await snapshot(src);

      proxy.state.delayMs = 150;
      const child = admin.start(['--server', via, 'push', src, '--name', name, '-p', '1'], {
        env: { FSHARE_TOKEN: token },
      });
      // Wait until the large file's data share exists and the server holds a chunk of it.
      const hugeName = `${PREFIX}${name}:data:${sha256(huge)}`;
      let fresh: ShareJson | undefined;
      let received = 0;
      for (let i = 0; i < 1200 && received === 0; i++) {
        await sleep(25);
        fresh ??= (await dataShares(name)).find((s) => s.file_name === hugeName);
        if (!fresh) continue;
        const records = await readdir(join(admin.configDir, 'uploads')).catch(() => []);
        for (const file of records.filter((n) => n.endsWith('.json'))) {
          const r = JSON.parse(await readFile(join(admin.configDir, 'uploads', file), 'utf8')) as {
            share_id: string;
            dzuuid: string;
          };
          if (r.share_id !== fresh.share_id) continue;
          const state = await get(serve.url, `/files/${r.share_id}/uploads/${r.dzuuid}`, {
            token,
          });
          received = ((state.body as { received?: number[] })?.received ?? []).length;
        }
      }
      child.kill('SIGKILL');
      const killed = await child;
      expect(killed.signal, `the push ended on its own: ${String(killed.stderr)}`).toBe('SIGKILL');
      expect(fresh, 'the data share of the large file was created').toBeDefined();
      expect(received).toBeGreaterThan(0);
      const sharesAtKill = await dataShares(name);
      const atKill = new Set(sharesAtKill.map((s) => s.share_id));
      expect(sharesAtKill.find((s) => s.share_id === fresh!.share_id)?.initialized).toBe(false);
      // The other large file (2 MiB) may have gone up whole before the kill: then it is skipped.
      const largeDone = sharesAtKill.some(
        (s) => s.file_name === `${PREFIX}${name}:data:${sha256(largeV2)}` && s.initialized,
      );

      // The old set is still the set, whole.
      const after = await manifestOf(name);
      expect(after.share.sha256).toBe(v1Manifest.share.sha256);
      const old = await freshDir('kill-out-v1');
      const pulledOld = await pull(name, old);
      expect(pulledOld.manifest_id).toBe(v1Push.manifest_id);
      expect(await snapshot(old)).toEqual(v1);

      // Running it again completes, reusing the share the killed run began.
      proxy.state.delayMs = 0;
      const rerun = await admin.run(
        ['--server', via, '--json', 'push', src, '--name', name, '-p', '1'],
        { env },
      );
      expect(rerun.exitCode, rerun.stderr).toBe(0);
      const done = JSON.parse(rerun.stdout) as PushJson;
      expect(done).toMatchObject({
        files: 42,
        changed: true,
        manifest_id: v1Push.manifest_id,
        // the two large files and the 20 changed small ones, less what the killed run finished
        uploaded: { files: largeDone ? 21 : 22 },
        skipped: { files: largeDone ? 21 : 20 },
      });
      const { manifest } = await manifestOf(name);
      expect(manifest.files.find((f) => f.path === 'huge.bin')!.share).toBe(fresh!.share_id);
      const out = await freshDir('kill-out-v2');
      await pull(name, out);
      expect(await snapshot(out)).toEqual(v2);

      // Data: what v2 names, plus at most what the killed run left (orphans younger than 24 h
      // are kept by design); nothing only v1 needed.
      const used = referenced(manifest);
      const now = (await dataShares(name)).map((s) => s.share_id);
      for (const id of now)
        expect(used.has(id) || (atKill.has(id) && !v1Data.has(id)), `stray share ${id}`).toBe(true);
      const v1Only = [...v1Data].filter((id) => !used.has(id));
      expect(v1Only).toHaveLength(1); // the old content of large-v1.bin
      for (const id of v1Only) expectStatus(await get(serve.url, `/files/${id}`, { token }), 404);
      const uploadsLeft = await readdir(join(admin.configDir, 'uploads')).catch(() => []);
      expect(uploadsLeft.filter((n) => n.endsWith('.json'))).toEqual([]);
    } finally {
      await proxy.close();
    }
  }, 120_000);

  // A pull uses only the caller's own shares (see "a set is its owner's" below), so these hostile
  // manifests are planted in the puller's own account: written by a broken or hostile tool.
  describe('hostile manifests', () => {
    const payload = Buffer.from('pwned\n');
    let n = 0;

    /** Plants the manifest `files`/`dirs` as set `name` (with a valid data share for payload). */
    const plant = async (name: string, paths: string[], dirList: string[] = []): Promise<void> => {
      const data = await createShareWithContent(
        serve.url,
        token,
        `${PREFIX}${name}:data:${sha256(payload)}`,
        payload,
      );
      const manifest = {
        format: 'fshare-artifact/1',
        name,
        created: new Date().toISOString(),
        files: paths.map((path) => ({
          path,
          size: payload.length,
          mode: 0o644,
          sha256: sha256(payload),
          share: data,
          offset: 0,
        })),
        dirs: dirList,
      };
      await createShareWithContent(
        serve.url,
        token,
        `${PREFIX}${name}`,
        Buffer.from(JSON.stringify(manifest)),
      );
    };

    const conflict = /is listed as a file and as a directory/;
    const cases: [string, RegExp, (parent: string) => { paths: string[]; dirs?: string[] }][] = [
      ['a parent path', /refused/, () => ({ paths: ['../outside.txt'] })],
      [
        'an absolute path',
        /absolute path refused/,
        (parent) => ({ paths: [join(parent, 'abs.txt')] }),
      ],
      ['a path that climbs out', /refused/, () => ({ paths: ['a/../../x'] })],
      ['a backslash', /backslash refused/, () => ({ paths: ['a\\b'] })],
      ['a NUL', /NUL/, () => ({ paths: ['a\u0000b'] })],
      ['an empty part', /refused/, () => ({ paths: ['a//b'] })],
      [
        'a file that is also a directory of another file',
        conflict,
        () => ({ paths: ['same', 'same/in'] }),
      ],
      [
        'a file that is also a listed directory',
        conflict,
        () => ({ paths: ['same'], dirs: ['same'] }),
      ],
      ['a path listed twice', /listed twice/, () => ({ paths: ['dup.txt', 'dup.txt'] })],
      // Found from outside: the first pull wrote it, the next said "already there" and removed
      // it as its lock. Pull's temporary and journal names would be removed as a killed pull's.
      [
        "the name of pull's lock",
        /uses for its own files refused/,
        () => ({ paths: ['.fshare-pull.lock'] }),
      ],
      [
        "the name of a pull's journal, deeper down",
        /uses for its own files refused/,
        () => ({ paths: ['sub/.fshare-pull-123-0123abcd-0123456789ab'] }),
      ],
      [
        "the name of a pull's temporary file",
        /uses for its own files refused/,
        () => ({ paths: ['.fshare-tmp-123-0123abcd-0123456789ab.part'] }),
      ],
      [
        "the name of an older pull's temporary file, as a directory",
        /uses for its own files refused/,
        () => ({ paths: ['ok.txt'], dirs: ['.fshare-tmp-0123456789ab'] }),
      ],
      ['a directory outside', /refused/, () => ({ paths: ['ok.txt'], dirs: ['../evil-dir'] })],
      // Found only as it was written, after ok.txt (was: ok.txt written, then exit 1).
      [
        'a name longer than the file system allows',
        /file name too long/,
        () => ({ paths: ['ok.txt', 'x'.repeat(300)] }),
      ],
    ];

    for (const [label, reason, build] of cases)
      it(`refuses a manifest with ${label}: exit 1, one line with the reason, nothing written`, async () => {
        const parent = await freshDir('evil');
        const out = join(parent, 'out');
        await mkdir(out);
        const { paths, dirs: dirList = [] } = build(parent);
        const name = `evil-${++n}`;
        await plant(name, paths, dirList);
        const before = await walkAll(parent);
        const res = await admin.run(['pull', name, out]);
        expect(res.exitCode, res.stderr).toBe(1);
        expect(res.stdout).toBe('');
        // nothing outside DIR, and nothing in it either
        expect(await walkAll(parent), res.stderr).toEqual(before);
        expect(await readdir(out), res.stderr).toEqual([]);
        expect(expectErrorLine(res.stderr)).toMatch(reason);
      }, 60_000);

    it('refuses to write through a symbolic link in DIR; the place it points to stays empty', async () => {
      const parent = await freshDir('evil-link');
      const out = join(parent, 'out');
      const elsewhere = join(parent, 'elsewhere');
      await mkdir(out);
      await mkdir(elsewhere);
      await symlink(elsewhere, join(out, 'link'));
      const name = `evil-${++n}`;
      await plant(name, ['link/payload.txt']);
      const res = await admin.run(['pull', name, out]);
      expect(res.exitCode, res.stderr).toBe(1);
      expect(expectErrorLine(res.stderr)).toMatch(/symbolic link/);
      expect(await readdir(elsewhere)).toEqual([]);
      expect(await readdir(out)).toEqual(['link']);

      // the same through a listed directory
      const viaDir = `evil-${++n}`;
      await plant(viaDir, ['ok.txt'], ['link/sub']);
      const again = await admin.run(['pull', viaDir, out]);
      expect(again.exitCode, again.stderr).toBe(1);
      expectErrorLine(again.stderr);
      expect(await readdir(elsewhere)).toEqual([]);
    }, 60_000);

    it('replaces a symbolic link where a file goes, never writing to its target', async () => {
      const parent = await freshDir('evil-target');
      const out = join(parent, 'out');
      await put(parent, 'target.txt', 'original\n');
      await mkdir(out);
      await symlink(join(parent, 'target.txt'), join(out, 'payload.txt'));
      const name = `evil-${++n}`;
      await plant(name, ['payload.txt']);
      const res = await pull(name, out);
      expect(res.downloaded.files).toBe(1);
      const st = await lstat(join(out, 'payload.txt'));
      expect(st.isSymbolicLink()).toBe(false);
      expect(st.isFile()).toBe(true);
      expect((await readFile(join(out, 'payload.txt'))).equals(payload)).toBe(true);
      expect(await readFile(join(parent, 'target.txt'), 'utf8')).toBe('original\n');
    }, 60_000);
  });

  describe("a set is its owner's", () => {
    let bob: { username: string; password: string; token: string };
    let bobCli: Cli;
    const evil = Buffer.from('evil payload\n');

    beforeAll(async () => {
      bob = await createUser(serve.url, token, ['CREATE', 'READ', 'LIST']);
      bobCli = await createCli();
      await signIn(bobCli, serve.url, bob);
    });
    afterAll(async () => {
      if (bobCli) await rm(bobCli.configDir, { recursive: true, force: true });
    });

    /**
     * A manifest of set `name` written over HTTP with `as`'s token (none: anonymous): `files` maps each path to the
     * data share (and bytes) it points at. Returns the manifest's share id.
     */
    const plantManifest = async (
      as: string | undefined,
      name: string,
      files: { path: string; data: Buffer; share: string; mode?: number }[],
      created = new Date().toISOString(),
    ): Promise<string> => {
      const manifest = {
        format: 'fshare-artifact/1',
        name,
        created,
        files: files.map((f) => ({
          path: f.path,
          size: f.data.length,
          mode: f.mode ?? 0o644,
          sha256: sha256(f.data),
          share: f.share,
          offset: 0,
        })),
        dirs: [],
      };
      return createShareWithContent(
        serve.url,
        as,
        `${PREFIX}${name}`,
        Buffer.from(JSON.stringify(manifest)),
      );
    };
    /** A data share of set `name` holding `data`, owned by `as`. */
    const plantData = (as: string | undefined, name: string, data: Buffer) =>
      createShareWithContent(serve.url, as, `${PREFIX}${name}:data:${sha256(data)}`, data);
    /** The tester's takeover: bob's newer manifest of `name`, a.txt → bob's data, mode 0o755. */
    const squat = async (name: string) =>
      plantManifest(
        bob.token,
        name,
        [{ path: 'a.txt', data: evil, share: await plantData(bob.token, name, evil), mode: 0o755 }],
        '2099-01-01T00:00:00.000Z',
      );
    const ownersOf = async (prefix: string) =>
      (await sharesByPrefix(prefix)).map((s) => `${s.owner_name} ${s.file_name}`).sort();

    it("another user's newer manifest of the same name is never used: pull --delete gets the owner's set and removes nothing of it, artifacts lists the owner's, push and rm touch only the owner's shares", async () => {
      // Guards: a set is read only from manifests its caller owns. Found broken: bob (CREATE only)
      // planted a newer manifest of admin's set; admin's pull --delete wrote bob's payload with
      // mode 755 and deleted keep.txt, artifacts showed bob's set, and admin's push was a 403.
      const src = await freshDir('own-src');
      await put(src, 'a.txt', 'admin a\n');
      await put(src, 'keep.txt', 'keep\n');
      const name = 'owned-1';
      const first = await push(src, name);
      const out = await freshDir('own-out');
      await pull(name, out);
      const bobsManifest = await squat(name);

      const pulled = await pull(name, out, ['--delete']);
      expect(pulled).toMatchObject({ manifest_id: first.manifest_id, deleted: { files: 0 } });
      expect(await snapshot(out)).toEqual(await snapshot(src));

      const listed = (await admin.json<ArtifactJson[]>(['artifacts'])).find((a) => a.name === name);
      expect(listed).toMatchObject({ manifest_id: first.manifest_id, files: 2 });
      expect(listed!.created.startsWith('2099')).toBe(false);

      await put(src, 'a.txt', 'admin a, second version\n');
      const again = await admin.run(['--json', 'push', src, '--name', name]);
      expect(again.exitCode, again.stderr).toBe(0);
      expect(JSON.parse(again.stdout)).toMatchObject({
        manifest_id: first.manifest_id,
        changed: true,
      });
      // Bob's set is his own business: still there, and his pull gets his set, not admin's.
      expect((await getShare(serve.url, token, bobsManifest)).owner_name).toBe(bob.username);
      const bobOut = await freshDir('own-bob');
      const bobs = await bobCli.run(['--json', 'pull', name, bobOut]);
      expect(bobs.exitCode, bobs.stderr).toBe(0);
      expect(JSON.parse(bobs.stdout)).toMatchObject({ manifest_id: bobsManifest });
      expect(await readFile(join(bobOut, 'a.txt'))).toEqual(evil);

      // Admin (who may delete any share) removes only admin's shares of the set.
      const removed = await admin.run(['artifacts', 'rm', name]);
      expect(removed.exitCode, removed.stderr).toBe(0);
      expect(await ownersOf(`${PREFIX}${name}`)).toEqual([
        `${bob.username} ${PREFIX}${name}`,
        `${bob.username} ${PREFIX}${name}:data:${sha256(evil)}`,
      ]);
    }, 60_000);

    it('a name only another user has: pull is exit 4 naming that user and writes nothing, artifacts does not list it, push makes the caller its own set', async () => {
      // Guards: the name alone proves nothing; another user's set (even an unreadable one) is not
      // the caller's. Found broken: admin pulled bob's set, and admin's push to the name was a 403
      // (a PUT to bob's manifest) or, with bob's manifest not JSON, exit 1.
      const name = 'squatted';
      await squat(name);
      const junk = 'squatted-junk';
      await createShareWithContent(serve.url, bob.token, `${PREFIX}${junk}`, Buffer.from('{'));

      const out = await freshDir('squat-out');
      await put(out, 'keep.txt', 'keep\n');
      const before = await snapshot(out);
      const res = await admin.run(['pull', name, out, '--delete']);
      expect(res.exitCode, res.stderr).toBe(4);
      const line = expectErrorLine(res.stderr);
      expect(line).toContain(`no artifact named ${name} of admin`);
      expect(line).toContain(bob.username);
      expect(await snapshot(out)).toEqual(before);
      const names = (await admin.json<ArtifactJson[]>(['artifacts'])).map((a) => a.name);
      expect(names).not.toContain(name);
      expect(names).not.toContain(junk);

      const src = await freshDir('squat-src');
      await put(src, 'a.txt', 'mine\n');
      for (const set of [name, junk]) {
        const pushed = await admin.run(['--json', 'push', src, '--name', set]);
        expect(pushed.exitCode, pushed.stderr).toBe(0);
        const own = (await sharesByPrefix(`${PREFIX}${set}`)).filter(
          (s) => s.file_name === `${PREFIX}${set}` && s.owner_name === 'admin',
        );
        expect(own.map((s) => s.share_id)).toEqual([JSON.parse(pushed.stdout).manifest_id]);
        const back = await freshDir('squat-back');
        await pull(set, back);
        expect(await snapshot(back)).toEqual(await snapshot(src));
      }
      // Bob's shares of both names are untouched.
      expect(await ownersOf(`${PREFIX}${name}`)).toContain(`${bob.username} ${PREFIX}${name}`);
      expect(await ownersOf(`${PREFIX}${junk}`)).toContain(`${bob.username} ${PREFIX}${junk}`);
    }, 60_000);

    // Property: the set's own Idempotency-Key (one manifest share for first pushes at once)
    // never stops a push. The share that key made, once handed to another user, is theirs: the
    // server answers the key with 409, and the push makes a manifest of a key of its own.
    it('a first push after the manifest its key made was handed to another user: a new manifest, theirs untouched', async () => {
      const name = 'handed-manifest';
      const src = await freshDir('handed');
      await put(src, 'a.txt', 'first\n');
      const first = await push(src, name);
      const chown = await admin.run(['chown', first.manifest_id, bob.username]);
      expect(chown.exitCode, chown.stderr).toBe(0);
      await put(src, 'b.txt', 'second\n');
      const again = await admin.run(['--json', 'push', src, '--name', name]);
      expect(again.exitCode, again.stderr).toBe(0);
      const made = JSON.parse(again.stdout) as PushJson;
      expect(made.manifest_id).not.toBe(first.manifest_id);
      const back = await freshDir('handed-back');
      await pull(name, back);
      expect(await snapshot(back)).toEqual(await snapshot(src));
      expect((await getShare(serve.url, token, first.manifest_id)).owner_name).toBe(bob.username);
    }, 60_000);

    it("a manifest of one's own whose data share belongs to another user is refused: exit 1, one line naming that user, nothing written or deleted", async () => {
      // Guards: a set is made only of its owner's shares. Found broken: a pull followed a
      // manifest's share id to any user's share and wrote (and --delete removed) by it.
      const name = 'borrowed';
      const fine = Buffer.from('fine\n');
      await plantManifest(token, name, [
        { path: 'a.txt', data: evil, share: await plantData(bob.token, name, evil) },
        { path: 'b.txt', data: fine, share: await plantData(token, name, fine) },
      ]);
      const parent = await freshDir('borrowed');
      const out = join(parent, 'out');
      await put(out, 'keep.txt', 'keep\n');
      const before = await snapshot(parent);
      for (const dir of [out, join(parent, 'new')]) {
        const res = await admin.run(['pull', name, dir, '--delete']);
        expect(res.exitCode, res.stderr).toBe(1);
        expect(res.stdout).toBe('');
        expect(expectErrorLine(res.stderr)).toMatch(
          new RegExp(`a\\.txt .*belongs to ${bob.username}, not to admin`),
        );
        expect(await snapshot(parent)).toEqual(before);
      }
    }, 60_000);

    it('pull gives a file only the permission bits the umask allows (a manifest cannot make it world-writable or setuid)', async () => {
      // Guards: pull writes mode & 0o777 & ~umask, as tar does for a user. Found broken: a
      // manifest's 0o777 (or 0o4777) became a world-writable file whatever the umask.
      const name = 'modes';
      const data = Buffer.from('#!/bin/sh\n');
      const share = await plantData(token, name, data);
      await plantManifest(token, name, [
        { path: 'run.sh', data, share, mode: 0o4777 },
        { path: 'w.txt', data, share, mode: 0o666 },
        { path: 'r.txt', data, share, mode: 0o600 },
      ]);
      const out = await freshDir('modes-out');
      const pullUnder027 = () =>
        execa('sh', ['-c', 'umask 027 && exec node "$@"', 'sh', BIN, 'pull', name, out], {
          env: cleanEnv({ FSHARE_CONFIG_DIR: admin.configDir, FSHARE_KEYRING: 'off' }),
          extendEnv: false,
          input: '',
          reject: false,
          timeout: 60_000,
        });
      const modes = async () =>
        Object.fromEntries(
          await Promise.all(
            ['run.sh', 'w.txt', 'r.txt'].map(
              async (f) => [f, (await lstat(join(out, f))).mode & 0o7777] as const,
            ),
          ),
        );
      const expected = { 'run.sh': 0o750, 'w.txt': 0o640, 'r.txt': 0o600 };
      const first = await pullUnder027();
      expect(first.exitCode, first.stderr).toBe(0);
      expect(await modes()).toEqual(expected);
      // A file already there with the right bytes gets the same bits, not the manifest's.
      await chmod(join(out, 'run.sh'), 0o777);
      const again = await pullUnder027();
      expect(again.exitCode, again.stderr).toBe(0);
      expect(await modes()).toEqual(expected);
    }, 60_000);

    it('an anonymous caller has no sets: push, pull, artifacts and artifacts rm are exit 3 with one line, even where anonymous callers may create and read', async () => {
      // Guards: without a user there is no owner to tell sets apart (an ownerless share is any
      // anonymous caller's to replace). Found broken: an anonymous pull used whatever manifest of
      // the name was newest.
      const anon = await createCli();
      const name = 'anon-set';
      await setDefaultPermissions(serve.url, token, ['CREATE', 'READ', 'LIST', 'MODIFY']);
      try {
        const data = Buffer.from('anonymous\n');
        await plantManifest(undefined, name, [
          { path: 'a.txt', data, share: await plantData(undefined, name, data) },
        ]);
        const out = await freshDir('anon-out');
        const src = await freshDir('anon-src');
        await put(src, 'a.txt', 'x\n');
        for (const args of [
          ['pull', name, out],
          ['push', src, '--name', 'anon-push'],
          ['artifacts'],
          ['artifacts', 'rm', name],
        ]) {
          const res = await anon.run(['--server', serve.url, ...args]);
          expect(res.exitCode, `${args.join(' ')}: ${res.stderr}`).toBe(3);
          expect(expectErrorLine(res.stderr)).toMatch(/not signed in.*fshare login/);
        }
        expect(await readdir(out)).toEqual([]);
        expect(await sharesByPrefix(`${PREFIX}anon-push`)).toEqual([]);
        expect((await sharesByPrefix(`${PREFIX}${name}`)).length).toBe(2);
      } finally {
        await setDefaultPermissions(serve.url, token, []);
        await rm(anon.configDir, { recursive: true, force: true });
      }
    }, 60_000);
  });

  it('a data share whose content no longer matches the manifest: exit 7, the file neither created nor changed, no temporary file left', async () => {
    const src = await freshDir('tamper-src');
    const victim = randomBytes(4000);
    await put(src, 'a/victim.txt', victim);
    await put(src, 'a/other.txt', randomBytes(3000));
    const name = 'tampered';
    await push(src, name);
    const old = await freshDir('tamper-old');
    await pull(name, old);
    await put(old, 'a/victim.txt', 'edited locally\n'); // so a pull wants to rewrite it

    const { manifest } = await manifestOf(name);
    const entry = manifest.files.find((f) => f.path === 'a/victim.txt')!;
    const pack = await content(serve.url, token, entry.share!);
    const changed = Buffer.from(pack);
    for (let i = entry.offset; i < entry.offset + entry.size; i++) changed[i] = changed[i]! ^ 0xff;
    expect(changed.length).toBe(pack.length);
    await upload(serve.url, token, entry.share!, changed, 1, 'PUT');

    const fresh = await freshDir('tamper-new');
    const res = await admin.run(['pull', name, fresh]);
    expect(res.exitCode, res.stderr).toBe(7);
    expect(expectErrorLine(res.stderr)).toMatch(/sha256/);
    expect(existsSync(join(fresh, 'a', 'victim.txt'))).toBe(false);
    expect(await leftovers(fresh)).toEqual([]);

    const into = await admin.run(['pull', name, old]);
    expect(into.exitCode, into.stderr).toBe(7);
    expectErrorLine(into.stderr);
    expect(await readFile(join(old, 'a', 'victim.txt'), 'utf8')).toBe('edited locally\n');
    expect(await leftovers(old)).toEqual([]);
  }, 60_000);

  it('fshare artifacts lists a set; artifacts rm deletes its manifest and data; pull of an unknown set is exit 4', async () => {
    const src = await freshDir('list-src');
    await put(src, 'one.txt', randomBytes(1000));
    await put(src, 'two.bin', randomBytes(PACK_FILE_LIMIT + 10));
    const name = 'listed-set';
    const pushed = await push(src, name);

    const list = await admin.json<ArtifactJson[]>(['artifacts']);
    const item = list.find((a) => a.name === name);
    expect(item).toEqual({
      name,
      manifest_id: pushed.manifest_id,
      files: 2,
      bytes: 1000 + PACK_FILE_LIMIT + 10,
      created: expect.stringMatching(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d/),
    });
    const table = await admin.run(['artifacts']);
    expect(table.exitCode, table.stderr).toBe(0);
    const row = table.stdout.split('\n').find((l) => l.startsWith(`${name}\t`));
    expect(row?.split('\t')).toEqual([
      name,
      '2',
      formatSize(1000 + PACK_FILE_LIMIT + 10),
      item!.created.slice(0, 16).replace('T', ' '),
    ]);

    const dataCount = (await dataShares(name)).length;
    expect(dataCount).toBe(2);
    const rm = await admin.run(['artifacts', 'rm', name]);
    expect(rm.exitCode, rm.stderr).toBe(0);
    expect(rm.stdout).toBe(`Deleted artifact ${name} (${dataCount + 1} shares)`);
    expect(await sharesByPrefix(`${PREFIX}${name}`)).toEqual([]);
    expect((await admin.json<ArtifactJson[]>(['artifacts'])).map((a) => a.name)).not.toContain(
      name,
    );

    const gone = await admin.run(['pull', name, await freshDir('list-out')]);
    expect(gone.exitCode).toBe(4);
    expect(expectErrorLine(gone.stderr)).toContain(name);
    const unknown = await admin.run(['pull', 'never-pushed', await freshDir('list-out')]);
    expect(unknown.exitCode).toBe(4);
    expectErrorLine(unknown.stderr);
    const rmUnknown = await admin.run(['artifacts', 'rm', 'never-pushed']);
    expect(rmUnknown.exitCode).toBe(4);
    expectErrorLine(rmUnknown.stderr);
  }, 60_000);

  it('a set name outside the allowed letters is a usage error (exit 2) and creates nothing', async () => {
    const src = await freshDir('badname');
    await put(src, 'f.txt', 'f\n');
    const before = (await allShares(serve.url, token)).length;
    for (const args of [
      ['push', src, '--name', '../up'],
      ['push', src, '--name', '.hidden'],
      ['pull', 'a:b', src],
      ['artifacts', 'rm', 'x/y'],
    ]) {
      const res = await admin.run(args);
      expect(res.exitCode, args.join(' ')).toBe(2);
      expectErrorLine(res.stderr);
    }
    expect((await allShares(serve.url, token)).length).toBe(before);
  }, 60_000);

  it('--include and --exclude globs choose the files pushed', async () => {
    const src = await freshDir('glob-src');
    await put(src, 'app.js', 'app\n');
    await put(src, 'app.js.map', 'map\n');
    await put(src, 'lib/util.js', 'util\n');
    await put(src, 'lib/util.js.map', 'map\n');
    await put(src, 'lib/deep/x.js', 'x\n');
    await put(src, 'lib/deep/x.js.map', 'map\n');
    await put(src, 'css/site.css', 'body{}\n');
    await put(src, 'README.md', 'readme\n');

    const noMaps = await push(src, 'glob-exclude', ['--exclude', '**/*.map']);
    expect(noMaps.files).toBe(5);
    const out1 = await freshDir('glob-out');
    await pull('glob-exclude', out1);
    const files1 = Object.entries(await snapshot(out1))
      .filter(([, e]) => e.kind === 'file')
      .map(([p]) => p)
      .sort();
    expect(files1).toEqual(['README.md', 'app.js', 'css/site.css', 'lib/deep/x.js', 'lib/util.js']);

    const onlyJs = await push(src, 'glob-include', ['--include', '**/*.js']);
    expect(onlyJs.files).toBe(3);
    const out2 = await freshDir('glob-out');
    await pull('glob-include', out2);
    expect(await snapshot(out2)).toEqual({
      'app.js': expect.objectContaining({ kind: 'file', size: 4 }),
      lib: { kind: 'dir' },
      'lib/util.js': expect.objectContaining({ kind: 'file', size: 5 }),
      'lib/deep': { kind: 'dir' },
      'lib/deep/x.js': expect.objectContaining({ kind: 'file', size: 2 }),
    });

    const both = await push(src, 'glob-both', [
      '--include',
      '**/*.js',
      '--include',
      '**/*.css',
      '--exclude',
      'lib/deep/**',
    ]);
    const { manifest } = await manifestOf('glob-both');
    expect(both.files).toBe(3);
    expect(manifest.files.map((f) => f.path)).toEqual(['app.js', 'css/site.css', 'lib/util.js']);
  }, 60_000);

  it('upload - sends standard input as the share content, under --name', async () => {
    const bytes = Buffer.concat([randomBytes(300_000), Buffer.from([0, 10, 13, 0])]);
    const res = await admin.run(['--json', 'upload', '-', '--name', 'piped.bin'], {
      input: bytes,
    });
    expect(res.exitCode, String(res.stderr)).toBe(0);
    const [up] = JSON.parse(String(res.stdout)) as {
      share_id: string;
      file_name: string;
      size: number;
      sha256: string;
      path: string | null;
    }[];
    expect(up).toMatchObject({
      file_name: 'piped.bin',
      size: bytes.length,
      sha256: sha256(bytes),
      path: null,
    });
    const got = await admin.runBinary(['get', up!.share_id, '-o', '-']);
    expect(got.exitCode, got.stderr).toBe(0);
    expect(got.stdout.equals(bytes)).toBe(true);
    const info = await get(serve.url, `/files/${up!.share_id}`, { token });
    expect(info.body).toMatchObject({ file_name: 'piped.bin', size: bytes.length });
  }, 60_000);
});

describe('fshare push and pull against a server without fshare extensions (the reference stand-in)', () => {
  let standIn: StandIn;
  let cli: Cli;
  let work: string;
  const run = (args: string[]) =>
    cli.run(['--server', standIn.url, ...args], { env: { FSHARE_TOKEN: 'any-token' } });

  beforeAll(async () => {
    standIn = await startStandIn();
    cli = await createCli();
    work = await tempDir('artifacts-standin');
  });
  afterAll(async () => {
    await standIn?.close();
    for (const dir of [cli?.configDir, work])
      if (dir) await rm(dir, { recursive: true, force: true });
  });

  it('without name filters or sha256, push and pull still give an identical tree, and an unchanged push uploads nothing', async () => {
    const src = join(work, 'src');
    for (let i = 0; i < 30; i++) await put(src, `d${i % 3}/f${i}.txt`, randomBytes(100 + i * 37));
    await put(src, 'big.bin', randomBytes(2 * MiB), 0o755);
    await put(src, 'empty', '');
    const first = await run(['--json', 'push', src, '--name', 'ref']);
    expect(first.exitCode, first.stderr).toBe(0);
    expect(JSON.parse(first.stdout)).toMatchObject({ files: 32, changed: true });
    // The stand-in ignores ?file_name= and ?name_prefix=: the client walked the whole list.
    expect(standIn.requests.filter((r) => r === 'GET /files').length).toBeGreaterThan(0);

    const out = join(work, 'out');
    const pulled = await run(['--json', 'pull', 'ref', out]);
    expect(pulled.exitCode, pulled.stderr).toBe(0);
    expect(await snapshot(out)).toEqual(await snapshot(src));

    const sharesBefore = standIn.requests.filter((r) => r === 'POST /files').length;
    const again = await run(['--json', 'push', src, '--name', 'ref']);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(JSON.parse(again.stdout)).toMatchObject({ changed: false, uploaded: { files: 0 } });
    expect(standIn.requests.filter((r) => r === 'POST /files').length).toBe(sharesBefore);
  }, 120_000);
});
