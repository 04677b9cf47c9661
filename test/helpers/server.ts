import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer, type FshareServer } from '../../src/server/index.js';
import type { ServerOptions } from '../../src/server/options.js';

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
  const server = await createServer({
    notice,
    adminUser: ADMIN.username,
    adminPassword: ADMIN.password,
    // A small reserve, so the suite also runs on a nearly full disk; tests of the reserve set it.
    minFreeBytes: 16 * 1024 * 1024,
    ...options,
    dataDir,
  });
  const { url } = await server.listen(0, '127.0.0.1');
  return {
    url,
    dataDir,
    server,
    async close(removeData = true) {
      await server.close();
      if (secondPasses.length)
        throw new Error(
          `sha256 was not computed while the bytes arrived: ${secondPasses.join('; ')}`,
        );
      if (removeData) await rm(dataDir, { recursive: true, force: true });
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
