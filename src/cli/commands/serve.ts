import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { parseChunkSize, parseDuration } from '../args.js';
import type { RequestEntry } from '../../server/options.js';
import { backendOptions, describeBackends } from '../backends.js';
import { treatOutputAsLog, UsageError } from '../output.js';
import { MIN_SECRET_BYTES } from '../../shared/secrets.js';

interface ServeOptions {
  host: string;
  port: number;
  dataDir: string;
  adminUser?: string;
  adminPassword?: string;
  maxChunkSize?: number;
  maxChunks?: number;
  maxUploadsPerShare?: number;
  maxUploadsPerUser?: number;
  maxConnections?: number;
  maxConnectionsPerAddress?: number;
  minFree: number;
  tokenLifetime: number;
  quiet?: boolean;
  repair?: boolean;
  logFormat: 'pretty' | 'json';
  grace: number;
  publicUrl?: string;
  database?: string;
  storage?: string;
  s3Endpoint?: string;
  s3ForcePathStyle?: boolean;
  trustProxy?: string[];
}

function port(value: string): number {
  const n = Number(value);
  if (!/^\d+$/.test(value) || n > 65535)
    throw new InvalidArgumentError('expected a port number 0-65535');
  return n;
}

/** A positive whole number. */
function count(value: string): number {
  if (!/^\d+$/.test(value.trim()) || Number(value) < 1)
    throw new InvalidArgumentError('expected a positive whole number');
  return Number(value);
}

/** A size that may be 0 (no reserve). */
function sizeOrZero(value: string): number {
  return value.trim() === '0' ? 0 : parseChunkSize(value);
}

/** "7d", "12h", "30m", "90s" or seconds. */
function duration(value: string): number {
  try {
    return parseDuration(value, 'the duration')!;
  } catch {
    throw new InvalidArgumentError('expected a duration such as 7d, 12h or 3600');
  }
}

/** Addresses, CIDR ranges and proxy-addr's names (loopback, linklocal, uniquelocal). */
function proxyList(value: string): string[] {
  const list = value
    .split(',')
    .map((a) => a.trim())
    .filter(Boolean);
  // Loaded here, not at start-up: only `serve --trust-proxy` needs it.
  const proxyaddr = createRequire(import.meta.url)('proxy-addr') as typeof import('proxy-addr');
  try {
    proxyaddr.compile(list);
  } catch {
    throw new InvalidArgumentError(
      'expected addresses or CIDR ranges, comma-separated (10.0.0.0/8,192.168.1.5), or loopback',
    );
  }
  if (list.length === 0) throw new InvalidArgumentError('expected at least one address');
  return list;
}

/** An http(s) URL, kept without a trailing slash. */
function publicUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('expected a URL such as https://files.example.com');
  }
  // A user name or password there would be in every link URL handed out, for anyone to read. An
  // empty query or fragment (a trailing ? or #) has no search or hash, but is in href: links
  // were https://h/x?/l/<token>, the token in the query of another page.
  if (!/^https?:$/.test(url.protocol) || /[?#]/.test(url.href) || url.username || url.password)
    throw new InvalidArgumentError(
      'expected an http or https URL without user name, password, query or fragment',
    );
  // A path that starts with "//" made links' redirects (Location: //x/l/…) lead to another host.
  if (url.pathname.startsWith('//'))
    throw new InvalidArgumentError('expected a path that does not start with //');
  return url.href.replace(/\/+$/, '');
}

export function registerServe(program: Command): void {
  program
    .command('serve')
    .description('run a share server backed by a local data directory')
    .option('--host <host>', 'interface to listen on', '127.0.0.1')
    .option('--port <port>', 'port to listen on (0 picks a free one)', port, 5000)
    .option(
      '--data-dir <dir>',
      'where metadata, content and uploads are kept',
      process.env.FSHARE_DATA_DIR ?? './fshare-data',
    )
    .option('--admin-user <name>', 'administrator created on first start (env FSHARE_ADMIN_USER)')
    .option(
      '--admin-password <password>',
      'its password (prefer env FSHARE_ADMIN_PASSWORD: argv is visible in ps)',
    )
    .option(
      '--max-chunk-size <size>',
      'largest chunk accepted (default: no limit but free space and quotas)',
      parseChunkSize,
    )
    .option('--max-chunks <n>', 'most chunks in one upload (default 100000)', count)
    .option(
      '--max-uploads-per-share <n>',
      'unfinished uploads one share may have (default 8)',
      count,
    )
    .option(
      '--max-uploads-per-user <n>',
      'unfinished uploads one user may have (default 64)',
      count,
    )
    .option('--max-connections <n>', 'open connections in total (default 4096)', count)
    .option(
      '--max-connections-per-address <n>',
      'open connections from one client address (default 128)',
      count,
    )
    .addOption(
      new Option(
        '--min-free <size>',
        "free space kept on the data directory's disk: uploads that would use it get 507",
      )
        .argParser(sizeOrZero)
        .default(256 * 1024 * 1024, '256m'),
    )
    .addOption(
      new Option('--token-lifetime <duration>', 'how long issued tokens stay valid')
        .argParser(duration)
        .default(7 * 86400, '7d'),
    )
    .option(
      '--repair',
      'start even if the metadata journal is damaged: keep every valid entry, move the journal aside',
    )
    .option(
      '--public-url <url>',
      'base of the share-link URLs handed out, when clients reach the server through a proxy',
      publicUrl,
    )
    .addOption(backendOptions.database())
    .addOption(backendOptions.storage())
    .addOption(backendOptions.s3Endpoint())
    .addOption(backendOptions.s3ForcePathStyle())
    .addOption(
      new Option(
        '--trust-proxy <addresses>',
        'load balancers in front (comma-separated addresses, CIDRs, or loopback): the client address comes from their X-Forwarded-For',
      )
        .env('FSHARE_TRUST_PROXY')
        .argParser(proxyList),
    )
    .option('-q, --quiet', 'no request log')
    .addOption(
      new Option('--log-format <format>', 'request log: one line per request, or one JSON object')
        .choices(['pretty', 'json'])
        .default('pretty'),
    )
    .addOption(
      new Option(
        '--grace <duration>',
        'on SIGINT/SIGTERM, how long transfers in progress may finish before they are cut',
      )
        .argParser(duration)
        .default(10, '10s'),
    )
    .addHelpText(
      'after',
      `
Environment: FSHARE_ADMIN_USER, FSHARE_ADMIN_PASSWORD (first start only), FSHARE_SECRET (JWT
signing secret; default: the database's, or generated into <data-dir>/secret), FSHARE_DATA_DIR,
FSHARE_DATABASE, FSHARE_STORAGE, FSHARE_S3_ENDPOINT; AWS_REGION, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_PROFILE (S3 credentials, or ~/.aws files); PGPASSWORD (or ~/.pgpass).

Examples:
  fshare serve                                   http://127.0.0.1:5000, data in ./fshare-data
  fshare serve --host 0.0.0.0 --port 8080 --data-dir /srv/fshare
  FSHARE_ADMIN_PASSWORD=s3cret fshare serve --admin-user alice
  fshare serve --database postgres://fshare@db/fshare --storage s3://bucket/fshare \\
    --s3-endpoint http://minio:9000 --s3-force-path-style     (several servers: docs/DEPLOY.md)`,
    )
    .action(async (opts: ServeOptions) => {
      treatOutputAsLog(); // a full disk under stdout or stderr never stops the server
      const secret = process.env.FSHARE_SECRET || undefined;
      if (secret !== undefined && Buffer.byteLength(secret) < MIN_SECRET_BYTES)
        throw new UsageError(
          `FSHARE_SECRET must be at least ${MIN_SECRET_BYTES} bytes (it signs every token; a short one can be guessed): make one with \`openssl rand -base64 48\`, or leave it unset`,
        );
      const dataDir = resolve(opts.dataDir);
      const notice = (line: string) => process.stderr.write(`${line}\n`);
      // Loaded on demand, so client commands do not pay for express, multer and lowdb.
      const { AdminNameError, createServer } = await import('../../server/index.js');
      const { DamagedMetadataError } = await import('../../server/store/index.js');
      const server = await createServer({
        dataDir,
        // The port first: when it is taken, nothing is created (no data directory, no admin).
        bind: { port: opts.port, host: opts.host },
        secret,
        adminUser: opts.adminUser ?? (process.env.FSHARE_ADMIN_USER || undefined), // empty: unset
        adminPassword: opts.adminPassword || process.env.FSHARE_ADMIN_PASSWORD || undefined, // empty: none
        maxChunkBytes: opts.maxChunkSize,
        minFreeBytes: opts.minFree,
        limits: {
          ...(opts.maxChunks && { maxChunksPerUpload: opts.maxChunks }),
          ...(opts.maxUploadsPerShare && { maxUploadsPerShare: opts.maxUploadsPerShare }),
          ...(opts.maxUploadsPerUser && { maxUploadsPerUser: opts.maxUploadsPerUser }),
          ...(opts.maxConnections && { maxConnections: opts.maxConnections }),
          ...(opts.maxConnectionsPerAddress && {
            maxConnectionsPerAddress: opts.maxConnectionsPerAddress,
          }),
        },
        tokenLifetimeSeconds: opts.tokenLifetime,
        publicUrl: opts.publicUrl,
        database: opts.database,
        storage: opts.storage,
        s3Endpoint: opts.s3Endpoint,
        s3ForcePathStyle: opts.s3ForcePathStyle,
        trustProxy: opts.trustProxy,
        repair: opts.repair,
        requestLog: opts.quiet ? undefined : requestLogger(opts.logFormat),
        notice,
      }).catch((err: unknown) => {
        // Damaged metadata is one clear message with the way out (exit 1), not a stack trace.
        if (err instanceof DamagedMetadataError) throw new Error(err.message);
        if (err instanceof AdminNameError) throw new UsageError(err.message);
        throw bindError(err, opts);
      });
      const { url } = await server.listen(opts.port, opts.host);
      if (server.generatedAdmin) {
        const { username, password, file } = server.generatedAdmin;
        process.stdout.write(
          `Created administrator "${username}" with password: ${password}\n` +
            `(also kept in ${file}, readable only by you; change it with fshare passwd,\n` +
            ` then delete that file)\n`,
        );
      }
      process.stdout.write(`Listening on ${url}  (${describeBackends(opts, dataDir)})\n`);

      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) return;
        stopping = true;
        notice(
          `${signal}: no new connections; transfers in progress have ${opts.grace}s to finish`,
        );
        server.close({ graceMs: opts.grace * 1000 }).then(
          () => process.exit(0),
          (err: unknown) => {
            notice(`fshare serve: ${(err as Error).message}`);
            process.exit(1);
          },
        );
      };
      process.on('SIGINT', () => stop('SIGINT'));
      process.on('SIGTERM', () => stop('SIGTERM'));
    });
}

/** The request log: `pretty` (one readable line) or `json` (one object per line). */
function requestLogger(format: 'pretty' | 'json') {
  return (e: RequestEntry) => {
    const line =
      format === 'json'
        ? JSON.stringify({ ...e, ms: Math.round(e.ms * 10) / 10 })
        : `${e.time} ${e.remote} ${e.method} ${e.path} ${e.status || '-'} ${e.bytes}B ${e.ms.toFixed(1)}ms` +
          (e.aborted ? ' cut short' : '');
    process.stderr.write(`${line}\n`);
  };
}

/** A port that cannot be had, in words (no stack trace). */
function bindError(err: unknown, opts: ServeOptions): unknown {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  const where = `${opts.host}:${opts.port}`;
  if (code === 'EADDRINUSE')
    return new Error(`${where} is already in use (pick another with --port, or stop what uses it)`);
  if (code === 'EACCES')
    return new Error(`not allowed to listen on ${where} (ports below 1024 need privileges)`);
  if (code === 'EADDRNOTAVAIL') return new Error(`${opts.host} is not an address of this machine`);
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN')
    return new Error(`--host ${opts.host} is not an address, nor a name that resolves to one`);
  return err;
}
