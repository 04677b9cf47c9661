import { MAX_EXPIRY_SECONDS } from '../shared/duration.js';

/**
 * Every limit of the server and its default, in one table (docs/API.md, "Limits"). Those with a
 * `fshare serve` flag can be changed per server through ServerOptions.limits.
 */
export const LIMITS = {
  /**
   * Largest chunk (`--max-chunk-size`). Chunks stream to disk, so this need not be small: by
   * default there is none, and a whole file in one chunk (the reference's browser client) is
   * bounded only by free space and quota.
   */
  maxChunkBytes: Number.POSITIVE_INFINITY,
  /** Free space kept on the data directory's disk (`--min-free`): uploads that need it get 507. */
  minFreeBytes: 256 * 1024 * 1024,
  /**
   * The embedded store's `reserve` file: room to record removals (deleting a share, a link or a
   * user; revoking a token) on a disk something else filled to the last byte.
   */
  removalReserveBytes: 256 * 1024,
  /** Chunks of one upload (`--max-chunks`). */
  maxChunksPerUpload: 100_000,
  /** Unfinished uploads of one share (`--max-uploads-per-share`): more get 429. */
  maxUploadsPerShare: 8,
  /** Unfinished uploads of one user, all shares together (`--max-uploads-per-user`). */
  maxUploadsPerUser: 64,
  /** An unfinished upload nobody added to for this long is removed. */
  uploadIdleMs: 24 * 3600 * 1000,
  /** The record of a finished upload (which refuses its late chunks) is kept this long. */
  finishedUploadKeepMs: 48 * 3600 * 1000,
  /**
   * With S3, content that no share names any more (replaced, deleted, expired) is removed this
   * long after: a download another server had begun still gets the bytes it announced. Files
   * need no such wait (an open file stays readable once unlinked).
   */
  removedContentKeepMs: 5 * 60 * 1000,

  /** Longest expiry a share or link may be given (10 years); settings may lower it for users. */
  maxExpirySeconds: MAX_EXPIRY_SECONDS,
  /**
   * A ranged request that starts after byte 0, from the address that made a link's last counted
   * download within this time, continues that download and is not counted again.
   */
  linkResumeWindowMs: 30 * 60 * 1000,
  /** Failed link passwords per link and client address, per window. */
  linkPasswordFailures: { points: 10, seconds: 300 },

  /** Failed sign-ins per account and client address, per window. */
  loginFailuresPerAccountAndAddress: { points: 10, seconds: 300 },
  /** Failed sign-ins per account from anywhere: the longest a third party can lock it is 5 min. */
  loginFailuresPerAccount: { points: 50, seconds: 300 },
  /** Failed sign-ins per client address, all accounts together. */
  loginFailuresPerAddress: { points: 100, seconds: 300 },
  /** Password checks waiting for their turn (one hash at a time); beyond this, 503 with Retry-After. */
  passwordQueue: 32,

  /** Time for a client to send a request's headers. */
  headersTimeoutMs: 15_000,
  /** A connection that moves no byte for this long, in either direction, is closed. */
  idleTimeoutMs: 30_000,
  /** Open connections in total (`--max-connections`). */
  maxConnections: 4096,
  /** Open connections from one client address (`--max-connections-per-address`). */
  maxConnectionsPerAddress: 128,

  /** A share's file name, and an upload's dzuuid. */
  maxFileNameChars: 1024,
  maxUploadIdChars: 1024,
  /** JSON request bodies. */
  maxJsonBytes: 1024 * 1024,
  /** Request headers, all together (Node's own limit, answered with 431). */
  maxHeaderBytes: 16 * 1024,
} as const;

export type Limits = {
  -readonly [K in keyof typeof LIMITS]: (typeof LIMITS)[K] extends number
    ? number
    : (typeof LIMITS)[K];
};
