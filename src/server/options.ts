import type { Limits } from './limits.js';

export interface ServerOptions {
  /**
   * Where metadata (db.json), the signing secret, content and chunks live. Created 0700. With
   * `database` and `storage` both given, only temporary files (incoming chunks) are kept here.
   */
  dataDir: string;
  /**
   * `postgres://…`: metadata in PostgreSQL instead of `<dataDir>/db.json`, shared by every
   * server on the same database (docs/DEPLOY.md).
   */
  database?: string;
  /** `s3://BUCKET[/PREFIX]`: content in S3-compatible object storage instead of `<dataDir>`. */
  storage?: string;
  /** The S3 API's URL when it is not AWS (MinIO, Garage, R2, Ceph RGW…). */
  s3Endpoint?: string;
  /** Path-style S3 URLs (`ENDPOINT/BUCKET/KEY`), which most S3 servers but AWS need. */
  s3ForcePathStyle?: boolean;
  /**
   * JWT signing secret; when absent, the database's (with `database`: every server on it
   * shares one), else read from or generated into `<dataDir>/secret` (0600).
   */
  secret?: string;
  /** Token lifetime in seconds; default 7 days. */
  tokenLifetimeSeconds?: number;
  /** Largest accepted chunk in bytes (413 above it); default: no limit but free space and quota. */
  maxChunkBytes?: number;
  /** First-start administrator; without it, `admin` with a random password. */
  adminUser?: string;
  adminPassword?: string;
  /** Uploads are refused with 507 when they would leave less free space than this; 256 MiB. */
  minFreeBytes?: number;
  /** Start even if the metadata journal is damaged: keep every valid entry, move it aside. */
  repair?: boolean;
  /**
   * The base of the share-link URLs the server hands out (`https://files.example.com`), when
   * clients reach it through a proxy; default: the scheme and Host of the request.
   */
  publicUrl?: string;
  /**
   * The time, in ms since the epoch, for tokens and for the expiry of shares and links;
   * injectable for tests.
   */
  clock?: () => number;
  /**
   * Load balancers and proxies in front of the server (addresses, CIDR ranges, or `loopback`,
   * `linklocal`, `uniquelocal`): for a request from one of them, the client's address is taken
   * from `X-Forwarded-For`, for the per-address limits, link resumes and the request log; and
   * the per-address connection limit does not apply to them. Default: none.
   */
  trustProxy?: string[];
  /** Any of the limits of limits.ts, to change its default. */
  limits?: Partial<Limits>;
  /** Receives one line per request (method, path, status, ms); absent: no request log. */
  log?: (line: string) => void;
  /** Receives one entry per request, for structured logs; used instead of `log` when given. */
  requestLog?: (entry: RequestEntry) => void;
  /**
   * Binds this address before the data directory is touched, so a port in use fails with
   * nothing created; requests that come while the server opens its data get 503.
   */
  bind?: { port: number; host: string };
  /** Receives notices (a dropped torn journal entry, a repair, a failed background task);
   * default: `log`, else stderr. */
  notice?: (line: string) => void;
}

export const DEFAULT_TOKEN_LIFETIME_SECONDS = 7 * 24 * 3600;

/** One request, as the request log sees it. Paths never carry the query string. */
export interface RequestEntry {
  time: string;
  remote: string;
  method: string;
  path: string;
  /** 0 when no answer was sent (the client went away first). */
  status: number;
  /** Bytes sent to the client for this request (headers and body). */
  bytes: number;
  ms: number;
  /** The client went away before the response was complete. */
  aborted: boolean;
}
