import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { createServer, type FshareServer } from '../../src/server/index.js';
import type { ServerOptions } from '../../src/server/options.js';
import { startBalancer, type Balancer } from './balancer.js';
import { createDatabase } from './postgres.js';
import { createBucket } from './s3.js';

/**
 * Which configuration the server suite runs in (vitest.config.ts projects): `embedded` (lowdb
 * and files in the data directory), `postgres-s3` (metadata in PostgreSQL, content in s3rver),
 * or `two-servers` (two servers on one PostgreSQL database and bucket, behind a round-robin
 * balancer, so consecutive requests reach different servers).
 */
export const BACKEND = (process.env.FSHARE_TEST_BACKEND ?? 'embedded') as
  | 'embedded'
  | 'postgres-s3'
  | 'two-servers';

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
  dataDir: string;
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
    dataDir,
  };
  const server = await createServer(base);
  let { url } = await server.listen(0, '127.0.0.1');
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
    dataDir,
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
