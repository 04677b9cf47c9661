// The services bench/scale.mjs runs fshare against: a throwaway PostgreSQL cluster (Debian's
// binaries), s3rver, and a round-robin HTTP balancer. s3rver and the balancer run in child
// processes (this file, run as a script), so their CPU is theirs, not the benchmark's, and each
// can have a core of its own; each child exits when its stdin closes, so it cannot outlive the
// benchmark even when that is killed with SIGKILL.
//
//   node bench/backends.mjs s3rver DIR           prints {"port": N}, serves DIR
//   node bench/backends.mjs balancer URL...      prints {"port": N}; on SIGTERM, its tallies

import { spawn, spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { chown, mkdtemp, readdir, readFile, rm } from 'node:fs/promises';
import { Agent, createServer, request } from 'node:http';
import { createRequire } from 'node:module';
import { createServer as createNetServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const SELF = fileURLToPath(import.meta.url);
const require = createRequire(import.meta.url);

/** The credentials s3rver checks signatures with, and the region: the servers' environment. */
export const S3_ENV = {
  AWS_ACCESS_KEY_ID: 'S3RVER',
  AWS_SECRET_ACCESS_KEY: 'S3RVER',
  AWS_REGION: 'us-east-1',
};

// ---------------------------------------------------------------------------------------------
// Per-process accounting from /proc

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/** Fields of /proc/PID/stat from the state on (field 3 is index 0); null once it has gone. */
function statFields(pid) {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  } catch {
    return null;
  }
}

/**
 * Of /proc/PID/io: `write` is write_bytes (file data the process dirtied, bound for the disk),
 * `cancelled` what of it was truncated or deleted before it got there; zeros if unreadable.
 */
function ioBytes(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/io`, 'utf8');
    const get = (key) => Number(new RegExp(`^${key}: (\\d+)`, 'm').exec(text)?.[1] ?? 0);
    return { write: get('write_bytes'), cancelled: get('cancelled_write_bytes') };
  } catch {
    return { write: 0, cancelled: 0 };
  }
}

/**
 * CPU seconds (user + system, threads included) and disk bytes of a process so far. With
 * `tree`, its children too, and what its reaped children used (cutime + cstime): PostgreSQL's
 * postmaster and the backends it forks.
 */
export function usage(pid, { tree = false } = {}) {
  const own = statFields(pid);
  if (!own) return null;
  let ticks = Number(own[11]) + Number(own[12]);
  const io = ioBytes(pid);
  if (tree) {
    ticks += Number(own[13]) + Number(own[14]);
    for (const name of readdirSync('/proc')) {
      if (!/^\d+$/.test(name)) continue;
      const f = statFields(name);
      if (!f || Number(f[1]) !== pid) continue;
      ticks += Number(f[11]) + Number(f[12]);
      const childIo = ioBytes(name);
      io.write += childIo.write;
      io.cancelled += childIo.cancelled;
    }
  }
  return { cpu: ticks / CLK_TCK, ...io };
}

/**
 * The whole machine's CPU time so far, in seconds summed over all cores (/proc/stat): `busy`
 * (user, nice, system, irq, softirq, steal) and `iowait`.
 */
export function machineCpu() {
  const [, ...f] = readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/);
  const [user, nice, system, , iowait, irq, softirq, steal] = f.map(Number);
  return {
    busy: (user + nice + system + irq + softirq + (steal || 0)) / CLK_TCK,
    iowait: iowait / CLK_TCK,
  };
}

/** VmRSS and VmHWM of a live process, in bytes; null once it has gone. */
export function memory(pid) {
  try {
    const text = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key) => Number(new RegExp(`^${key}:\\s+(\\d+) kB`, 'm').exec(text)?.[1]) * 1024;
    return { rss: kb('VmRSS'), hwm: kb('VmHWM') };
  } catch {
    return null;
  }
}

// ---------------------------------------------------------------------------------------------
// Helpers

/** A port free right now on 127.0.0.1 (for programs that cannot be given port 0). */
async function freePort() {
  const srv = createNetServer();
  await new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', resolve);
  });
  const { port } = srv.address();
  await new Promise((resolve) => srv.close(resolve));
  return port;
}

/** Runs a command to completion; rejects with its output when it fails. */
function exec(cmd, args, options = {}) {
  return new Promise((resolve, reject) => {
    const child = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], ...options });
    let out = '';
    child.stdout.on('data', (d) => (out += d));
    child.stderr.on('data', (d) => (out += d));
    child.once('error', reject);
    child.once('close', (code) =>
      code === 0
        ? resolve(out)
        : reject(new Error(`${cmd} ${args.join(' ')} exited with ${code}:\n${out.trim()}`)),
    );
  });
}

/**
 * Starts `node [nodeFlags] bench/backends.mjs ROLE ...args` and resolves with `{ child, port }` once it
 * prints its port. Its stdin stays open: closing it (our exit, however it happens) ends it.
 */
async function startChild(role, args, nodeFlags = [], onLine = null) {
  const child = spawn(process.execPath, [...nodeFlags, SELF, role, ...args], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { ...process.env, AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED: 'true' },
  });
  let out = '';
  let err = '';
  let partial = '';
  child.stderr.on('data', (d) => {
    err = (err + d).slice(-4000);
    const lines = (partial + d).split('\n');
    partial = lines.pop();
    if (onLine) for (const l of lines) if (l.trim()) onLine(l);
  });
  const exited = new Promise((resolve) => child.once('exit', (code, sig) => resolve(code ?? sig)));
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${role} did not start within 30 s`)), 30_000);
    const onData = (d) => {
      out += d;
      const nl = out.indexOf('\n');
      if (nl < 0) return;
      clearTimeout(timer);
      child.stdout.off('data', onData);
      resolve(JSON.parse(out.slice(0, nl)).port);
      out = out.slice(nl + 1);
    };
    child.stdout.on('data', onData);
    exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`${role} exited (${code}) before listening:\n${err.trim()}`));
    });
  });
  return {
    child,
    port,
    stderr: () => err,
    /** SIGTERM; resolves with what it printed after its port (the balancer's tallies). */
    async stop() {
      let rest = out;
      child.stdout.on('data', (d) => (rest += d));
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGTERM');
      await exited;
      return rest.trim();
    },
  };
}

// ---------------------------------------------------------------------------------------------
// PostgreSQL

/** Debian's newest PostgreSQL: /usr/lib/postgresql/<major>/bin. */
async function postgresBin() {
  const majors = (await readdir('/usr/lib/postgresql').catch(() => []))
    .filter((v) => /^\d+$/.test(v))
    .sort((a, b) => Number(b) - Number(a));
  if (majors.length === 0)
    throw new Error('PostgreSQL is not installed (apt-get install postgresql)');
  return `/usr/lib/postgresql/${majors[0]}/bin`;
}

/**
 * A throwaway PostgreSQL cluster in a temp directory, trust authentication on 127.0.0.1, on a
 * free port; its socket in the same directory; pg_stat_statements loaded. initdb refuses root:
 * then everything runs as the `postgres` system user. Resolves with
 * `{ url, version, pid, createDatabase(name), statements(name), topStatements(name), stop }`.
 */
export async function startPostgres() {
  const bin = await postgresBin();
  const dir = await mkdtemp(join(tmpdir(), 'fshare-bench-pg-'));
  const asRoot = process.getuid?.() === 0;
  const pg = (tool, args) =>
    asRoot
      ? exec('runuser', ['-u', 'postgres', '--', join(bin, tool), ...args])
      : exec(join(bin, tool), args);
  const data = join(dir, 'data');
  let started = false;
  let stop = async () => {
    if (started) {
      started = false;
      await pg('pg_ctl', ['stop', '-D', data, '-m', 'fast', '-w', '-t', '30']).catch(() => {});
    }
    await rm(dir, { recursive: true, force: true });
  };
  try {
    if (asRoot) {
      const uid = Number(spawnSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).stdout);
      const gid = Number(spawnSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).stdout);
      if (!Number.isInteger(uid) || uid === 0) throw new Error('no postgres system user');
      await chown(dir, uid, gid);
    }
    // --no-sync: the cluster is thrown away; the server it runs keeps PostgreSQL's defaults.
    await pg('initdb', [
      '-D',
      data,
      '-A',
      'trust',
      '-U',
      'postgres',
      '-E',
      'UTF8',
      '--locale=C',
      '--no-sync',
    ]);
    const port = await freePort();
    // pg_stat_statements: how many statements (round trips) each request costs.
    const options =
      `-p ${port} -c listen_addresses=127.0.0.1 -k ${dir} ` +
      '-c shared_preload_libraries=pg_stat_statements -c pg_stat_statements.track=all';
    started = true;
    await pg('pg_ctl', [
      'start',
      '-D',
      data,
      '-w',
      '-t',
      '30',
      '-l',
      join(dir, 'log'),
      '-o',
      options,
    ]);
    const pid = Number((await readFile(join(data, 'postmaster.pid'), 'utf8')).split('\n')[0]);
    const version = (await exec(join(bin, 'postgres'), ['--version'])).trim();
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
    const { default: pgModule } = await import('pg');
    const admin = new pgModule.Client({ connectionString: url });
    await admin.connect();
    const stopCluster = stop;
    stop = async () => {
      await admin.end().catch(() => {});
      await stopCluster();
    };
    await admin.query('CREATE EXTENSION pg_stat_statements');
    return {
      url,
      version,
      pid,
      log: join(dir, 'log'),
      /** CREATE DATABASE name; resolves with its URL. */
      async createDatabase(name) {
        if (!/^[a-z_][a-z0-9_]*$/.test(name)) throw new Error(`bad database name: ${name}`);
        await admin.query(`CREATE DATABASE ${name}`);
        return `postgres://postgres@127.0.0.1:${port}/${name}`;
      },
      /** Statements executed so far in database `name` (BEGIN and COMMIT included). */
      async statements(name) {
        const { rows } = await admin.query(
          `SELECT coalesce(sum(s.calls), 0)::bigint AS calls FROM pg_stat_statements s
             JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = $1`,
          [name],
        );
        return Number(rows[0].calls);
      },
      /** The `limit` statements run most often in database `name`: `[{ calls, query }]`. */
      async topStatements(name, limit = 8) {
        const { rows } = await admin.query(
          `SELECT s.calls::bigint AS calls, regexp_replace(s.query, '\\s+', ' ', 'g') AS query
             FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid
            WHERE d.datname = $1 ORDER BY s.calls DESC LIMIT $2`,
          [name, limit],
        );
        return rows.map((r) => ({ calls: Number(r.calls), query: r.query }));
      },
      stop: () => stop(),
    };
  } catch (err) {
    await stop();
    throw err;
  }
}

// ---------------------------------------------------------------------------------------------
// s3rver

/**
 * s3rver in a child process, silent, serving a temp directory on a free port. Resolves with
 * `{ endpoint, version, pid, createBucket(name), stop }`; `nodeFlags` such as --cpu-prof;
 * `onLine(line)` sees every line it writes to stderr (its 5xx answers, and why).
 */
export async function startS3({ nodeFlags = [], onLine = null } = {}) {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = 'true';
  const dir = await mkdtemp(join(tmpdir(), 'fshare-bench-s3rver-'));
  let proc;
  try {
    // s3rver makes ListObjectsV2 continuation tokens with DES, which OpenSSL 3 refuses unless
    // its legacy provider is loaded: without it, every listing with a second page is a 500.
    proc = await startChild(
      's3rver',
      [dir],
      ['--openssl-legacy-provider', ...nodeFlags],
      onLine,
    ).catch(() => startChild('s3rver', [dir], nodeFlags, onLine));
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
  const endpoint = `http://127.0.0.1:${proc.port}`;
  const { version } = require('s3rver/package.json');
  return {
    endpoint,
    version,
    pid: proc.child.pid,
    dir,
    stderr: proc.stderr,
    /** Creates the bucket; resolves with `s3://name`. */
    async createBucket(name) {
      const { S3Client, CreateBucketCommand } = await import('@aws-sdk/client-s3');
      const client = new S3Client({
        endpoint,
        forcePathStyle: true,
        region: S3_ENV.AWS_REGION,
        credentials: {
          accessKeyId: S3_ENV.AWS_ACCESS_KEY_ID,
          secretAccessKey: S3_ENV.AWS_SECRET_ACCESS_KEY,
        },
      });
      try {
        await client.send(new CreateBucketCommand({ Bucket: name }));
      } finally {
        client.destroy();
      }
      return `s3://${name}`;
    },
    async stop() {
      await proc.stop();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

async function runS3rver(directory) {
  const S3rver = require('s3rver');
  const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory });
  // s3rver answers its own failures with 500 InternalError and, silent, logs nothing: say why.
  server.on('error', (err, ctx) => {
    if (err.status && err.status < 500) return;
    const what = ctx ? `${ctx.method} ${ctx.url}` : '';
    const first = String(err.stack ?? err)
      .split('\n')
      .slice(0, 2)
      .join(' | ');
    process.stderr.write(`s3rver: ${err.status ?? 500} ${what}: ${first}\n`);
  });
  const { port } = await server.run();
  process.stdout.write(`${JSON.stringify({ port })}\n`);
  // An orderly exit, so that --cpu-prof writes its profile.
  process.once('SIGTERM', () => process.exit(0));
}

// ---------------------------------------------------------------------------------------------
// Balancer

/**
 * A round-robin HTTP balancer in a child process: each request, even on one keep-alive
 * connection, goes to the next upstream in turn. Resolves with `{ url, pid, close }`; close()
 * resolves with its tallies: `{ requests: [per upstream], statuses: {code: count}, errors }`.
 */
export async function startBalancer(urls, { nodeFlags = [] } = {}) {
  const proc = await startChild('balancer', urls, nodeFlags);
  return {
    url: `http://127.0.0.1:${proc.port}`,
    pid: proc.child.pid,
    stderr: proc.stderr,
    async close() {
      const text = await proc.stop();
      try {
        return JSON.parse(text.split('\n').at(-1));
      } catch {
        return null;
      }
    },
  };
}

/** Hop-by-hop headers: a proxy never forwards them. */
const HOP = new Set([
  'connection',
  'keep-alive',
  'proxy-connection',
  'transfer-encoding',
  'upgrade',
  'te',
  'trailer',
]);

function forwardable(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers)) if (!HOP.has(k) && v !== undefined) out[k] = v;
  return out;
}

async function runBalancer(upstreams) {
  const targets = upstreams.map((u) => new URL(u));
  const agents = targets.map(() => new Agent({ keepAlive: true, maxSockets: 256 }));
  const tallies = { requests: targets.map(() => 0), statuses: {}, errors: 0 };
  let next = 0;
  const server = createServer((req, res) => {
    const i = next++ % targets.length;
    tallies.requests[i]++;
    const target = targets[i];
    const upstream = request(
      {
        host: target.hostname,
        port: target.port,
        method: req.method,
        path: req.url,
        headers: {
          ...forwardable(req.headers),
          host: req.headers.host ?? target.host,
          // As production balancers do; the servers trust it (serve --trust-proxy loopback).
          'x-forwarded-for': [req.headers['x-forwarded-for'], req.socket.remoteAddress]
            .filter(Boolean)
            .join(', '),
        },
        agent: agents[i],
      },
      (up) => {
        const code = up.statusCode ?? 502;
        tallies.statuses[code] = (tallies.statuses[code] ?? 0) + 1;
        res.writeHead(code, up.statusMessage, forwardable(up.headers));
        up.pipe(res);
        up.on('aborted', () => res.destroy());
        up.on('error', () => res.destroy());
      },
    );
    upstream.on('error', () => {
      tallies.errors++;
      if (res.headersSent) res.destroy();
      else {
        res.writeHead(502, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ status: 'fail', message: 'Bad gateway' }));
      }
    });
    req.on('aborted', () => upstream.destroy());
    res.on('close', () => {
      if (!res.writableFinished) upstream.destroy();
    });
    req.pipe(upstream);
  });
  server.keepAliveTimeout = 60_000;
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  process.stdout.write(`${JSON.stringify({ port: server.address().port })}\n`);
  process.once('SIGTERM', () => {
    process.stdout.write(`${JSON.stringify(tallies)}\n`, () => process.exit(0));
  });
}

// ---------------------------------------------------------------------------------------------
// Run as a child

if (process.argv[1] && pathToFileURL(process.argv[1]).href === import.meta.url) {
  const [role, ...args] = process.argv.slice(2);
  // The parent holds our stdin: when it goes, so do we.
  process.stdin.on('end', () => process.exit(0));
  process.stdin.on('error', () => process.exit(0));
  process.stdin.resume();
  if (role === 's3rver') await runS3rver(args[0]);
  else if (role === 'balancer') await runBalancer(args);
  else {
    process.stderr.write('usage: node bench/backends.mjs s3rver DIR | balancer URL...\n');
    process.exit(2);
  }
}
