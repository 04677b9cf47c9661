import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chown, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { asRoot, freePort, postgresUser } from './postgres.js';

export type PoolMode = 'session' | 'transaction' | 'statement';

export interface Pooler {
  /** `url` with the pooler's address in place of PostgreSQL's. */
  url: string;
  /** Kills the pooler and removes its directory. */
  stop(): Promise<void>;
}

const NOT_INSTALLED =
  "pgbouncer is not installed (no /usr/sbin/pgbouncer and none on PATH): install Debian's pgbouncer package";

function findPgbouncer(): string {
  if (existsSync('/usr/sbin/pgbouncer')) return '/usr/sbin/pgbouncer';
  const onPath = spawnSync('sh', ['-c', 'command -v pgbouncer'], { encoding: 'utf8' }).stdout;
  if (onPath.trim()) return onPath.trim();
  throw new Error(NOT_INSTALLED);
}

/** Poolers still running, killed when the test process exits without calling stop(). */
const running = new Set<ChildProcess>();
let exitHook = false;

/**
 * Starts pgbouncer (Debian's) in the foreground in front of the PostgreSQL `url` names, in
 * `mode`, on a free loopback port, with its own ini in a fresh temporary directory and trust
 * authentication; resolves once it listens. As root it runs as `postgres` (it refuses root).
 */
export async function startPgbouncer(url: string, mode: PoolMode): Promise<Pooler> {
  const program = findPgbouncer();
  const target = new URL(url);
  const dir = await mkdtemp(join(tmpdir(), `fshare-pgbouncer-${mode}-`));
  const owner = asRoot() ? postgresUser() : null;
  if (owner) await chown(dir, owner.uid, owner.gid);
  const user = decodeURIComponent(target.username) || 'postgres';
  await writeFile(join(dir, 'users.txt'), `"${user}" ""\n`);
  if (!exitHook) {
    exitHook = true;
    process.once('exit', () => {
      for (const child of running) child.kill('SIGKILL');
    });
  }
  // Another process may take the free port before pgbouncer binds it: then try another.
  for (let attempt = 1; ; attempt++) {
    const port = await freePort();
    const ini = join(dir, 'pgbouncer.ini');
    await writeFile(
      ini,
      [
        '[databases]',
        `* = host=${target.hostname} port=${target.port || 5432}`,
        '[pgbouncer]',
        'listen_addr = 127.0.0.1',
        `listen_port = ${port}`,
        'unix_socket_dir =',
        'auth_type = trust',
        `auth_file = ${join(dir, 'users.txt')}`,
        `pool_mode = ${mode}`,
        // Room for every connection of the servers a test starts (each has two pools of 10).
        'default_pool_size = 50',
        'max_client_conn = 500',
        '',
      ].join('\n'),
    );
    if (owner) await chown(ini, owner.uid, owner.gid);
    const child = spawn(program, [...(owner ? ['-u', 'postgres'] : []), ini], {
      cwd: dir,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    running.add(child);
    let output = '';
    const listening = await new Promise<boolean>((resolve, reject) => {
      const seen = (d: Buffer) => {
        output += d.toString();
        if (/process up/.test(output)) resolve(true);
      };
      child.stdout!.on('data', seen);
      child.stderr!.on('data', seen);
      child.once('error', (err) => reject(new Error(`${program}: ${err.message}`)));
      child.once('exit', () => resolve(false));
    });
    if (!listening) {
      running.delete(child);
      if (attempt < 5 && /address already in use/i.test(output)) continue;
      await rm(dir, { recursive: true, force: true });
      throw new Error(`pgbouncer did not start: ${output.trim()}`);
    }
    const exited = new Promise<void>((done) => {
      if (child.exitCode !== null || child.signalCode !== null) done();
      else child.once('exit', () => done());
    });
    const pooled = new URL(url);
    pooled.hostname = '127.0.0.1';
    pooled.port = String(port);
    let stopped: Promise<void> | null = null;
    return {
      url: pooled.toString(),
      stop() {
        stopped ??= (async () => {
          child.kill('SIGKILL');
          await exited;
          running.delete(child);
          await rm(dir, { recursive: true, force: true });
        })();
        return stopped;
      },
    };
  }
}
