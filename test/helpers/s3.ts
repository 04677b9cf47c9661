import { fork, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CreateBucketCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';

/** The credentials s3rver checks signatures with, and a region; set them before opening storage. */
export const S3_TEST_ENV = {
  AWS_ACCESS_KEY_ID: 'S3RVER',
  AWS_SECRET_ACCESS_KEY: 'S3RVER',
  AWS_REGION: 'us-east-1',
};

export interface S3Server {
  endpoint: string;
  stop(): Promise<void>;
}

/** A request as s3rver received it (before it answered). */
export interface S3Request {
  method: string;
  url: string;
  headers: IncomingHttpHeaders;
}

export interface StartS3Options {
  /** Sees every request as it arrives, before s3rver answers it. */
  onRequest?: (req: S3Request) => void;
}

/**
 * s3rver in a process of its own, so that it can have OpenSSL's legacy provider: it makes the
 * continuation tokens of ListObjectsV2 with DES, which OpenSSL 3 otherwise refuses (every listing
 * that has a second page would fail with a 500). Plain CommonJS, run with `fork`.
 */
const CHILD_SOURCE = `
const S3rver = require(process.argv[1]);
const [directory, watch] = process.argv.slice(2);
// The parent went away (even killed): nothing else would stop this process.
process.on('disconnect', () => process.exit(0));
const server = new S3rver({ address: '127.0.0.1', port: 0, silent: true, directory });
server.run().then(
  (address) => {
    if (watch === '1')
      server.httpServer.on('request', (req) =>
        process.send({ t: 'request', method: req.method, url: req.url, headers: req.headers }),
      );
    process.send({ t: 'ready', port: address.port });
  },
  (err) => {
    process.stderr.write(String((err && err.stack) || err));
    process.exit(1);
  },
);
`;

const s3rverPath = createRequire(import.meta.url).resolve('s3rver');

/** Starts s3rver on 127.0.0.1, port 0, silent, in a fresh temp directory (removed at stop). */
export async function startS3(options: StartS3Options = {}): Promise<S3Server> {
  const directory = await mkdtemp(join(tmpdir(), 'fshare-s3rver-'));
  let child: ChildProcess;
  let port: number;
  try {
    ({ child, port } = await spawnS3rver(directory, options, ['--openssl-legacy-provider']).catch(
      // A Node built without OpenSSL's legacy provider: s3rver still runs (one-page listings).
      () => spawnS3rver(directory, options, []),
    ));
  } catch (err) {
    await rm(directory, { recursive: true, force: true });
    throw err;
  }
  let stopped: Promise<void> | undefined;
  return {
    endpoint: `http://127.0.0.1:${port}`,
    stop() {
      stopped ??= (async () => {
        if (child.exitCode === null && child.signalCode === null) {
          const exited = new Promise((resolve) => child.once('exit', resolve));
          child.kill('SIGTERM');
          await exited;
        }
        await rm(directory, { recursive: true, force: true });
      })();
      return stopped;
    },
  };
}

function spawnS3rver(
  directory: string,
  options: StartS3Options,
  execArgv: string[],
): Promise<{ child: ChildProcess; port: number }> {
  const child = fork('-e', [CHILD_SOURCE, s3rverPath, directory, options.onRequest ? '1' : '0'], {
    execArgv: [...execArgv],
    stdio: ['ignore', 'ignore', 'pipe', 'ipc'],
    env: { ...process.env, NODE_OPTIONS: '' },
  });
  let stderr = '';
  child.stderr!.on('data', (data: Buffer) => (stderr += data.toString()));
  return new Promise((resolve, reject) => {
    child.on('message', (m: { t: string; port?: number } & S3Request) => {
      if (m.t === 'ready') resolve({ child, port: m.port! });
      else if (m.t === 'request') options.onRequest?.(m);
    });
    child.once('exit', (code, signal) =>
      reject(new Error(`s3rver exited (${signal ?? code}) before it listened: ${stderr.trim()}`)),
    );
    child.once('error', reject);
  });
}

/** Creates a bucket with a fresh unique valid name (3–63 chars, lower case) and returns `s3://<name>`. */
export async function createBucket(endpoint: string): Promise<string> {
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const name = `fshare-test-${randomBytes(8).toString('hex')}`;
  const client = s3Client(endpoint);
  try {
    await client.send(new CreateBucketCommand({ Bucket: name }));
  } finally {
    client.destroy();
  }
  return `s3://${name}`;
}

/** A client of the test S3 server, with the credentials it checks. */
export function s3Client(endpoint: string): S3Client {
  return new S3Client({
    endpoint,
    forcePathStyle: true,
    region: S3_TEST_ENV.AWS_REGION,
    credentials: {
      accessKeyId: S3_TEST_ENV.AWS_ACCESS_KEY_ID,
      secretAccessKey: S3_TEST_ENV.AWS_SECRET_ACCESS_KEY,
    },
  });
}

/** The keys under `content/` in a bucket (`s3://NAME`), sorted, without that prefix. */
export async function contentKeys(endpoint: string, storage: string): Promise<string[]> {
  const client = s3Client(endpoint);
  try {
    const page = await client.send(
      new ListObjectsV2Command({ Bucket: storage.slice('s3://'.length), Prefix: 'content/' }),
    );
    return (page.Contents ?? []).map((o) => o.Key!.slice('content/'.length)).sort();
  } finally {
    client.destroy();
  }
}
