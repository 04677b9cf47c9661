#!/usr/bin/env node
// Artifacts benchmark: `fshare push` / `fshare pull` of a tree of many small files and a few
// large ones, side by side in one run with the same tree through tar piped into
// `fshare upload -` and back out of `fshare get -o -`, and with a shell loop of one
// `fshare upload` per file. Plain Node ESM, no build step; `npm run bench:artifacts` builds dist/
// first. See bench/README.md, "Latest results: artifacts".
//
//   npm run bench:artifacts                          10,000 files of 1–16 KiB + 4 × 64 MiB
//   npm run bench:artifacts -- --write-readme        also writes the results into bench/README.md
//   npm run -s bench:artifacts -- --json             one JSON object on stdout
//
// Units: MB = 10^6 bytes, MiB = 2^20. Progress notes go to stderr.

import { spawnSync } from 'node:child_process';
import { createHash, randomBytes, randomFillSync } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import {
  lstat,
  mkdir,
  mkdtemp,
  open,
  readFile,
  readdir,
  rm,
  statfs,
  writeFile,
} from 'node:fs/promises';
import { cpus, loadavg, release, tmpdir, totalmem } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import {
  commandExists,
  extraCaCerts,
  extraCaNote,
  fail,
  median,
  note,
  parseSize,
  prng,
  sha256File,
  sleep,
  sq,
  timedBash,
} from './common.mjs';
import { adminToken, startServe, stopServe } from './serve.mjs';

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const BIN = join(ROOT, 'bin', 'fshare.js');
const README = join(ROOT, 'bench', 'README.md');
const SECTION = '## Latest results: artifacts (push and pull)';
const MB = 1e6;
const MiB = 2 ** 20;
const GNU_TIME = '/usr/bin/time';

const TARGETS = {
  push_vs_tar_upload: 2,
  pull_vs_tar_download: 2,
  push_unchanged_s: 2,
};

const USAGE = `usage: node bench/artifacts.mjs [options]   (or: npm run bench:artifacts -- [options])

  --files N          small files in the tree (default 10000)
  --dirs N           nested directories they are spread over (default 100)
  --min-size SIZE    smallest small file (default 1k)
  --max-size SIZE    largest small file (default 16k)
  --large N          large files (default 4)
  --large-size SIZE  size of each large file (default 64m)
  --sample N         files uploaded one process each by the shell loop (default 200)
  --seed N           seed of the sizes and the layout (default 1; the bytes are always random)
  --dir DIR          where the temporary directory goes (default: the OS temp dir)
  --profile DIR      run the server and every CLI under node --cpu-prof, profiles into DIR
                     (slower: for finding where the time goes, not for the figures)
  --json             print one JSON object on stdout instead of the table
  --write-readme     replace (or add) the section "${SECTION.slice(3)}" in bench/README.md
  --keep-extra-ca    keep NODE_EXTRA_CA_CERTS for the processes measured (removed by default:
                     Node parses that bundle at every start)
  -h, --help`;

// ---------------------------------------------------------------------------------------------
// Small helpers

function size(text, name) {
  const n = parseSize(text);
  if (n === null) throw fail(`${name}: not a size: ${text} (try 16k or 64m)`);
  return n;
}

function count(text, name, min = 1) {
  const n = Number(text);
  if (!/^\d+$/.test(String(text)) || n < min) throw fail(`${name} must be an integer ≥ ${min}`);
  return n;
}

const round = (x, digits = 1) =>
  x === null || x === undefined || !Number.isFinite(x) ? null : Number(x.toFixed(digits));
const n = (x) => x.toLocaleString('en-US');
/** Single-quoted for sh. */

// ---------------------------------------------------------------------------------------------
// Options and state

let opts;
try {
  const { values } = parseArgs({
    options: {
      files: { type: 'string', default: '10000' },
      dirs: { type: 'string', default: '100' },
      'min-size': { type: 'string', default: '1k' },
      'max-size': { type: 'string', default: '16k' },
      large: { type: 'string', default: '4' },
      'large-size': { type: 'string', default: '64m' },
      sample: { type: 'string', default: '200' },
      seed: { type: 'string', default: '1' },
      dir: { type: 'string' },
      profile: { type: 'string' },
      json: { type: 'boolean', default: false },
      'write-readme': { type: 'boolean', default: false },
      'keep-extra-ca': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
    strict: true,
  });
  if (values.help) {
    process.stdout.write(`${USAGE}\n`);
    process.exit(0);
  }
  opts = {
    files: count(values.files, '--files'),
    dirs: count(values.dirs, '--dirs'),
    minSize: size(values['min-size'], '--min-size'),
    maxSize: size(values['max-size'], '--max-size'),
    large: count(values.large, '--large', 0),
    largeSize: size(values['large-size'], '--large-size'),
    sample: count(values.sample, '--sample'),
    seed: count(values.seed, '--seed', 0),
    dir: resolve(values.dir ?? tmpdir()),
    profile: values.profile ? resolve(values.profile) : null,
    keepExtraCa: values['keep-extra-ca'],
    json: values.json,
    writeReadme: values['write-readme'],
  };
  if (opts.maxSize < opts.minSize) throw fail('--max-size is below --min-size');
  if (opts.profile && opts.writeReadme)
    throw fail('--profile slows every process down: its figures do not go into the README');
  opts.sample = Math.min(opts.sample, opts.files);
} catch (err) {
  process.stderr.write(`bench: ${err.message}\n${USAGE}\n`);
  process.exit(2);
}

/** The command line that produced the figures, as it would be typed. */
function commandLine() {
  const args = process.argv.slice(2).map((a) => (/^[\w./:=@%+-]+$/.test(a) ? a : sq(a)));
  if (process.env.npm_lifecycle_event === 'bench:artifacts')
    return `npm run bench:artifacts${args.length ? ` -- ${args.join(' ')}` : ''}`;
  return ['node bench/artifacts.mjs', ...args].join(' ');
}

const useGnuTime = existsSync(GNU_TIME);
let tmpRoot;
let server = null; // { child, pid, url, stderr, exited }
const children = new Set();

/** Node flags for every fshare process: the CPU profiler when --profile is given, DIR/<phase>. */
const nodeFlags = (phase) =>
  opts.profile ? ['--cpu-prof', '--cpu-prof-dir', join(opts.profile, phase)] : [];

// ---------------------------------------------------------------------------------------------
// The server

async function startServer(dataDir, adminPassword) {
  server = null;
  const s = await startServe({
    bin: BIN,
    dataDir,
    adminPassword,
    env: { TMPDIR: join(tmpRoot, 'tmp') },
    nodeFlags: nodeFlags('server'),
    children,
    fail,
  });
  server = s;
  return s;
}

async function stopServer() {
  const s = server;
  if (!s) return;
  server = null;
  await stopServe(s, { children, note });
}

let cleaning = null;
function cleanup() {
  cleaning ??= (async () => {
    // Phase scripts run in process groups of their own: stop the whole pipeline.
    for (const child of children) {
      if (child === server?.child) continue;
      try {
        process.kill(-child.pid, 'SIGTERM');
      } catch {
        child.kill('SIGTERM');
      }
    }
    await stopServer().catch(() => undefined);
    if (tmpRoot) await rm(tmpRoot, { recursive: true, force: true }).catch(() => undefined);
  })();
  return cleaning;
}

let interrupted = false;
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    interrupted = true;
    note(`${signal}: cleaning up`);
    void cleanup().finally(() => process.exit(130));
  });
}

// ---------------------------------------------------------------------------------------------
// The tree

/**
 * `--dirs` directories, each one inside the root or inside an earlier one (a random recursive
 * tree, a few levels deep), `--files` files of `--min-size`..`--max-size` random bytes spread
 * over them, and `--large` files of `--large-size`. Sizes and places come from the seeded PRNG,
 * the bytes from crypto (incompressible, and unlike any earlier run's).
 */
async function makeTree(root) {
  const random = prng(opts.seed);
  const dirs = [];
  for (let i = 0; i < opts.dirs; i++) {
    const parent = Math.floor(random() * (i + 1)) - 1; // -1: the root
    dirs.push(`${parent < 0 ? '' : `${dirs[parent]}/`}d${String(i).padStart(3, '0')}`);
  }
  for (const d of dirs) await mkdir(join(root, d), { recursive: true });
  const pick = () => dirs[Math.floor(random() * dirs.length)];
  const small = [];
  for (let i = 0; i < opts.files; i++) {
    const bytes = opts.minSize + Math.floor(random() * (opts.maxSize - opts.minSize + 1));
    small.push({ path: `${pick()}/f${String(i).padStart(5, '0')}.bin`, size: bytes });
  }
  const large = [];
  for (let i = 0; i < opts.large; i++)
    large.push({ path: `${pick()}/large-${i}.bin`, size: opts.largeSize });

  // Eight writers, each with a buffer of its own that it fills and writes before the next file.
  let next = 0;
  await Promise.all(
    Array.from({ length: 8 }, async () => {
      const own = Buffer.allocUnsafe(opts.maxSize);
      while (next < small.length) {
        const f = small[next++];
        randomFillSync(own, 0, f.size);
        await writeFile(join(root, f.path), own.subarray(0, f.size));
      }
    }),
  );
  const block = Buffer.allocUnsafe(MiB);
  for (const f of large) {
    const handle = await open(join(root, f.path), 'w');
    try {
      for (let left = f.size; left > 0;) {
        const k = Math.min(left, block.length);
        randomFillSync(block, 0, k);
        await handle.write(block, 0, k);
        left -= k;
      }
    } finally {
      await handle.close();
    }
  }
  const smallBytes = small.reduce((s, f) => s + f.size, 0);
  const largeBytes = large.reduce((s, f) => s + f.size, 0);
  return { small, large, dirs, smallBytes, largeBytes, bytes: smallBytes + largeBytes };
}

/**
 * One sha256 over the whole tree: every file's relative path, size, permission bits and
 * sha256 of its bytes, and every directory, in sorted order. Anything else (a link, a device,
 * a pull's left-over temporary file) fails the comparison too.
 */
async function treeDigest(root) {
  const lines = [];
  let files = 0;
  let bytes = 0;
  const walk = async (abs) => {
    const entries = await readdir(abs, { withFileTypes: true });
    for (const e of entries) {
      const childAbs = join(abs, e.name);
      const rel = relative(root, childAbs);
      if (e.isDirectory()) {
        lines.push(`dir ${rel}`);
        await walk(childAbs);
      } else if (e.isFile()) {
        const st = await lstat(childAbs);
        lines.push(
          `file ${rel} ${st.size} ${(st.mode & 0o777).toString(8)} ${await sha256File(childAbs)}`,
        );
        files++;
        bytes += st.size;
      } else lines.push(`other ${rel}`);
    }
  };
  await walk(root);
  lines.sort();
  return {
    sha256: createHash('sha256').update(lines.join('\n')).digest('hex'),
    files,
    bytes,
  };
}

// ---------------------------------------------------------------------------------------------
// Timed phases

/**
 * Before every timed phase: the dirty pages earlier phases left are written out, so that no
 * phase pays for another's writeback.
 */
async function settle() {
  const r = spawnSync('sync', []);
  if (r.status !== 0) throw fail('sync failed');
  await sleep(300);
}

/** `/usr/bin/time` around one command of a script, into `file` ("" without GNU time). */
const timeOf = (file) => (useGnuTime ? `${GNU_TIME} -f '%U %S %M' -o ${sq(file)} ` : '');

async function readTime(file) {
  if (!useGnuTime) return null;
  const text = await readFile(file, 'utf8').catch(() => '');
  await rm(file, { force: true });
  const [user, sys, kb] = (text.trim().split('\n').at(-1) ?? '').split(' ').map(Number);
  if (![user, sys, kb].every(Number.isFinite)) return null;
  return { cpu_s: user + sys, rss_mb: (kb * 1024) / MB };
}

/**
 * Runs one phase: `script` under bash with `set -eo pipefail`, in a process group of its own,
 * timed by `timedBash` (client CPU covers every process of the script, tar included).
 */
async function phase(name, script, env) {
  note(name);
  await settle();
  const r = await timedBash(script, {
    env,
    dir: tmpRoot,
    shellOptions: 'set -eo pipefail',
    serverPid: server.pid,
    children,
    detached: true,
    keepStderr: 8000,
  });
  if (r.code !== 0) {
    const why = r.stderr.trim().split('\n').slice(-8).join('\n  ');
    throw fail(`${name} exited with ${r.code}${why ? `:\n  ${why}` : ''}`);
  }
  if (!r.server_alive) throw fail(`the server died during ${name}:\n${server.stderr}`);
  return {
    seconds: r.seconds,
    client_cpu_s: r.client_cpu_s,
    server_cpu_s: r.server_cpu_s,
    stdout: r.stdout,
    stderr: r.stderr,
  };
}

async function api(path, token, init = {}) {
  const res = await fetch(`${server.url}${path}`, {
    ...init,
    headers: { authorization: `Bearer ${token}`, ...(init.headers ?? {}) },
  });
  const body = await res.json().catch(() => null);
  if (!res.ok) throw fail(`${init.method ?? 'GET'} ${path} → ${res.status}`);
  return body;
}

/** Shares whose name starts with `prefix`: their count and bytes. */
async function sharesNamed(prefix, token) {
  let shares = 0;
  let bytes = 0;
  for (let page = 1; ; page++) {
    const body = await api(
      `/files?name_prefix=${encodeURIComponent(prefix)}&per_page=1000&page=${page}`,
      token,
    );
    for (const s of body.data) {
      shares++;
      bytes += s.size ?? 0;
    }
    if (page >= body.pages) break;
  }
  return { shares, bytes };
}

// ---------------------------------------------------------------------------------------------
// Machine facts, for the README

function machine() {
  const cpuList = cpus();
  let fs = null;
  try {
    // The mount holding the temp directory: the longest mount point that prefixes it.
    const mounts = readFileSync('/proc/mounts', 'utf8')
      .split('\n')
      .map((l) => l.split(' '))
      .filter((f) => f.length > 2 && (tmpRoot + '/').startsWith(f[1].replace(/\/?$/, '/')));
    mounts.sort((a, b) => b[1].length - a[1].length);
    if (mounts[0]) fs = `${mounts[0][2]} on ${mounts[0][0]}`;
  } catch {
    /* not Linux */
  }
  const git = (...args) => {
    const r = spawnSync('git', ['-C', ROOT, ...args], { encoding: 'utf8' });
    return r.status === 0 ? r.stdout.trim() : null;
  };
  const commit = git('rev-parse', '--short', 'HEAD');
  const dirty = git('status', '--porcelain', '--', 'src', 'bin');
  return {
    cpus: cpuList.length,
    cpu_model: cpuList[0]?.model?.trim() ?? null,
    memory_gib: round(totalmem() / 2 ** 30, 0),
    node: process.version,
    linux: release(),
    fs,
    tar: spawnSync('tar', ['--version'], { encoding: 'utf8' }).stdout?.split('\n')[0] ?? null,
    commit: commit
      ? `${commit}${dirty ? ' (with uncommitted changes in src/ or bin/)' : ''}`
      : null,
  };
}

// ---------------------------------------------------------------------------------------------
// Main

async function main() {
  await mkdir(opts.dir, { recursive: true });
  tmpRoot = await mkdtemp(join(opts.dir, 'fshare-bench-artifacts-'));
  const tree = join(tmpRoot, 'tree');
  const dataDir = join(tmpRoot, 'data');
  const configDir = join(tmpRoot, 'config');
  const pulled = join(tmpRoot, 'pulled');
  const untarred = join(tmpRoot, 'untarred');
  await mkdir(join(tmpRoot, 'tmp'));
  if (opts.profile) await mkdir(opts.profile, { recursive: true });
  await mkdir(untarred);

  // The tree, the server's copy of the pushed set and of the tar, the spooled stdin, two
  // downloaded trees: about 7 × the tree, plus slack.
  const estimate = opts.files * ((opts.minSize + opts.maxSize) / 2) + opts.large * opts.largeSize;
  const fs = await statfs(tmpRoot);
  const free = fs.bavail * fs.bsize;
  const need = 7 * estimate + 256 * MB;
  if (free < need)
    throw fail(
      `${tmpRoot} has ${(free / 1e9).toFixed(1)} GB free; this run needs about ${(need / 1e9).toFixed(1)} GB (try --dir elsewhere)`,
    );
  for (const cmd of ['bash', 'tar', 'sync'])
    if (!commandExists(cmd)) throw fail(`${cmd} is needed (apt-get install ${cmd})`);
  if (!useGnuTime) note(`${GNU_TIME} not found (apt-get install time): no per-process CPU split`);
  if (!existsSync(join(ROOT, 'dist', 'bundle', 'main.js')))
    throw fail('dist/ is missing: run `npm run build` (npm run bench:artifacts does it)');

  const extraCa = extraCaCerts(opts.keepExtraCa);
  note(extraCaNote(extraCa));
  const loadStart = loadavg();
  const facts = machine();
  note(
    `node ${process.version}, ${facts.cpus} CPUs, Linux ${facts.linux}, load ${loadStart
      .map((x) => x.toFixed(2))
      .join(' ')}, temp dir ${tmpRoot}`,
  );

  note(
    `writing the tree: ${n(opts.files)} files of ${opts.minSize}–${opts.maxSize} bytes in ` +
      `${opts.dirs} directories, ${opts.large} × ${(opts.largeSize / MiB).toFixed(0)} MiB`,
  );
  const made = await makeTree(tree);
  const totalFiles = made.small.length + made.large.length;
  note('hashing the tree');
  const source = await treeDigest(tree);
  if (source.files !== totalFiles || source.bytes !== made.bytes)
    throw fail(`the tree holds ${source.files} files, ${source.bytes} bytes; expected otherwise`);

  const adminPassword = randomBytes(18).toString('base64url');
  await startServer(dataDir, adminPassword);
  note(`server at ${server.url} (pid ${server.pid})`);
  const token = await adminToken(server.url, adminPassword, fail);
  const env = {
    ...process.env,
    FSHARE_CONFIG_DIR: configDir,
    FSHARE_KEYRING: 'off',
    FSHARE_SERVER: server.url,
    FSHARE_TOKEN: token, // in the environment, not argv (ps shows argv)
    TMPDIR: join(tmpRoot, 'tmp'), // the CLI's spool and pack files: cleaned up with the rest
  };
  // The CLI as a shell command; under --profile, each phase's profiles go to a folder of its own.
  const cli = (phase) => [process.execPath, ...nodeFlags(phase), BIN].map(sq).join(' ');
  const tf = (name) => join(tmpRoot, `time-${name}`);
  const results = {};

  // Start-up of one CLI process that makes one request: what the loop pays per file at least.
  {
    const runs = [];
    for (let i = 0; i < 5; i++) {
      const r = await phase(
        `fshare whoami (${i + 1} of 5)`,
        `${cli('whoami')} whoami > /dev/null`,
        env,
      );
      runs.push(r.seconds);
    }
    results.whoami_s = median(runs);
  }

  // 1. First push.
  {
    const r = await phase(
      'fshare push (first)',
      `${timeOf(tf('push1'))}${cli('push-first')} push ${sq(tree)} --name bench --json --no-progress`,
      env,
    );
    const out = JSON.parse(r.stdout);
    if (!out.changed || out.files !== totalFiles || out.bytes !== made.bytes)
      throw fail(`unexpected first push: ${r.stdout}`);
    const data = await sharesNamed('fshare-artifact:bench:data:', token);
    results.push1 = {
      ...r,
      ...(await readTime(tf('push1'))),
      uploaded_files: out.uploaded.files,
      uploaded_bytes: out.uploaded.bytes,
      data_shares: data.shares,
      data_bytes: data.bytes,
    };
  }

  // 2. The same tree again: nothing changed.
  {
    const r = await phase(
      'fshare push (unchanged)',
      `${timeOf(tf('push2'))}${cli('push-unchanged')} push ${sq(tree)} --name bench --json --no-progress`,
      env,
    );
    const out = JSON.parse(r.stdout);
    if (out.changed !== false || out.uploaded.files !== 0)
      throw fail(`the second push of an unchanged tree uploaded something: ${r.stdout}`);
    results.push2 = { ...r, ...(await readTime(tf('push2'))) };
  }

  // 3. Pull into an empty directory.
  {
    const r = await phase(
      'fshare pull (into an empty directory)',
      `${timeOf(tf('pull'))}${cli('pull')} pull bench ${sq(pulled)} --json --no-progress`,
      env,
    );
    const out = JSON.parse(r.stdout);
    if (out.downloaded.files !== totalFiles) throw fail(`unexpected pull: ${r.stdout}`);
    results.pull = { ...r, ...(await readTime(tf('pull'))) };
    note('verifying the pulled tree');
    const got = await treeDigest(pulled);
    if (got.sha256 !== source.sha256)
      throw fail(
        `the pulled tree differs from the source (${got.files} files, ${got.bytes} bytes)`,
      );
    results.pull.verified = true;
    await rm(pulled, { recursive: true, force: true });
  }

  // 4. tar c | fshare upload -
  let tarId;
  {
    const r = await phase(
      'tar c | fshare upload -',
      `${timeOf(tf('tar-c'))}tar c -C ${sq(tree)} . | ` +
        `${timeOf(tf('upload-stdin'))}${cli('tar-upload')} upload - --name tree.tar --json --no-progress`,
      env,
    );
    const out = JSON.parse(r.stdout);
    tarId = out[0]?.share_id;
    if (!tarId || !(out[0].size > made.bytes)) throw fail(`unexpected upload -: ${r.stdout}`);
    results.tar_upload = {
      ...r,
      tar_bytes: out[0].size,
      tar: await readTime(tf('tar-c')),
      fshare: await readTime(tf('upload-stdin')),
    };
  }

  // 5. fshare get -o - | tar x
  {
    const r = await phase(
      'fshare get -o - | tar x',
      `${timeOf(tf('get-stdout'))}${cli('tar-download')} get ${sq(tarId)} -o - --no-progress | ` +
        `${timeOf(tf('tar-x'))}tar x -C ${sq(untarred)}`,
      env,
    );
    results.tar_download = {
      ...r,
      fshare: await readTime(tf('get-stdout')),
      tar: await readTime(tf('tar-x')),
    };
    // Neither fshare pull nor tar fsyncs each file; what writing the extracted tree out costs:
    const t = performance.now();
    spawnSync('sync', []);
    results.tar_download.sync_after_s = (performance.now() - t) / 1000;
    note('verifying the extracted tree');
    const got = await treeDigest(untarred);
    if (got.sha256 !== source.sha256)
      throw fail(
        `the extracted tree differs from the source (${got.files} files, ${got.bytes} bytes)`,
      );
    results.tar_download.verified = true;
    await rm(untarred, { recursive: true, force: true });
  }

  // 6. A shell loop of one fshare upload per file, over an evenly spaced sample of small files.
  {
    const step = made.small.length / opts.sample;
    const sample = Array.from({ length: opts.sample }, (_, i) => made.small[Math.floor(i * step)]);
    const list = join(tmpRoot, 'sample.txt');
    await writeFile(list, sample.map((f) => `${join(tree, f.path)}\n`).join(''));
    const r = await phase(
      `shell loop: fshare upload of ${opts.sample} files, one process each`,
      `while IFS= read -r f; do ${cli('loop')} upload "$f" --json --no-progress; done < ${sq(list)}`,
      env,
    );
    // One pretty-printed JSON array per process, each starting at the beginning of a line.
    const uploads = r.stdout
      .split(/^(?=\[)/m)
      .filter((doc) => doc.trim())
      .map((doc) => JSON.parse(doc)[0]);
    if (uploads.length !== opts.sample || uploads.some((u, i) => u?.size !== sample[i].size))
      throw fail(`the loop uploaded ${uploads.length} of ${opts.sample} files, or wrong sizes`);
    results.loop = {
      ...r,
      files: opts.sample,
      bytes: sample.reduce((s, f) => s + f.size, 0),
      per_file_s: r.seconds / opts.sample,
      extrapolated_s: (r.seconds / opts.sample) * made.small.length,
    };
  }

  note('stopping the server');
  await stopServer();

  const mbps = (bytes, s) => bytes / MB / s;
  const p = (x) => ({
    s: round(x.seconds, 2),
    client_cpu_s: round(x.client_cpu_s, 2),
    server_cpu_s: round(x.server_cpu_s, 2),
  });
  return {
    tree: {
      files: totalFiles,
      small_files: made.small.length,
      small_bytes: made.smallBytes,
      large_files: made.large.length,
      large_bytes: made.largeBytes,
      bytes: made.bytes,
      dirs: made.dirs.length,
      sha256: source.sha256,
      min_size: opts.minSize,
      max_size: opts.maxSize,
      large_size: opts.largeSize,
      seed: opts.seed,
    },
    push: {
      ...p(results.push1),
      mb_s: round(mbps(made.bytes, results.push1.seconds)),
      cli_cpu_s: round(results.push1.cpu_s, 2),
      cli_rss_mb: round(results.push1.rss_mb),
      uploaded_files: results.push1.uploaded_files,
      data_shares: results.push1.data_shares,
      data_bytes: results.push1.data_bytes,
    },
    push_unchanged: {
      ...p(results.push2),
      cli_rss_mb: round(results.push2.rss_mb),
    },
    pull: {
      ...p(results.pull),
      mb_s: round(mbps(made.bytes, results.pull.seconds)),
      cli_rss_mb: round(results.pull.rss_mb),
      verified: results.pull.verified,
    },
    tar_upload: {
      ...p(results.tar_upload),
      mb_s: round(mbps(made.bytes, results.tar_upload.seconds)),
      tar_bytes: results.tar_upload.tar_bytes,
      tar_cpu_s: round(results.tar_upload.tar?.cpu_s, 2),
      fshare_cpu_s: round(results.tar_upload.fshare?.cpu_s, 2),
      fshare_rss_mb: round(results.tar_upload.fshare?.rss_mb),
    },
    tar_download: {
      ...p(results.tar_download),
      mb_s: round(mbps(made.bytes, results.tar_download.seconds)),
      tar_cpu_s: round(results.tar_download.tar?.cpu_s, 2),
      fshare_cpu_s: round(results.tar_download.fshare?.cpu_s, 2),
      fshare_rss_mb: round(results.tar_download.fshare?.rss_mb),
      sync_after_s: round(results.tar_download.sync_after_s, 2),
      verified: results.tar_download.verified,
    },
    loop: {
      ...p(results.loop),
      files: results.loop.files,
      bytes: results.loop.bytes,
      per_file_s: round(results.loop.per_file_s, 3),
      extrapolated_files: made.small.length,
      extrapolated_s: round(results.loop.extrapolated_s, 0),
    },
    whoami_s: round(results.whoami_s, 2),
    push_vs_tar_upload: round(results.push1.seconds / results.tar_upload.seconds, 2),
    pull_vs_tar_download: round(results.pull.seconds / results.tar_download.seconds, 2),
    loop_vs_push: round(results.loop.extrapolated_s / results.push1.seconds, 0),
    machine: facts,
    loadavg_start: loadStart.map((x) => round(x, 2)),
    loadavg_end: loadavg().map((x) => round(x, 2)),
    node_extra_ca_certs: extraCa,
    date: `${new Date().toISOString().slice(0, 16).replace('T', ' ')} UTC`,
    command: commandLine(),
    cpu_method: `wall from spawn to exit; client CPU from bash \`times\` (children)${useGnuTime ? ', per process from GNU time' : ''}; server CPU from /proc/PID/stat`,
    units: 'MB = 10^6 bytes, MiB = 2^20 bytes',
  };
}

// ---------------------------------------------------------------------------------------------
// Output

function targets(r) {
  const status = (ok) => (ok ? 'met' : 'MISSED');
  return [
    [
      `push ≤ ${TARGETS.push_vs_tar_upload} × tar c | upload -`,
      `${r.push_vs_tar_upload} × (${r.push.s} s vs ${r.tar_upload.s} s)`,
      status(r.push_vs_tar_upload <= TARGETS.push_vs_tar_upload),
    ],
    [
      `pull ≤ ${TARGETS.pull_vs_tar_download} × get -o - | tar x`,
      `${r.pull_vs_tar_download} × (${r.pull.s} s vs ${r.tar_download.s} s)`,
      status(r.pull_vs_tar_download <= TARGETS.pull_vs_tar_download),
    ],
    [
      `push of the unchanged tree < ${TARGETS.push_unchanged_s} s`,
      `${r.push_unchanged.s} s`,
      status(r.push_unchanged.s < TARGETS.push_unchanged_s),
    ],
  ];
}

function rows(r) {
  const cpu = (x) => `${x.client_cpu_s ?? '?'} s`;
  const rss = (mb, who = '') =>
    mb === null || mb === undefined ? '' : `, ${who}peak RSS ${mb} MB`;
  return [
    [
      'fshare push (first)',
      `${r.push.s} s`,
      cpu(r.push),
      `${r.push.server_cpu_s} s`,
      `${r.push.mb_s} MB/s; ${n(r.push.uploaded_files)} files into ${r.push.data_shares} data shares${rss(r.push.cli_rss_mb)}`,
    ],
    [
      'fshare push (unchanged)',
      `${r.push_unchanged.s} s`,
      cpu(r.push_unchanged),
      `${r.push_unchanged.server_cpu_s} s`,
      `nothing uploaded${rss(r.push_unchanged.cli_rss_mb)}`,
    ],
    [
      'fshare pull (empty dir)',
      `${r.pull.s} s`,
      cpu(r.pull),
      `${r.pull.server_cpu_s} s`,
      `${r.pull.mb_s} MB/s; tree sha256 equal to the source's${rss(r.pull.cli_rss_mb)}`,
    ],
    [
      'tar c | fshare upload -',
      `${r.tar_upload.s} s`,
      cpu(r.tar_upload),
      `${r.tar_upload.server_cpu_s} s`,
      `${r.tar_upload.mb_s} MB/s of files; CPU tar ${r.tar_upload.tar_cpu_s ?? '?'} s, fshare ${r.tar_upload.fshare_cpu_s ?? '?'} s; ${(r.tar_upload.tar_bytes / MB).toFixed(1)} MB of tar${rss(r.tar_upload.fshare_rss_mb, 'fshare ')}`,
    ],
    [
      'fshare get -o - | tar x',
      `${r.tar_download.s} s`,
      cpu(r.tar_download),
      `${r.tar_download.server_cpu_s} s`,
      `${r.tar_download.mb_s} MB/s of files; CPU fshare ${r.tar_download.fshare_cpu_s ?? '?'} s, tar ${r.tar_download.tar_cpu_s ?? '?'} s; sync after it ${r.tar_download.sync_after_s} s; tree sha256 equal${rss(r.tar_download.fshare_rss_mb, 'fshare ')}`,
    ],
    [
      `upload loop, ${r.loop.files} files`,
      `${r.loop.s} s`,
      cpu(r.loop),
      `${r.loop.server_cpu_s} s`,
      `${r.loop.per_file_s} s per file (one fshare upload process each)`,
    ],
    [
      `… extrapolated to ${n(r.loop.extrapolated_files)}`,
      `${n(r.loop.extrapolated_s)} s`,
      '',
      '',
      `EXTRAPOLATED (${r.loop.per_file_s} s × ${n(r.loop.extrapolated_files)}), not measured; ${r.loop_vs_push} × the first push`,
    ],
    [
      'fshare whoami',
      `${r.whoami_s} s`,
      '',
      '',
      'median of 5: start-up of one CLI process and one request',
    ],
  ];
}

const HEADER = ['measure', 'wall', 'client CPU', 'server CPU', 'detail'];

function textTable(rows, header) {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) =>
    cells
      .map((c, i) => c.padEnd(widths[i]))
      .join('  ')
      .trimEnd();
  return [line(header), line(widths.map((w) => '-'.repeat(w))), ...rows.map(line)].join('\n');
}

/** A markdown table laid out the way prettier lays it out (so `prettier --check` passes). */
function markdownTable(rawRows, header) {
  const rows = rawRows.map((r) => r.map((c) => c.replaceAll('|', '\\|')));
  const widths = header.map((h, i) => Math.max(3, h.length, ...rows.map((r) => r[i].length)));
  const line = (cells) => `| ${cells.map((c, i) => c.padEnd(widths[i])).join(' | ')} |`;
  const rule = `| ${widths.map((w) => '-'.repeat(w)).join(' | ')} |`;
  return [line(header), rule, ...rows.map(line)].join('\n');
}

function describeTree(t) {
  return (
    `${n(t.small_files)} files of ${t.min_size / 1024}–${t.max_size / 1024} KiB ` +
    `(${(t.small_bytes / MB).toFixed(1)} MB) in ${t.dirs} nested directories, plus ` +
    `${t.large_files} × ${t.large_size / MiB} MiB: ${n(t.files)} files, ${(t.bytes / MB).toFixed(1)} MB`
  );
}

function table(r, withTargets = true) {
  return (
    `fshare artifacts benchmark (${describeTree(r.tree)}; MB = 10^6 bytes)\n\n` +
    textTable(rows(r), HEADER) +
    '\n' +
    (withTargets ? `\n${textTable(targets(r), ['target', 'measured', 'status'])}\n` : '')
  );
}

function readmeSection(r) {
  const m = r.machine;
  const load = (l) => l.map((x) => x.toFixed(2)).join(' ');
  return `${SECTION}

\`bench/artifacts.mjs\` measures \`fshare push\` and \`fshare pull\` of a whole tree side by side,
in one run against one \`fshare serve\`, with the same tree through tar and a single share, and
with a shell loop of one \`fshare upload\` per file. It builds the tree in a temp directory
(\`fshare-bench-artifacts-*\`, deleted at the end, also on failure or Ctrl-C): by default 10,000
files of 1–16 KiB of random bytes in 100 nested directories, plus 4 files of 64 MiB. It starts
\`node bin/fshare.js serve --port 0 --quiet --data-dir <tmp>/data\` with \`FSHARE_ADMIN_USER\` /
\`FSHARE_ADMIN_PASSWORD\`, signs in with \`POST /users/login\`, and runs every CLI with
\`FSHARE_TOKEN\`, \`FSHARE_SERVER\`, \`FSHARE_KEYRING=off\`, a temp \`FSHARE_CONFIG_DIR\` and \`TMPDIR\`
in the temp directory. Then, one after another, each preceded by \`sync\` and 300 ms:

1. \`fshare push TREE --name bench\` (the first push: hashes, packs and uploads everything);
2. the same push again, nothing changed (the hash cache in the config directory is warm);
3. \`fshare pull bench OUT\` into an empty directory; OUT must equal the tree;
4. \`tar c -C TREE . | fshare upload - --name tree.tar\`;
5. \`fshare get ID -o - | tar x -C OUT2\` of that share; OUT2 must equal the tree;
6. \`while read f; do fshare upload "$f"; done\` over an evenly spaced sample of the small files
   (\`--sample\`, 200), reported per file and **extrapolated** to all of them.

"Equal" is one sha256 over every file's path, size, permission bits and sha256, and every
directory, compared with the source's: a fast wrong answer is not a result. Wall time runs from
spawn to exit (Node's start-up included). Client CPU is user + system of every process of the
phase (bash's \`times\`: tar included in 4 and 5); with GNU time installed, each process's CPU and
peak RSS too. Server CPU is the change in the server's utime + stime over the phase.

\`\`\`sh
npm run bench                                      # the transfer benchmark (its options), then this one
npm run bench:artifacts                            # only this one (builds dist/ first)
npm run bench:artifacts -- --write-readme          # and replaces this section with the results
npm run -s bench:artifacts -- --json | jq .        # one JSON object on stdout
node bench/artifacts.mjs --files 2000 --large 1    # smaller; see --help for every option
\`\`\`

Options: \`--files N\`, \`--dirs N\`, \`--min-size\`, \`--max-size\`, \`--large N\`, \`--large-size\`,
\`--sample N\`, \`--seed N\` (sizes and layout; the bytes are always new), \`--dir DIR\`, \`--json\`,
\`--write-readme\`, \`--profile DIR\` (the server and every CLI under \`node --cpu-prof\`; then
\`node bench/profile-top.mjs DIR/*.cpuprofile\`). Needs bash, GNU tar and, for the per-process split, GNU time. It checks for
about 7 × the tree's size free in the temp directory (about 2.7 GB by default).

### Results

\`${r.command}\`, ${r.date}, on ${m.cpus === 2 ? 'the' : 'a'} ${m.cpus}-vCPU VM (${m.cpu_model}, ${m.memory_gib} GiB;
Node ${m.node.replace(/^v/, '')}; Linux ${m.linux}; ${m.fs ?? 'file system unknown'}; ${m.tar}), code at
\`${m.commit}\`. Load average ${load(r.loadavg_start)} at the start and ${load(r.loadavg_end)} at the end:
the machine's 2 cores are shared with other sessions, so single figures can move by tens of per
cent between runs (see "Noise on this machine"). One run, side by side:

\`\`\`
${table(r, false).trimEnd()}
\`\`\`

${markdownTable(
  targets(r).map(([t, m, s]) => [t, m, s === 'MISSED' ? '**missed**' : s]),
  ['target', 'measured', 'status'],
)}

The loop's figure for all ${n(r.loop.extrapolated_files)} files is **extrapolated** from ${r.loop.files} uploads
(${r.loop.per_file_s} s each), not measured. The tar pipeline moves one share and verifies only
that share's sha256; push and pull verify every file and skip what is already there. Pull writes
each file to a temporary file beside its place and renames it, without an fsync per file, as tar
writes without one (the \`sync\` after \`tar x\` took ${r.tar_download.sync_after_s} s, not counted in
either time).
`;
}

/** Replaces the section in bench/README.md, or adds it before the first "Latest results". */
async function writeReadme(r) {
  const text = await readFile(README, 'utf8');
  const lines = text.split('\n');
  const section = readmeSection(r).trimEnd().split('\n');
  const start = lines.findIndex((l) => l.trim() === SECTION);
  let out;
  if (start >= 0) {
    let end = lines.findIndex((l, i) => i > start && /^## /.test(l));
    if (end < 0) end = lines.length;
    const tail = lines.slice(end);
    out = [...lines.slice(0, start), ...section, ...(tail.length ? ['', ...tail] : [''])];
  } else {
    let at = lines.findIndex((l) => l.startsWith('## Latest results'));
    if (at < 0) at = lines.length;
    out = [...lines.slice(0, at), ...section, '', ...lines.slice(at)];
  }
  await writeFile(README, out.join('\n').replace(/\n*$/, '\n'));
  note(`wrote "${SECTION.slice(3)}" into ${relative(process.cwd(), README) || README}`);
}

try {
  const result = await main();
  process.stdout.write(opts.json ? `${JSON.stringify(result, null, 2)}\n` : table(result));
  if (opts.writeReadme) await writeReadme(result);
  await cleanup();
} catch (err) {
  // After a signal the cleanup has pulled the server and the files from under the phase that
  // was running: its error is a consequence, not a finding.
  if (interrupted) await new Promise(() => {}); // the signal handler exits with 130
  const detail = err.benchFailure ? err.message : (err.stack ?? String(err));
  process.stderr.write(`bench: failed: ${detail}\n`);
  if (server?.stderr.trim())
    process.stderr.write(`bench: server stderr:\n${server.stderr.trim()}\n`);
  await cleanup();
  process.exitCode = 1;
}
