import { randomBytes } from 'node:crypto';
import { rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { Client } from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { BIN, cleanEnv, createCli, signIn, startServe, tempDir } from '../helpers/cli.js';
import { startPgbouncer, type PoolMode, type Pooler } from '../helpers/pgbouncer.js';
import { createDatabase, startPostgres, type PgCluster } from '../helpers/postgres.js';

/**
 * `fshare serve --database` through a connection pooler (Debian's pgbouncer in front of a
 * throwaway cluster). Share locks are session advisory locks held on one connection for a task's
 * length, so a pooler that hands each transaction to any backend breaks them; a session pooler
 * keeps them.
 */
let pg: PgCluster;
const cleanup: (() => Promise<unknown>)[] = [];

beforeAll(async () => {
  pg = await startPostgres();
}, 180_000);

afterAll(async () => {
  for (const task of cleanup.reverse()) await task().catch(() => undefined);
  await pg?.stop();
});

async function pooler(database: string, mode: PoolMode): Promise<Pooler> {
  const started = await startPgbouncer(database, mode);
  cleanup.push(() => started.stop());
  return started;
}

/** The tables in `database`, asked directly (not through a pooler). */
async function tables(database: string): Promise<string[]> {
  const client = new Client({ connectionString: database });
  await client.connect();
  try {
    const { rows } = await client.query<{ name: string }>(
      "SELECT tablename AS name FROM pg_tables WHERE schemaname = 'public'",
    );
    return rows.map((r) => r.name);
  } finally {
    await client.end();
  }
}

describe('fshare serve behind a connection pooler', () => {
  // Property: two servers never hold one share's lock at once. Through pgbouncer in transaction
  // mode the server started and served: the lock of a chunk's task stayed on a backend the
  // pooler then gave to other clients, whose pg_advisory_lock of that share was granted at once
  // (both held it), while the task's unlock ran on another backend ("you don't own a lock") and
  // the next replace of the share waited for good. Such a pooler is now refused at start, before
  // the schema is touched: one line, exit 1. Statement mode multiplexes the same way.
  it.each(['transaction', 'statement'] as const)(
    'pool_mode = %s is refused: one line saying to use session pooling or a direct connection, exit 1, the database untouched',
    async (mode) => {
      const database = await createDatabase(pg.adminUrl);
      const pooled = await pooler(database, mode);
      const dataDir = await tempDir('pooler');
      cleanup.push(() => rm(dataDir, { recursive: true, force: true }));
      const child = execa(
        'node',
        [BIN, 'serve', '--port', '0', '--data-dir', dataDir, '--database', pooled.url],
        { env: cleanEnv(), extendEnv: false, reject: false, stdin: 'ignore' },
      );
      // A server that starts (as before the check) is stopped at once, so the test fails fast.
      child.stdout.on('data', (d: Buffer) => {
        if (d.toString().includes('Listening on')) child.kill('SIGKILL');
      });
      const res = await child;
      const where = new URL(pooled.url).host;
      expect(res.stderr.trim().split('\n'), res.stderr).toEqual([
        `fshare: PostgreSQL at ${where}: its connections do not keep a session of their own ` +
          '(a connection pooler in transaction or statement mode, such as pgbouncer with ' +
          'pool_mode = transaction): fshare holds its share locks in sessions, so every server ' +
          'could take the same lock; use session pooling (pgbouncer: pool_mode = session) or ' +
          'connect to PostgreSQL directly',
      ]);
      expect(res.exitCode).toBe(1);
      expect(res.stdout).not.toMatch(/Listening/);
      expect(await tables(database)).toEqual([]);
    },
    180_000,
  );

  // Property: the check never refuses a pooler that keeps sessions. pgbouncer in session mode
  // gives each client connection one backend for its life: the server starts, and chunked,
  // parallel uploads (each chunk's task under the share's lock), a replace and a download work.
  it('pool_mode = session serves: an upload in parallel chunks, a replace and downloads', async () => {
    const database = await createDatabase(pg.adminUrl);
    const pooled = await pooler(database, 'session');
    const server = await startServe({ env: { FSHARE_DATABASE: pooled.url } });
    cleanup.push(() => server.stop());
    expect(server.stdout()).toContain(`metadata: postgres://${new URL(pooled.url).host}/`);
    const cli = await createCli();
    await signIn(cli, server.url);
    const dir = await tempDir('pooler-files');
    cleanup.push(() => rm(dir, { recursive: true, force: true }));
    const first = randomBytes(3 * 1024 * 1024 + 5);
    const second = randomBytes(1024 * 1024 + 7);
    await writeFile(join(dir, 'first.bin'), first);
    await writeFile(join(dir, 'second.bin'), second);

    const up = await cli.run(['upload', '--chunk-size', '512k', join(dir, 'first.bin')]);
    expect(up.exitCode, up.stderr).toBe(0);
    const id = up.stdout.split(/\s+/)[0]!;
    const got = await cli.runBinary(['get', id, '-o', '-']);
    expect(got.exitCode, got.stderr).toBe(0);
    expect(got.stdout.equals(first)).toBe(true);

    const replaced = await cli.run([
      'replace',
      '--chunk-size',
      '256k',
      id,
      join(dir, 'second.bin'),
    ]);
    expect(replaced.exitCode, replaced.stderr).toBe(0);
    const again = await cli.runBinary(['get', id, '-o', '-']);
    expect(again.exitCode, again.stderr).toBe(0);
    expect(again.stdout.equals(second)).toBe(true);
  }, 180_000);
});

describe('fshare serve on a database its user may not make tables in', () => {
  // Found from outside: PostgreSQL 15 and later let only a database's owner create tables in
  // `public`, and a start as another user stopped with "permission denied for schema public",
  // which does not say what to grant. Property: the line names the user and the two ways out,
  // and after either the same command starts.
  it('one line naming the grant, exit 1; after GRANT CREATE the start goes on', async () => {
    const database = await createDatabase(pg.adminUrl);
    const role = `app_${randomBytes(4).toString('hex')}`;
    const admin = new Client({ connectionString: database });
    await admin.connect();
    try {
      await admin.query(`CREATE ROLE ${role} LOGIN`);
    } finally {
      await admin.end();
    }
    const url = new URL(database);
    url.username = role;
    const dataDir = await tempDir('no-create');
    cleanup.push(() => rm(dataDir, { recursive: true, force: true }));
    const start = () =>
      execa(
        'node',
        [BIN, 'serve', '--port', '0', '--data-dir', dataDir, '--database', url.toString()],
        { env: cleanEnv(), extendEnv: false, reject: false, stdin: 'ignore', timeout: 60_000 },
      );
    const refused = await start();
    expect(refused.exitCode).toBe(1);
    expect(refused.stderr.trim().split('\n')).toEqual([
      `fshare: PostgreSQL at ${url.host}: permission denied for schema public (fshare makes its tables at the first start: make ${role} the database's owner, or GRANT CREATE ON SCHEMA public TO ${role})`,
    ]);
    expect(await tables(database)).toEqual([]);
    const owner = new Client({ connectionString: database });
    await owner.connect();
    try {
      await owner.query(`GRANT CREATE ON SCHEMA public TO ${role}`);
    } finally {
      await owner.end();
    }
    const server = await startServe({ env: { FSHARE_DATABASE: url.toString() } });
    cleanup.push(() => server.stop());
    expect(await tables(database)).toContain('fshare_users');
  }, 120_000);
});
