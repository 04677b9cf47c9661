import { InvalidArgumentError, Option } from 'commander';

/** `postgres://…` (or `postgresql://…`). */
function databaseUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError(
      'expected a URL such as postgres://fshare@db.example.com/fshare',
    );
  }
  if (!/^postgres(ql)?:$/.test(url.protocol))
    throw new InvalidArgumentError('expected a postgres:// URL');
  return value;
}

/** `s3://BUCKET[/PREFIX]`. */
function storageUrl(value: string): string {
  if (!/^s3:\/\/[^/\s]+(\/\S*)?$/.test(value))
    throw new InvalidArgumentError('expected s3://BUCKET or s3://BUCKET/PREFIX');
  return value;
}

/** An http(s) URL. */
function endpointUrl(value: string): string {
  let url: URL;
  try {
    url = new URL(value);
  } catch {
    throw new InvalidArgumentError('expected a URL such as http://minio.example.com:9000');
  }
  if (!/^https?:$/.test(url.protocol)) throw new InvalidArgumentError('expected an http(s) URL');
  return value;
}

/**
 * Where a server keeps metadata and content: the options `serve` and `admin export/import`
 * share. Each has an environment variable, so that a database password need not be in argv.
 */
export const backendOptions = {
  database: () =>
    new Option(
      '--database <url>',
      'metadata in PostgreSQL (postgres://USER@HOST/DB; password in PGPASSWORD or ~/.pgpass) instead of the data directory',
    )
      .env('FSHARE_DATABASE')
      .argParser(databaseUrl),
  storage: () =>
    new Option(
      '--storage <url>',
      'content in S3-compatible object storage (s3://BUCKET[/PREFIX]) instead of the data directory',
    )
      .env('FSHARE_STORAGE')
      .argParser(storageUrl),
  s3Endpoint: () =>
    new Option('--s3-endpoint <url>', 'the S3 API URL when it is not AWS (MinIO, Garage, R2…)')
      .env('FSHARE_S3_ENDPOINT')
      .argParser(endpointUrl),
  s3ForcePathStyle: () =>
    new Option('--s3-force-path-style', 'path-style S3 URLs (most S3 servers but AWS need them)'),
};

/** "data: DIR", or where metadata and content are, for the start-up line (no password). */
export function describeBackends(
  opts: { database?: string; storage?: string },
  dataDir: string,
): string {
  if (!opts.database && !opts.storage) return `data: ${dataDir}`;
  const parts: string[] = [];
  if (opts.database) {
    const url = new URL(opts.database);
    parts.push(`metadata: postgres://${url.host}${url.pathname}`);
  } else parts.push(`metadata: ${dataDir}`);
  parts.push(opts.storage ? `content: ${opts.storage}` : `content: ${dataDir}`);
  return parts.join(', ');
}
