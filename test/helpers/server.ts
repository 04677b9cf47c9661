import { mkdtemp, readdir, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Client } from 'pg';
import { expect, inject } from 'vitest';
import { holdAt } from '../../src/server/faults.js';
import { createServer, type FshareServer } from '../../src/server/index.js';
import type { ServerOptions } from '../../src/server/options.js';
import { startBalancer, type Balancer } from './balancer.js';
import { walkFiles } from './http.js';
import { createDatabase } from './postgres.js';
import { createBucket } from './s3.js';

/**
 * Which configuration the server suite runs in (vitest.config.ts projects): `embedded` (lowdb
 * and files in the data directory), `postgres-s3` (metadata in PostgreSQL, content in s3rver),
 * or `two-servers` (two servers on one PostgreSQL database and bucket, behind a round-robin
 * balancer, so consecutive requests reach different servers).
 */
export const BACKEND = (process.env.FSHARE_TEST_BACKEND ?? 'embedded') as
  'embedded' | 'postgres-s3' | 'two-servers';

/** The database and bucket of each data directory, so that a restart finds its data again. */
const backends = new Map<string, { database: string; storage: string }>();

async function backendFor(dataDir: string): Promise<Partial<ServerOptions>> {
  if (BACKEND === 'embedded') return {};
  let b = backends.get(dataDir);
  if (!b) {
    b = {
      database: await createDatabase(inject('pgAdminUrl')),
      storage: await createBucket(inject('s3Endpoint')),
    };
    backends.set(dataDir, b);
  }
  return { ...b, s3Endpoint: inject('s3Endpoint'), s3ForcePathStyle: true };
}

export const ADMIN = { username: 'admin', password: 'admin-password-123' };

export interface TestServer {
  url: string;
  /**
   * The first server itself, not the balancer in front of it (two-servers): for tests of one
   * server's connections (raw sockets, slow clients), which a balancer would answer instead.
   */
  direct: string;
  dataDir: string;
  /** With PostgreSQL (the postgres-s3 and two-servers configurations): its URL. */
  database?: string;
  /** With S3: `s3://BUCKET`, and the endpoint of its server. */
  storage?: string;
  s3Endpoint?: string;
  server: FshareServer;
  /** Stops the server; the data directory is kept unless `removeData` is true. */
  close(removeData?: boolean): Promise<void>;
}

/** Starts a real fshare server on an ephemeral loopback port with a fresh temporary data dir. */
export async function startServer(options: Partial<ServerOptions> = {}): Promise<TestServer> {
  const dataDir = options.dataDir ?? (await mkdtemp(join(tmpdir(), 'fshare-test-')));
  // Notices are printed; one that says the server read content twice fails the closing test.
  const secondPasses: string[] = [];
  const notice = (line: string) => {
    if (/recomputed/.test(line)) secondPasses.push(line);
    process.stderr.write(`${line}\n`);
  };
  const base: ServerOptions = {
    notice,
    adminUser: ADMIN.username,
    adminPassword: ADMIN.password,
    // A small reserve, so the suite also runs on a nearly full disk; tests of the reserve set it.
    minFreeBytes: 16 * 1024 * 1024,
    ...(await backendFor(dataDir)),
    ...options,
    // With S3, content a share let go of is removed at once, so that tests can see it gone; the
    // wait that keeps it for downloads already begun is tested in two-servers.test.ts.
    limits: { removedContentKeepMs: 0, ...options.limits },
    dataDir,
  };
  // Behind the balancer, each server learns the client's address from X-Forwarded-For.
  if (BACKEND === 'two-servers') base.trustProxy = ['127.0.0.1'];
  const server = await createServer(base);
  let { url } = await server.listen(0, '127.0.0.1');
  const direct = url;
  // The second server of `two-servers`: same database and bucket, its own temp space.
  let second: { server: FshareServer; dataDir: string } | undefined;
  let balancer: Balancer | undefined;
  if (BACKEND === 'two-servers') {
    const otherDir = `${dataDir}-second`;
    const other = await createServer({ ...base, dataDir: otherDir });
    second = { server: other, dataDir: otherDir };
    const { url: otherUrl } = await other.listen(0, '127.0.0.1');
    balancer = await startBalancer([url, otherUrl]);
    url = balancer.url;
  }
  return {
    url,
    direct,
    dataDir,
    database: base.database,
    storage: base.storage,
    s3Endpoint: base.s3Endpoint,
    server,
    async close(removeData = true) {
      await balancer?.close();
      await Promise.all([server.close(), second?.server.close()]);
      if (secondPasses.length)
        throw new Error(
          `sha256 was not computed while the bytes arrived: ${secondPasses.join('; ')}`,
        );
      if (removeData) {
        await rm(dataDir, { recursive: true, force: true });
        if (second) await rm(second.dataDir, { recursive: true, force: true });
      }
    },
  };
}

/**
 * Another server on `srv`'s database (or `database`, a proxy in front of it) and bucket, with a
 * data directory of its own, listening on an ephemeral loopback port: for tests that act on
 * one of two servers themselves. With the embedded store there is nothing to share. The caller
 * closes it (before `srv`). `limits` change its limits' defaults.
 */
export async function startSibling(
  srv: TestServer,
  name: string,
  database = srv.database,
  limits: ServerOptions['limits'] = {},
): Promise<{ server: FshareServer; url: string }> {
  const server = await createServer({
    dataDir: await mkdtemp(join(tmpdir(), `fshare-${name}-`)),
    database,
    storage: srv.storage,
    s3Endpoint: srv.s3Endpoint,
    s3ForcePathStyle: true,
    minFreeBytes: 16 * 1024 * 1024,
    limits: { removedContentKeepMs: 0, ...limits },
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return { server, url };
}

/** Signs in and returns the bearer token. */
export async function login(url: string, username: string, password: string): Promise<string> {
  const res = await fetch(`${url}/users/login`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ username, password }),
  });
  if (res.status !== 200) throw new Error(`login ${username}: HTTP ${res.status}`);
  const body = (await res.json()) as { auth_token: string };
  return body.auth_token;
}

/** Every key in the test server's bucket, or null when its content is in files. */
async function bucketKeys(srv: TestServer): Promise<string[] | null> {
  if (!srv.storage) return null;
  const { S3Client, ListObjectsV2Command } = await import('@aws-sdk/client-s3');
  const client = new S3Client({ endpoint: srv.s3Endpoint, forcePathStyle: true });
  const bucket = srv.storage.replace(/^s3:\/\//, '').split('/')[0]!;
  const keys: string[] = [];
  try {
    let token: string | undefined;
    do {
      const page = await client.send(
        new ListObjectsV2Command({ Bucket: bucket, ContinuationToken: token }),
      );
      for (const o of page.Contents ?? []) keys.push(o.Key!);
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  } finally {
    client.destroy();
  }
  return keys;
}

/**
 * The names of the stored content objects of a share (or of every share): files in
 * `<dataDir>/content`, or objects under `content/` in the bucket. Both are named
 * `<share id>.<something new for each content>`.
 */
export async function storedContent(srv: TestServer, shareId = ''): Promise<string[]> {
  const keys = await bucketKeys(srv);
  const names =
    keys === null
      ? await readdir(join(srv.dataDir, 'content')).catch(() => [] as string[])
      : keys.filter((k) => k.startsWith('content/')).map((k) => k.slice('content/'.length));
  return names.filter((n) => n.startsWith(shareId));
}

/**
 * The unfinished uploads the storage holds for a share (or every share), one name each
 * (`<share id>.<key>` for files, `<share id>/<key>` in a bucket), leaving out records of
 * finished uploads; and whether any chunk bytes of them are stored.
 */
export async function storedUploads(srv: TestServer, shareId = ''): Promise<string[]> {
  const keys = await bucketKeys(srv);
  if (keys === null) {
    const dir = join(srv.dataDir, 'uploads');
    const out: string[] = [];
    for (const name of await readdir(dir).catch(() => [] as string[])) {
      if (!name.startsWith(shareId)) continue;
      const inside = await readdir(join(dir, name)).catch(() => [] as string[]);
      if (inside.some((f) => f !== 'done')) out.push(name);
    }
    return out;
  }
  const uploads = new Set<string>();
  for (const k of keys) {
    const m = /^uploads\/([^/]+)\/([^/]+)\//.exec(k);
    if (m && m[1]!.startsWith(shareId)) uploads.add(`${m[1]}/${m[2]}`);
  }
  return [...uploads];
}

/**
 * Temporary files of requests in progress (chunk bodies), on every server of the test (with
 * two servers, the second one's data directory is `<dataDir>-second`): none once every request
 * is done.
 */
export async function incomingFiles(srv: TestServer): Promise<string[]> {
  const files = await walkFiles(join(srv.dataDir, 'incoming'));
  if (BACKEND === 'two-servers')
    files.push(...(await walkFiles(join(`${srv.dataDir}-second`, 'incoming'))));
  return files;
}

/**
 * Whether bytes of a chunk without layout fields (not the last of its upload) are arriving for
 * share `shareId`: in its staging file in the upload's directory (files), or in the temp file of
 * an incoming chunk (S3; with two servers, on either server). Once they are, the server has
 * checked the request's caller and share and is reading its body.
 */
export async function chunkArriving(srv: TestServer, shareId: string): Promise<boolean> {
  const files =
    BACKEND === 'embedded'
      ? (await walkFiles(join(srv.dataDir, 'uploads'))).filter(
          (f) => f.includes(`/${shareId}.`) && /\/s\.[0-9a-f]+$/.test(f),
        )
      : await incomingFiles(srv);
  const sizes = await Promise.all(
    files.map((f) =>
      stat(f).then(
        (s) => s.size,
        () => 0,
      ),
    ),
  );
  return sizes.some((size) => size > 0);
}

/**
 * Everything the server keeps as metadata, as text: db.json and db.journal, or every table of
 * its PostgreSQL database as JSON. For checks that no secret (a password, a link's token) is
 * stored.
 */
export async function metadataText(srv: TestServer): Promise<string> {
  if (!srv.database) {
    const read = (f: string) => readFile(join(srv.dataDir, f), 'utf8').catch(() => '');
    return (await read('db.json')) + (await read('db.journal'));
  }
  const { default: pg } = await import('pg');
  const client = new pg.Client({ connectionString: srv.database });
  await client.connect();
  try {
    const tables = await client.query<{ table_name: string }>(
      "SELECT table_name FROM information_schema.tables WHERE table_schema = 'public'",
    );
    let text = '';
    for (const { table_name } of tables.rows) {
      const rows = await client.query<{ j: string | null }>(
        `SELECT json_agg(t)::text AS j FROM "${table_name.replace(/"/g, '""')}" t`,
      );
      text += `${table_name}: ${rows.rows[0]?.j ?? '[]'}\n`;
    }
    return text;
  } finally {
    await client.end();
  }
}

/**
 * Starts `request` (an HTTP request, a server's start) and holds it at the fault point `point` (src/server/faults.ts holdAt); there
 * terminates the one PostgreSQL connection holding advisory locks in `db`'s database (the held
 * task's lock), runs `meanwhile` (another server taking the lock), and lets the request go on.
 * Returns its answer. A request answered before it reaches `point` fails the test.
 */
export async function loseLockAt<T>(
  db: Client,
  point: string,
  request: () => Promise<T>,
  meanwhile: () => Promise<void>,
): Promise<T> {
  let reached!: () => void;
  const atHold = new Promise<void>((done) => (reached = done));
  let resume!: () => void;
  const resumed = new Promise<void>((done) => (resume = done));
  const cancel = holdAt(point, () => {
    reached();
    return resumed;
  });
  const answer = request();
  try {
    await Promise.race([
      atHold,
      answer.then((res) => {
        const status = (res as { status?: unknown } | null)?.status;
        throw new Error(
          `the request ended${status === undefined ? '' : ` (${String(status)})`} before it reached ${point}`,
        );
      }),
    ]);
    // Only the held task holds advisory locks in this database (all on its one connection),
    // but for the servers' own, shared, that says they are running (store/postgres.ts).
    const { rows } = await db.query<{ pid: number }>(
      `SELECT DISTINCT pid FROM pg_locks
        WHERE locktype = 'advisory' AND granted AND mode = 'ExclusiveLock'
          AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
    );
    expect(rows).toHaveLength(1);
    await db.query('SELECT pg_terminate_backend($1)', [rows[0]!.pid]);
    await meanwhile();
  } finally {
    cancel();
    resume();
  }
  return answer;
}
