import { spawn, spawnSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, rmSync } from 'node:fs';
import { appendFile, chown, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Client } from 'pg';

export interface PgCluster {
  /** postgres://postgres@127.0.0.1:<port>/postgres (trust authentication, superuser). */
  adminUrl: string;
  /** Stops the cluster at once (no shutdown checkpoint) and removes its directory. */
  stop(): Promise<void>;
}

interface Binaries {
  initdb: string;
  pgCtl: string;
}

const NOT_INSTALLED =
  "PostgreSQL is not installed (no initdb and pg_ctl under /usr/lib/postgresql/*/bin or on PATH): install Debian's postgresql package";

/** The newest Debian PostgreSQL (/usr/lib/postgresql/<version>/bin), else the one on PATH. */
function findBinaries(): Binaries {
  const root = '/usr/lib/postgresql';
  const versions = existsSync(root)
    ? readdirSync(root)
        .filter((v) => /^\d+(\.\d+)?$/.test(v))
        .sort((a, b) => Number(b) - Number(a))
    : [];
  for (const version of versions) {
    const bin = join(root, version, 'bin');
    const found = { initdb: join(bin, 'initdb'), pgCtl: join(bin, 'pg_ctl') };
    if (existsSync(found.initdb) && existsSync(found.pgCtl)) return found;
  }
  const which = (name: string) =>
    spawnSync('sh', ['-c', `command -v ${name}`], { encoding: 'utf8' }).stdout.trim();
  const onPath = { initdb: which('initdb'), pgCtl: which('pg_ctl') };
  if (onPath.initdb && onPath.pgCtl) return onPath;
  throw new Error(NOT_INSTALLED);
}

/** initdb and postgres refuse to run as root: then they run as the `postgres` system user. */
export const asRoot = () => process.getuid?.() === 0;

export function postgresUser(): { uid: number; gid: number } {
  const id = (flag: string) => spawnSync('id', [flag, 'postgres'], { encoding: 'utf8' });
  const uid = id('-u');
  const gid = id('-g');
  if (uid.status !== 0 || gid.status !== 0)
    throw new Error(
      `running as root, PostgreSQL must run as the "postgres" user, which does not exist: ${NOT_INSTALLED}`,
    );
  return { uid: Number(uid.stdout.trim()), gid: Number(gid.stdout.trim()) };
}

/** Runs a PostgreSQL program (as `postgres` when we are root); rejects with its output. */
function run(program: string, args: string[], cwd: string): Promise<void> {
  const [command, argv] = asRoot()
    ? ['runuser', ['-u', 'postgres', '--', program, ...args]]
    : [program, args];
  return new Promise((resolve, reject) => {
    const child = spawn(command, argv, { cwd, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d: Buffer) => (output += d.toString()));
    child.stderr.on('data', (d: Buffer) => (output += d.toString()));
    child.on('error', (err) =>
      reject(new Error(`${program}: ${err.message}${asRoot() ? '' : `; ${NOT_INSTALLED}`}`)),
    );
    child.on('close', (code) => {
      if (code === 0) resolve();
      else
        reject(new Error(`${program} ${args.join(' ')} failed (exit ${code}): ${output.trim()}`));
    });
  });
}

export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Clusters still running, stopped when the test process exits without calling stop(). */
const running = new Map<string, () => void>();
let exitHook = false;

function stopAtExit(dataDir: string, stopNow: () => void): void {
  running.set(dataDir, stopNow);
  if (exitHook) return;
  exitHook = true;
  process.once('exit', () => {
    for (const stop of running.values()) stop();
  });
}

/**
 * Starts a throwaway PostgreSQL cluster in a fresh temporary directory, listening only on
 * 127.0.0.1 (no unix socket) on a free port, with trust authentication for 127.0.0.1 only and
 * the superuser `postgres`.
 */
export async function startPostgres(): Promise<PgCluster> {
  const bin = findBinaries();
  const owner = asRoot() ? postgresUser() : null;
  const dir = await mkdtemp(join(tmpdir(), 'fshare-pg-'));
  try {
    if (owner) await chown(dir, owner.uid, owner.gid);
    const dataDir = join(dir, 'data');
    // --no-sync: a throwaway cluster need not survive a crash of the machine.
    await run(
      bin.initdb,
      ['-D', dataDir, '-U', 'postgres', '-A', 'trust', '-E', 'UTF8', '--locale=C', '--no-sync'],
      dir,
    );
    await writeFile(
      join(dataDir, 'pg_hba.conf'),
      '# TYPE  DATABASE  USER  ADDRESS       METHOD\nhost    all       all   127.0.0.1/32  trust\n',
    );
    return await startCluster(bin, dir, dataDir);
  } catch (err) {
    await rm(dir, { recursive: true, force: true });
    throw err;
  }
}

async function startCluster(bin: Binaries, dir: string, dataDir: string): Promise<PgCluster> {
  const log = join(dir, 'postgres.log');
  const conf = join(dataDir, 'postgresql.conf');
  const original = await readFile(conf, 'utf8');
  // Another process may take the free port before the server binds it: then try another.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    await writeFile(
      conf,
      original +
        `\nlisten_addresses = '127.0.0.1'\nport = ${port}\nunix_socket_directories = ''\n` +
        // fsync and synchronous_commit stay on (measured: a commit's fdatasync costs about
        // 0.1 ms here). Parallel test files each run servers with two pools of connections.
        `max_connections = 1000\n`,
    );
    try {
      await run(bin.pgCtl, ['-D', dataDir, '-l', log, '-w', '-t', '60', 'start'], dir);
    } catch (err) {
      const text = await readFile(log, 'utf8').catch(() => '');
      if (attempt < 5 && /could not bind|address already in use/i.test(text)) {
        await appendFile(log, `\n(retrying on another port)\n`);
        continue;
      }
      // pg_ctl may have given up waiting on a server that runs: it must not outlive us.
      await run(bin.pgCtl, ['-D', dataDir, '-m', 'immediate', 'stop'], dir).catch(() => undefined);
      throw new Error(`${(err as Error).message}\n${text.trim()}`);
    }
    // At exit, synchronously: the process is going away.
    const stopNow = () => {
      const [command, argv] = asRoot()
        ? ['runuser', ['-u', 'postgres', '--', bin.pgCtl]]
        : [bin.pgCtl, []];
      spawnSync(command, [...argv, '-D', dataDir, '-m', 'immediate', '-w', 'stop'], {
        cwd: dir,
        stdio: 'ignore',
      });
      rmSync(dir, { recursive: true, force: true });
    };
    stopAtExit(dataDir, stopNow);
    let stopped: Promise<void> | null = null;
    return {
      adminUrl: `postgres://postgres@127.0.0.1:${port}/postgres`,
      stop() {
        stopped ??= (async () => {
          running.delete(dataDir);
          await run(bin.pgCtl, ['-D', dataDir, '-m', 'immediate', '-w', 'stop'], dir).catch(
            () => undefined, // already stopped
          );
          await rm(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
    };
  }
}

/** Creates a database with a fresh unique name; returns its postgres:// URL. */
export async function createDatabase(adminUrl: string): Promise<string> {
  const name = `fshare_test_${randomBytes(8).toString('hex')}`;
  const client = new Client({ connectionString: adminUrl });
  await client.connect();
  try {
    await client.query(`CREATE DATABASE ${name}`);
  } finally {
    await client.end();
  }
  const url = new URL(adminUrl);
  url.pathname = `/${name}`;
  return url.toString();
}
