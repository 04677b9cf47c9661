// An HTTP proxy for the client's tests: Debian's tinyproxy (package tinyproxy-bin, `.ci/run`),
// started on a free loopback port with a config of its own, logging every request it carries.
import { execa, type ResultPromise } from 'execa';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { networkInterfaces } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { closedPort, tempDir } from './cli.js';

export interface HttpProxy {
  /** `http://127.0.0.1:PORT` */
  url: string;
  port: number;
  /** What it carried so far, one `METHOD TARGET` each: `CONNECT host:port`, `GET http://…`. */
  requests(): Promise<string[]>;
  stop(): Promise<void>;
}

/** Starts tinyproxy; with `auth`, it asks for that user name and password (407 otherwise). */
export async function startProxy(
  options: { auth?: { user: string; password: string } } = {},
): Promise<HttpProxy> {
  const dir = await tempDir('proxy');
  const port = await closedPort();
  const log = join(dir, 'proxy.log');
  const lines = [
    `Port ${port}`,
    'Listen 127.0.0.1',
    'Timeout 600',
    'LogLevel Info',
    `LogFile "${log}"`,
    `PidFile "${join(dir, 'proxy.pid')}"`,
    'MaxClients 100',
    'Allow 127.0.0.1',
    'DisableViaHeader Yes',
    ...(options.auth ? [`BasicAuth ${options.auth.user} ${options.auth.password}`] : []),
  ];
  await writeFile(join(dir, 'proxy.conf'), `${lines.join('\n')}\n`);
  const child: ResultPromise = execa('tinyproxy', ['-d', '-c', join(dir, 'proxy.conf')], {
    reject: false,
    stdin: 'ignore',
  });
  let exited = false;
  void child.then(() => (exited = true));
  for (let i = 0; ; i++) {
    if (exited) throw new Error(`tinyproxy did not start: ${String((await child).stderr)}`);
    if (await listening(port)) break;
    if (i > 100) throw new Error('tinyproxy did not listen within 10 s');
    await sleep(100);
  }
  return {
    url: `http://127.0.0.1:${port}`,
    port,
    async requests() {
      const text = await readFile(log, 'latin1').catch(() => '');
      return [...text.matchAll(/Request \(file descriptor \d+\): (\S+) (\S+) HTTP/g)].map(
        (m) => `${m[1]} ${m[2]}`,
      );
    },
    async stop() {
      child.kill('SIGTERM');
      await child;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

function listening(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1');
    socket.once('connect', () => {
      socket.destroy();
      resolve(true);
    });
    socket.once('error', () => resolve(false));
  });
}

/**
 * An IPv4 address of this machine other than loopback: the client reaches a server on loopback
 * directly whatever the proxy variables say, so the tests' servers listen here.
 */
export function outsideAddress(): string {
  for (const addresses of Object.values(networkInterfaces()))
    for (const a of addresses ?? []) if (a.family === 'IPv4' && !a.internal) return a.address;
  throw new Error('this machine has no IPv4 address but loopback, which the proxy tests need');
}
