// Helpers the benchmarks (bench/run.mjs, artifacts.mjs, scale.mjs, floor.mjs) share.
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes, randomFillSync } from 'node:crypto';
import { createReadStream, readFileSync } from 'node:fs';
import { open, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';

const t0 = performance.now();
export const note = (msg) =>
  process.stderr.write(`bench: [${((performance.now() - t0) / 1000).toFixed(1)}s] ${msg}\n`);

export function fail(msg) {
  const err = new Error(msg);
  err.benchFailure = true;
  return err;
}

/** "512m", "1g", "1.5GiB" or bytes; binary units like the CLI's --chunk-size. */
export function parseSize(text) {
  const units = { '': 1, b: 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30, t: 2 ** 40 };
  const m = /^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?\s*$/i.exec(String(text));
  if (!m) return null;
  const bytes = Math.round(Number(m[1]) * units[m[2].toLowerCase()]);
  return Number.isSafeInteger(bytes) && bytes > 0 ? bytes : null;
}

export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

export function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

export function commandExists(cmd) {
  return spawnSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' }).status === 0;
}

/** Seeded PRNG (mulberry32): the same sequence in every run with the same seed. */
export function prng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** The SHA-256 of a file, read in 1 MiB pieces. */
export async function sha256File(path) {
  const hash = createHash('sha256');
  for await (const data of createReadStream(path, { highWaterMark: 1 << 20 })) hash.update(data);
  return hash.digest('hex');
}

/** Streams crypto-random bytes to `path` (1 MiB writes) and returns their SHA-256. */
export async function makeRandomFile(path, size) {
  const hash = createHash('sha256');
  const handle = await open(path, 'w', 0o600);
  const buf = Buffer.allocUnsafe(1 << 20);
  try {
    for (let left = size; left > 0;) {
      const n = Math.min(left, buf.length);
      const block = buf.subarray(0, n);
      randomFillSync(block);
      hash.update(block);
      for (let off = 0; off < n;) off += (await handle.write(block, off, n - off)).bytesWritten;
      left -= n;
    }
    // On disk before anything is timed: its write-back must not land inside a measurement.
    await handle.sync();
  } finally {
    await handle.close();
  }
  return hash.digest('hex');
}

/**
 * Children's CPU seconds (user + system) from what bash's `times` printed: the shell's own
 * times, then its children's ("0m1.234s 0m0.056s"). Null when the text is not that.
 */
export function childCpuFromTimes(text) {
  const secs = (text.trim().split('\n')[1] ?? '')
    .trim()
    .split(/\s+/)
    .map((t) => {
      const m = /^(\d+)m([\d.]+)s$/.exec(t);
      return m ? Number(m[1]) * 60 + Number(m[2]) : NaN;
    });
  return secs.length === 2 && secs.every(Number.isFinite) ? secs[0] + secs[1] : null;
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/** utime + stime of a live process, in seconds (its threads included); null once it has gone. */
export function cpuSeconds(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    return (Number(fields[11]) + Number(fields[12])) / CLK_TCK;
  } catch {
    return null;
  }
}

/** A string quoted for bash. */
export const sq = (s) => `'${String(s).replaceAll("'", `'\\''`)}'`;

/**
 * Runs `script` under bash, after `shellOptions` (`set -e`…), and times it: wall seconds from
 * spawn to exit (Node's start-up included, as a user sees it); `client_cpu_s`, what bash's
 * `times` reports for its children (every process of the script); `server_cpu_s`, the delta of
 * `serverPid`'s utime + stime (null without one, or when it has gone: `server_alive` says which).
 * Keeps stdout and the last `keepStderr` characters of stderr; `code` is the exit code or the
 * signal. The child is in `children` while it runs, so the benchmark can stop it on a signal.
 */
export async function timedBash(
  script,
  { env, dir, shellOptions, serverPid, children, detached = false, keepStderr = 4000 },
) {
  const timesFile = join(dir, `times-${randomBytes(4).toString('hex')}`);
  const serverBefore = serverPid ? cpuSeconds(serverPid) : null;
  const started = performance.now();
  const child = spawn('bash', ['-c', `${shellOptions}\n${script}\ntimes > ${sq(timesFile)}`], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
    detached,
  });
  children.add(child);
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (d) => (stdout += d));
  child.stderr.on('data', (d) => (stderr = (stderr + d).slice(-keepStderr)));
  const code = await new Promise((resolve, reject) => {
    child.once('error', reject);
    child.once('close', (c, signal) => resolve(c ?? signal));
  });
  const seconds = (performance.now() - started) / 1000;
  children.delete(child);
  const serverAfter = serverPid ? cpuSeconds(serverPid) : null;
  const clientCpu = childCpuFromTimes(await readFile(timesFile, 'utf8').catch(() => ''));
  await rm(timesFile, { force: true });
  return {
    code,
    seconds,
    client_cpu_s: clientCpu,
    server_cpu_s: serverBefore === null || serverAfter === null ? null : serverAfter - serverBefore,
    server_alive: serverAfter !== null,
    stdout,
    stderr,
  };
}

/**
 * NODE_EXTRA_CA_CERTS makes every Node process read and parse that bundle as it starts, before
 * any of its own code runs (Node 20 with OpenSSL 3, nodejs/node#40524): on the benchmark's VM,
 * whose sandbox points it at the system's whole bundle for its proxy, 30 ms and 1.9 MB per
 * process. curl reads its bundle only for https, and every benchmark here talks plain http on
 * this machine. So unless `keep` (`--keep-extra-ca`), the variable is removed from this
 * process's environment, which every process the benchmark starts inherits, and the run reports
 * what it costs a bare `node -e ''` here. Null when the variable is not set.
 */
export function extraCaCerts(keep) {
  const file = process.env.NODE_EXTRA_CA_CERTS;
  if (!file) return null;
  const without = { ...process.env };
  delete without.NODE_EXTRA_CA_CERTS;
  // A bare Node that prints its own peak RSS; the wall time of each, medians of 7.
  const bare = (env) => {
    const runs = [];
    for (let i = 0; i < 7; i++) {
      const start = performance.now();
      const r = spawnSync(
        process.execPath,
        ['-e', 'process.stdout.write(String(process.resourceUsage().maxRSS))'],
        { env, encoding: 'utf8' },
      );
      runs.push({ ms: performance.now() - start, kb: Number(r.stdout) });
    }
    return { ms: median(runs.map((x) => x.ms)), mb: (median(runs.map((x) => x.kb)) * 1024) / 1e6 };
  };
  const a = bare(process.env);
  const b = bare(without);
  if (!keep) delete process.env.NODE_EXTRA_CA_CERTS;
  return {
    file,
    kept: Boolean(keep),
    node_start_ms: Number(a.ms.toFixed(1)),
    node_start_without_ms: Number(b.ms.toFixed(1)),
    node_rss_mb: Number(a.mb.toFixed(1)),
    node_rss_without_mb: Number(b.mb.toFixed(1)),
  };
}

/** One line saying what extraCaCerts() found and did. */
export function extraCaNote(info) {
  if (!info) return 'NODE_EXTRA_CA_CERTS not set';
  const cost =
    `a bare \`node -e ''\` starts in ${info.node_start_ms} ms with it, ${info.node_start_without_ms} without; ` +
    `peak RSS ${info.node_rss_mb} MB against ${info.node_rss_without_mb}`;
  return info.kept
    ? `NODE_EXTRA_CA_CERTS=${info.file} kept for every process measured (--keep-extra-ca): ${cost}`
    : `NODE_EXTRA_CA_CERTS=${info.file} removed for every process measured (--keep-extra-ca keeps it): ${cost}`;
}
