import { createHash, randomBytes, randomUUID, type Hash } from 'node:crypto';
import { createReadStream, createWriteStream } from 'node:fs';
import { readdir, rm, stat } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { Readable, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  AbortMultipartUploadCommand,
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  DeleteObjectCommand,
  DeleteObjectsCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  UploadPartCommand,
} from '@aws-sdk/client-s3';
import type { HashWorker } from '../../shared/hasher.js';
import { fault, pausePoint } from '../faults.js';
import { bodyPassedOn } from '../gc.js';
import { LIMITS } from '../limits.js';
import { LockLostError, OutcomeUnknownError } from '../store/index.js';
import {
  ChunkRefusedError,
  type ChunkFields,
  type ContentReader,
  type ContentStorage,
  type Layout,
  type NewContent,
  type ReceivedChunk,
  StorageUnavailableError,
} from './index.js';
import { MAX_OBJECT, MIN_PART, planParts } from './s3-parts.js';
import {
  checkChunkFields,
  checkDeclaredLength,
  checkJoinedEnd,
  declaredSizeError,
  joinedStart,
} from './chunks.js';
import { isContentName, isUploadName, mayRemoveUnnamed, type Owner } from './owner.js';
import { SpaceReserve } from './space.js';
import { makeDirs } from '../../shared/mkdirs.js';
import { processAlive } from '../../shared/owned-temp.js';

export interface S3StorageOptions {
  /** s3://BUCKET[/PREFIX] */
  url: string;
  /** The S3 API's URL when it is not AWS (--s3-endpoint). */
  endpoint?: string;
  /** Path-style URLs, ENDPOINT/BUCKET/KEY (--s3-force-path-style). */
  forcePathStyle?: boolean;
  /** Local temp space for incoming chunks. */
  tempDir: string;
  hasher: HashWorker;
  /** Uploads are refused (507) when they would leave less free space than this in tempDir. */
  minFreeBytes: number;
  /** Runs `task` holding `key` against every server on the bucket (PostgreSQL advisory locks). */
  lock: <T>(key: string, task: () => Promise<T>) => Promise<T>;
  /**
   * Inside `lock`'s task on an upload of the share: rejects (LockLostError) once the lock was
   * lost, when another server may hold it. Objects are written without the database, so nothing
   * else fences them.
   */
  checkLock?: (shareId: string) => Promise<void>;
  /**
   * Inside `lock`'s task: a number higher than any it gave before, to any server, taken on the
   * lock's connection (LockLostError once the lock was lost). Without it (locks that cannot be
   * lost), copies are numbered from the upload's listing.
   */
  fence?: () => Promise<number>;
  /** Whether a share's content is this blob (the metadata recorded its publishing). */
  published?: (shareId: string, blob: string) => Promise<boolean>;
  /**
   * Content no share names any more (replaced, deleted, expired) is removed this long after
   * (limits.ts, removedContentKeepMs); 0 removes it at once.
   */
  removedContentKeepMs?: number;
  log?: (line: string) => void;
  /** The time that ages are measured with (tests move it); Date.now by default. */
  clock?: () => number;
}

/** Local files are read and written in pieces of this size. */
const PIECE = 1024 * 1024;
/** Content no share names is removed at start-up only once it is this old: another server may be between writing it and publishing it. */
const UNREFERENCED_GRACE_MS = 3600 * 1000;
/** Multipart uploads under the prefix that no marker names are aborted after this long. */
const STALE_MULTIPART_MS = 24 * 3600 * 1000;
/** Temp directories of other hosts sharing tempDir are removed when idle this long. */
const STALE_TEMP_MS = 24 * 3600 * 1000;
/** Streamed requests (which the SDK does not retry) are tried this many times. */
const ATTEMPTS = 3;
const DELETE_BATCH = 1000;

/** The upload-wide fields, fixed by its first stored chunk (dzsha256 by the first that sends it). */
interface Meta {
  v: 1;
  total: number;
  layout: Layout | null;
  sha256?: string;
  /** Joined mode: the dztotalfilesize a chunk announced, which the whole must hold. */
  size?: number;
  /** Joined mode: the dzchunksize a chunk announced, which every chunk keeps to. */
  chunkSize?: number;
  created: number;
}

/** A copy of a chunk or meta: `<name>.<token>`, or `<name>` (token 0) as older servers wrote it. */
interface Copy {
  key: string;
  token: number;
  size: number;
  etag: string;
}

/** One upload's objects, as a listing shows them. */
interface UploadObjects {
  /** index → bytes, of its staged chunks (the chosen copy of each) */
  chunks: Map<number, number>;
  /** index → ETag, of its staged chunks (the chosen copy of each) */
  tags: Map<number, string>;
  /** index → the chosen copy of the chunk: the one with the highest token */
  copies: Map<number, Copy>;
  /** Keys of copies (chunks and meta) that one with a higher token replaced. */
  replaced: string[];
  /** The highest token of its copies (0: none, or only tokenless ones). */
  top: number;
  /** Every object under the upload's directory (full keys). */
  keys: string[];
  /**
   * When its tombstone was written (ms), if it has one that no copy outranks (listUpload only).
   */
  finished?: number;
  /** Keys of its tombstones that a copy outranks: they end nothing (listUpload only). */
  stale: string[];
  /** Its chosen meta copy. */
  meta: Copy | null;
  multipart: boolean;
  /** Its content was assembled and is being published (the record names it). */
  publishing: boolean;
  /** The latest LastModified of its objects (ms). */
  newest: number;
}

/** Where an upload lives, and the lock that every server takes to change it. */
interface UploadRef {
  shareId: string;
  /** Full key prefix of its objects, ending in "/". */
  dir: string;
  /** Full key of its tombstones: `<tombstone>.<token>`, or `<tombstone>` as older servers wrote. */
  tombstone: string;
  lockKey: string;
}

/** A part of the new content: a staged object, or the local file of the chunk that completes it. */
type Source = { size: number } & ({ file: string } | { key: string });

/**
 * An S3 request that failed; `code` is S3's error code (or a network error's). A failure on the
 * object store's side or on the way to it is a StorageUnavailableError (503 for the client).
 */
class S3RequestError extends StorageUnavailableError {
  constructor(
    message: string,
    readonly code: string,
    readonly status?: number,
  ) {
    super(message);
  }
}

class Received implements ReceivedChunk {
  bytes = 0;
  overflow = false;
  done = false;
  /**
   * The ETag of the chosen copy of this chunk's index when this copy began to arrive (null: none),
   * when its fields came first; undefined when not known.
   */
  before?: Promise<string | null | undefined>;

  constructor(
    readonly path: string,
    readonly fields: ChunkFields | null,
  ) {}
}

/**
 * Content in S3-compatible object storage, shared by every server on the bucket: the state of
 * unfinished uploads is in the bucket too, and each change of an upload is made under `lock`.
 *
 *   <prefix>content/<share_id>.<uuid>     a share's bytes (written whole, never changed)
 *   <prefix>uploads/<share_id>/<key>/     an unfinished upload; <key> = sha256(dzuuid), 40 hex
 *       meta.<token>     its total, layout and dzsha256 (JSON), written with its first chunk
 *       <index>.<token>  a stored chunk (user metadata: total, offset, chunksize, filesize)
 *       multipart        while it is assembled: the S3 UploadId of the new content (JSON)
 *   <prefix>finished/<share_id>/<key>.<token>
 *                                         tombstone of an upload that completed, failed its
 *                                         digest, was swept or removed: its late chunks are
 *                                         refused while it is kept (finishedUploadKeepMs)
 *
 * Each copy of a chunk or meta has a key of its own, and the one with the highest token counts
 * (stageCopy); `meta` and `<index>` without a token (token 0) are what earlier servers wrote.
 * A tombstone ends its upload only if its token is above every copy's (putTombstone); one
 * without a token (`finished/<share_id>/<key>`: earlier servers, or no `fence`) always does.
 *
 * Tombstones have a prefix of their own so that listing the unfinished uploads (every new upload,
 * every chunk of a user with a quota) costs what those hold, not what finished in the last days.
 *
 * A chunk streams to a local temp file, then under the lock it is checked and PUT as a staged
 * object; the chunk that completes an upload is not staged but read from its temp file while
 * the content is assembled from the staged ones (ranged GETs → UploadPart), hashed on the way.
 */
export class S3Storage implements ContentStorage {
  private readonly readers = new Set<AbortController>();
  /** Content no share names, in the order it was let go, with when it is to be removed. */
  private readonly doomed: { key: string; due: number }[] = [];
  private doomTimer: NodeJS.Timeout | null = null;
  private readonly space: SpaceReserve;
  private readonly log: (line: string) => void;
  private readonly now: () => number;

  private constructor(
    private readonly client: S3Client,
    private readonly bucket: string,
    private readonly prefix: string,
    /** This process's own directory in options.tempDir. */
    private readonly tempDir: string,
    private readonly options: S3StorageOptions,
  ) {
    this.log = options.log ?? ((line) => process.stderr.write(`${line}\n`));
    this.now = options.clock ?? Date.now;
    this.space = new SpaceReserve(tempDir, options.minFreeBytes);
  }

  /**
   * Parses the URL, builds the client (region and credentials from the AWS default chains;
   * us-east-1 when no region is configured) and checks that the bucket can be used.
   */
  static async open(options: S3StorageOptions): Promise<S3Storage> {
    const { bucket, prefix } = parseS3Url(options.url);
    process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
    const quiet = () => undefined;
    const client = new S3Client({
      region: await configuredRegion(),
      endpoint: options.endpoint,
      forcePathStyle: options.forcePathStyle,
      followRegionRedirects: true,
      // Checksums only where S3 requires them: MinIO, Garage, R2 and s3rver do not all take
      // the SDK's newer default (aws-chunked bodies with trailing checksums).
      requestChecksumCalculation: 'WHEN_REQUIRED',
      responseChecksumValidation: 'WHEN_REQUIRED',
      // Every download holds a connection for as long as it runs.
      requestHandler: {
        connectionTimeout: 10_000,
        socketTimeout: 120_000,
        httpAgent: { keepAlive: true, maxSockets: 256 },
        httpsAgent: { keepAlive: true, maxSockets: 256 },
      },
      logger: { debug: quiet, info: quiet, warn: quiet, error: quiet },
    });
    const own = `s3-${hostname().replace(/[^A-Za-z0-9.-]/g, '_')}-${process.pid}`;
    const storage = new S3Storage(client, bucket, prefix, join(options.tempDir, own), options);
    try {
      await storage.checkBucket();
      await makeDirs(storage.tempDir);
    } catch (err) {
      client.destroy();
      throw err;
    }
    return storage;
  }

  private get where(): string {
    return this.options.endpoint ?? 'AWS S3';
  }

  private async checkBucket(): Promise<void> {
    const Bucket = this.bucket;
    try {
      await this.call(`HeadBucket s3://${Bucket}`, (c) =>
        c.send(new HeadBucketCommand({ Bucket })),
      );
    } catch (err) {
      const failure = err as S3RequestError;
      if (failure.status === 404)
        throw new Error(`The S3 bucket "${Bucket}" does not exist (at ${this.where})`);
      if (failure.status === 403)
        throw new Error(
          `Access to the S3 bucket "${Bucket}" was denied (at ${this.where}): check the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or ~/.aws) and the bucket's policy`,
        );
      throw new Error(`The S3 bucket "${Bucket}" cannot be used: ${failure.message}`);
    }
  }

  // Start-up, space

  async init(referenced: (blob: string) => boolean, owner?: Owner): Promise<void> {
    await this.cleanTemp();
    const cutoff = owner?.alone ? Infinity : this.now() - UNREFERENCED_GRACE_MS;
    const under = this.key('content/');
    const unnamedObjects = async function* (storage: S3Storage) {
      for await (const object of storage.objects(under)) {
        const name = object.key.slice(under.length);
        if (isContentName(name) && !referenced(name)) yield object;
      }
    };
    let unnamed = 0;
    for await (const _ of unnamedObjects(this)) unnamed++;
    // Removed only if this store owns the content (owner.ts).
    const markKey = this.key('content-owner');
    const mayRemove = await mayRemoveUnnamed(
      {
        read: async () => (await this.getText(markKey))?.trim() ?? null,
        write: (id) => this.putText(markKey, `${id}\n`),
        content: this.describe(under),
        mark: this.describe(markKey),
        afresh: `remove the objects under ${this.describe(under)}, or use another prefix`,
        unnamed: (files) => `remove ${files}`,
      },
      owner,
      unnamed,
    );
    if (!mayRemove || unnamed === 0) return;
    // Listed again, so memory stays flat however many there are.
    const doomed: string[] = [];
    for await (const object of unnamedObjects(this)) {
      if (object.modified < cutoff) doomed.push(object.key);
      if (doomed.length === DELETE_BATCH) await this.remove(doomed.splice(0));
    }
    await this.remove(doomed);
  }

  /**
   * Empties this process's temp directory, and removes those of processes gone: of this host
   * when their process is not running, of other hosts (a shared volume) when long idle.
   */
  private async cleanTemp(): Promise<void> {
    const root = this.options.tempDir;
    await makeDirs(root);
    const host = hostname().replace(/[^A-Za-z0-9.-]/g, '_');
    for (const name of await readdir(root)) {
      const match = /^s3-(.+)-(\d+)$/.exec(name);
      const path = join(root, name);
      if (!match || path === this.tempDir) continue;
      const gone =
        match[1] === host
          ? !processAlive(Number(match[2]))
          : Date.now() - ((await stat(path).catch(() => null))?.mtimeMs ?? 0) > STALE_TEMP_MS;
      if (gone) await rm(path, { recursive: true, force: true });
    }
    await rm(this.tempDir, { recursive: true, force: true });
    await makeDirs(this.tempDir);
  }

  reserve(bytes: number): Promise<() => void> {
    return this.space.reserve(bytes);
  }

  // Receiving

  /** Streams the body to a temp file of its own; at most `maxBytes` are kept (overflow). */
  async receive(
    shareId: string,
    fields: ChunkFields | null,
    body: Readable,
    maxBytes: number,
  ): Promise<ReceivedChunk> {
    const received = new Received(
      join(this.tempDir, `c.${randomBytes(8).toString('hex')}`),
      fields,
    );
    if (fields) {
      // What is staged for this index now: a copy staged after this one began wins (commitLocked).
      const upload = this.upload(shareId, uploadKeyOf(fields.uploadId));
      received.before = this.chosenTag(upload, fields.index).catch(() => undefined);
    }
    // The rest of an oversized body is read and dropped, so that the request can end.
    const bounded = new Transform({
      transform(data: Buffer, _encoding, done) {
        bodyPassedOn(data.length);
        if (received.overflow || received.bytes + data.length > maxBytes) {
          received.overflow = true;
          return done();
        }
        received.bytes += data.length;
        done(null, data);
      },
    });
    try {
      const out = createWriteStream(received.path, {
        flags: 'wx',
        mode: 0o600,
        highWaterMark: PIECE,
      });
      await pipeline(body, bounded, out);
    } catch (err) {
      await this.discard(received);
      throw err;
    }
    return received;
  }

  async discard(chunk: ReceivedChunk): Promise<void> {
    const received = chunk as Received;
    if (received.done) return;
    received.done = true;
    await rm(received.path, { force: true });
  }

  // Committing

  async commit(
    shareId: string,
    fields: ChunkFields,
    chunk: ReceivedChunk,
    publish: (content: NewContent) => Promise<string | undefined>,
  ): Promise<'stored' | 'complete'> {
    const received = chunk as Received;
    try {
      if (received.done) throw new Error('This chunk was already committed or discarded');
      if (
        received.fields &&
        (received.fields.index !== fields.index || received.fields.uploadId !== fields.uploadId)
      )
        throw new ChunkRefusedError('invalid', 'The chunk fields changed after the data');
      const upload = this.upload(shareId, uploadKeyOf(fields.uploadId));
      return await this.options.lock(upload.lockKey, () =>
        this.commitLocked(upload, fields, received, publish),
      );
    } finally {
      await this.discard(received);
    }
  }

  /** Checks the chunk against its upload; stages it, or completes the upload with it. */
  private async commitLocked(
    upload: UploadRef,
    fields: ChunkFields,
    received: Received,
    publish: (content: NewContent) => Promise<string | undefined>,
  ): Promise<'stored' | 'complete'> {
    const objects = await this.listUpload(upload);
    if (objects.finished !== undefined)
      throw new ChunkRefusedError('finished', 'This upload has already finished');
    // A copy of this index staged after this one began to arrive wins (docs/API.md): this one,
    // late (a stalled connection the client gave up on), must not replace what was acknowledged.
    // A copy with the same bytes has the same ETag and changes nothing.
    const before = await received.before;
    const stored = objects.tags.get(fields.index) ?? null;
    // Found from outside: two copies with the same bytes sent at once through two servers (none
    // staged before either began) got a 409 for one, though it changes nothing.
    if (before !== undefined && stored !== before && stored !== (await plainEtag(received.path)))
      throw new ChunkRefusedError(
        'superseded',
        `Chunk ${fields.index} was sent again and the other copy was stored instead`,
      );
    const { meta, changed } = await this.checkChunk(upload, objects, fields, received);
    const present = new Set(objects.chunks.keys()).add(fields.index);
    if (present.size < meta.total) {
      await pausePoint('s3.before-stage');
      await this.stageCopy(upload, objects, fields, received, changed ? meta : null);
      return 'stored';
    }
    return this.complete(upload, meta, objects, fields.index, received, publish);
  }

  /**
   * Stages the chunk (and the upload's fields, when `meta` is given) as new copies, each under a
   * key of its own: `<index>.<token>`, `meta.<token>`. A task whose lock was lost must not
   * replace a copy another server acknowledged meanwhile (the later copy wins), and S3 cannot
   * make a PUT conditional on the lock: one may be under way when the lock drops and land after
   * the other server's copy. So no copy is ever written over; readers take the copy with the
   * highest token, which `fence` takes on the lock's connection: the other server, locking
   * after the loss, has a higher one. The copy that lost its lock is never chosen over it, in
   * whatever order the PUTs land. Once it landed the lock is asked for again; if lost, the copy
   * is removed (its key is its own) and the request fails. (A completion through another server
   * in the moment between may have used it: the client's latest copy of that index.)
   */
  private async stageCopy(
    upload: UploadRef,
    objects: UploadObjects,
    fields: ChunkFields,
    received: Received,
    meta: Meta | null,
  ): Promise<void> {
    const token = await this.token(upload, objects);
    const metaKey = `${upload.dir}meta.${token}`;
    const chunkKey = `${upload.dir}${fields.index}.${token}`;
    try {
      await pausePoint('s3.before-put');
      if (meta) await this.putText(metaKey, JSON.stringify(meta));
      await this.stage(chunkKey, fields, received);
      await pausePoint('s3.after-put');
      await this.options.checkLock?.(upload.shareId);
    } catch (err) {
      await this.remove(meta ? [metaKey, chunkKey] : [chunkKey]).catch(() => undefined);
      throw err;
    }
    // Held when the copies landed: those they replace go (copies a later one replaced, too).
    const replaced = [...objects.replaced, ...objects.stale];
    const before = objects.copies.get(fields.index);
    if (before) replaced.push(before.key);
    if (meta && objects.meta) replaced.push(objects.meta.key);
    await this.remove(replaced).catch((err: Error) =>
      this.log(`fshare: could not remove replaced chunk copies: ${err.message}`),
    );
  }

  /**
   * A token for new copies of the upload, higher than that of any copy staged before it. With
   * `fence` (PostgreSQL) taken on the lock's connection, so it fails once the lock was lost.
   */
  private async token(upload: UploadRef, objects: UploadObjects): Promise<number> {
    if (this.options.fence) return this.options.fence();
    // A lock that cannot be lost: the listing under it saw every copy.
    await this.options.checkLock?.(upload.shareId);
    return objects.top + 1;
  }

  /**
   * The rules of files.ts: the chunk must agree with the upload's fields (fixed by its first
   * stored chunk) and fit between its neighbours. Returns the upload's fields, `changed` when
   * they are new (its first chunk) or this chunk brought the first dzsha256, dztotalfilesize or
   * dzchunksize.
   */
  private async checkChunk(
    upload: UploadRef,
    objects: UploadObjects,
    fields: ChunkFields,
    received: Received,
  ): Promise<{ meta: Meta; changed: boolean }> {
    // Without a stored chunk there is no upload yet (a meta alone is a refused first chunk's).
    const stored = objects.chunks.size > 0 ? await this.readMeta(upload, objects) : null;
    const meta: Meta = stored ?? {
      v: 1,
      total: fields.total,
      layout: fields.layout ?? null,
      created: Date.now(),
    };
    checkChunkFields(meta, fields);
    let changed = stored === null;
    if (fields.sha256) {
      if (meta.sha256 && meta.sha256 !== fields.sha256)
        throw new ChunkRefusedError('invalid', 'dzsha256 differs from the one earlier chunks sent');
      if (!meta.sha256) changed = true;
      meta.sha256 = fields.sha256;
    }
    if (received.overflow)
      throw new ChunkRefusedError('invalid', `Chunk ${fields.index} has more bytes than allowed`);
    if (meta.layout) checkPlacedLength(meta, fields.index, received.bytes);
    else {
      await this.checkJoinedOffset(upload, objects, fields, received.bytes);
      let others = 0;
      for (const [i, size] of objects.chunks) if (i !== fields.index) others += size;
      checkDeclaredLength(fields, received.bytes, others, meta);
      if (fields.fileSize !== undefined && meta.size === undefined) {
        meta.size = fields.fileSize;
        changed = true;
      }
      if (fields.chunkSize !== undefined && meta.chunkSize === undefined) {
        meta.chunkSize = fields.chunkSize;
        changed = true;
      }
    }
    return { meta, changed };
  }

  /** PUTs a chunk as a staged object: durable once S3 acknowledges it. */
  private async stage(Key: string, fields: ChunkFields, received: Received): Promise<void> {
    const Metadata: Record<string, string> = { total: String(fields.total) };
    if (fields.offset !== undefined) Metadata.offset = String(fields.offset);
    if (fields.layout) {
      Metadata.chunksize = String(fields.layout.chunkSize);
      Metadata.filesize = String(fields.layout.fileSize);
    }
    const ContentLength = received.bytes;
    await this.retrying(null, () =>
      this.sendBody(
        `PutObject ${this.describe(Key)}`,
        ContentLength === 0 ? Readable.from([]) : createReadStream(received.path),
        (Body, abortSignal) =>
          this.client.send(
            new PutObjectCommand({ Bucket: this.bucket, Key, Body, ContentLength, Metadata }),
            { abortSignal },
          ),
      ),
    );
  }

  /** Joined mode: a declared dzchunkbyteoffset must agree with the chunks on either side. */
  private async checkJoinedOffset(
    upload: UploadRef,
    objects: UploadObjects,
    fields: ChunkFields,
    bytes: number,
  ): Promise<void> {
    const { index } = fields;
    const start = joinedStart(fields, (i) => objects.chunks.get(i));
    if (start === undefined || !objects.chunks.has(index + 1)) return;
    const next = await this.chunkRecord(objects.copies.get(index + 1)!.key);
    checkJoinedEnd(index, start, bytes, next.offset);
  }

  /**
   * Every chunk is in: the content is assembled under a new name, checked against dzsha256,
   * handed to `publish`, and the upload ends.
   */
  private async complete(
    upload: UploadRef,
    meta: Meta,
    objects: UploadObjects,
    last: number,
    received: Received,
    publish: (content: NewContent) => Promise<string | undefined>,
  ): Promise<'complete'> {
    const sources: Source[] = [];
    for (let i = 0; i < meta.total; i++)
      sources.push(
        i === last
          ? { file: received.path, size: received.bytes }
          : { key: objects.copies.get(i)!.key, size: objects.chunks.get(i)! },
      );
    const size = sources.reduce((sum, s) => sum + s.size, 0);
    const short = meta.layout ? null : declaredSizeError(size, meta.size);
    if (short) {
      await this.finish(upload);
      throw short;
    }
    if (size > MAX_OBJECT)
      throw new ChunkRefusedError(
        'invalid',
        `S3 holds at most 5 TiB; this upload has ${size} bytes`,
      );
    // A completion cut short after its content was assembled (a crash before or during publish)
    // left a record naming it: the same content is published again instead of being rebuilt, so
    // the re-sent last chunk ends the upload as the first one would have.
    const record = `${upload.dir}publishing`;
    let content = objects.publishing ? parsePublishing(await this.getText(record)) : null;
    let fresh = false;
    if (content) {
      const reader = await this.open(content.blob);
      await reader?.close();
      if (!reader || reader.size !== content.size) content = null;
    }
    if (!content) {
      const blob = `${upload.shareId}.${randomUUID()}`;
      const key = this.key(`content/${blob}`);
      const sha256 = await this.assemble(upload, objects, key, sources, size);
      if (meta.sha256 && sha256 && meta.sha256 !== sha256) {
        await this.remove([key]);
        await this.finish(upload);
        throw new ChunkRefusedError(
          'digest',
          `The uploaded bytes have sha256 ${sha256}, not the ${meta.sha256} that dzsha256 announced; the upload was discarded`,
        );
      }
      content = { blob, size, sha256 };
      fresh = true;
      await this.putText(record, JSON.stringify(content));
    }
    const { blob } = content;
    await fault('s3.before-publish');
    await pausePoint('s3.before-publish');
    let replaced: string | undefined;
    try {
      replaced = await publish(content);
    } catch (err) {
      // Content published before the crash may be the share's now: only new content is dropped
      // (unreferenced content of a republish is swept at a start, once it is an hour old).
      // Whether the record names it may be unknown (the database's answer was lost): then it
      // stays, with its record, and the last chunk sent again publishes it.
      if (!(err instanceof OutcomeUnknownError)) await this.drop(upload, fresh ? blob : null);
      throw err;
    }
    await fault('s3.after-publish');
    // The content is the share's: a lock lost now leaves the upload as a crash here would (its
    // record names published content, so it counts for nothing until a retry or a sweep ends it).
    // So does an object store that stops answering: the answer is the 201 of what was published.
    // Found from outside: it was a 503 "try again", and the retry a 423.
    await this.finish(upload).catch((err: unknown) => {
      if (err instanceof LockLostError) return;
      this.log(
        `fshare: the upload ${this.describe(upload.dir)} was published, but ending it failed (${(err as Error).message}); a retry of its last chunk or the idle sweep ends it`,
      );
    });
    if (replaced && replaced !== blob) await this.removeContent(replaced);
    return 'complete';
  }

  /**
   * Removes a publishing record and the new content it names, which publish did not take. If
   * this task's lock was lost, another server may have taken it, found the record and published
   * that content itself: so the record goes first, and the content only if the lock is still
   * held after that. Then no other server held the lock since this task took it, and none can
   * find the record any more: the content is this task's alone. Otherwise it stays (a start
   * removes it, once an hour old, if no share names it).
   */
  private async drop(upload: UploadRef, blob: string | null): Promise<void> {
    await this.remove([`${upload.dir}publishing`]);
    if (blob === null) return;
    const held = await (this.options.checkLock?.(upload.shareId) ?? Promise.resolve()).then(
      () => true,
      () => false,
    );
    if (held) await this.remove([this.contentKey(blob)]);
  }

  /**
   * Writes the concatenation of `sources` to `key`, whole or not at all: one PUT when it is
   * below S3's smallest part, else a multipart upload in parts of planParts(). Returns its
   * sha256 ('' when hashing is off), computed as the bytes pass.
   */
  private async assemble(
    upload: UploadRef,
    objects: UploadObjects,
    key: string,
    sources: Source[],
    size: number,
  ): Promise<string> {
    const hash = this.options.hasher.disabled ? null : createHash('sha256');
    const what = this.describe(key);
    if (size < MIN_PART) {
      const done = await this.retrying(hash, (h) =>
        this.sendBody(`PutObject ${what}`, this.concat(sources, 0, size, h), (Body, abortSignal) =>
          this.client.send(
            new PutObjectCommand({ Bucket: this.bucket, Key: key, Body, ContentLength: size }),
            { abortSignal },
          ),
        ),
      );
      return done.hash?.digest('hex') ?? '';
    }
    // An assembly cut short (a crash) left its marker: its multipart upload is aborted first.
    if (objects.multipart) await this.abortMarked(upload);
    const created = await this.call(`CreateMultipartUpload ${what}`, (c) =>
      c.send(new CreateMultipartUploadCommand({ Bucket: this.bucket, Key: key })),
    );
    const uploadId = created.UploadId;
    if (!uploadId) throw new Error(`S3 CreateMultipartUpload ${what} returned no UploadId`);
    const marker = `${upload.dir}multipart`;
    await this.putText(marker, JSON.stringify({ key, uploadId }));
    let digest: string;
    try {
      digest = await this.uploadParts(key, uploadId, sources, size, hash);
    } catch (err) {
      if (await this.abortMultipart(key, uploadId)) await this.remove([marker]).catch(() => {});
      throw err;
    }
    await this.remove([marker]);
    return digest;
  }

  /** Sends the parts in order (hashing them in order), then completes the multipart upload. */
  private async uploadParts(
    key: string,
    uploadId: string,
    sources: Source[],
    size: number,
    hash: Hash | null,
  ): Promise<string> {
    const what = this.describe(key);
    const parts: { PartNumber: number; ETag: string }[] = [];
    for (const [i, { start, end }] of planParts(size).entries()) {
      const PartNumber = i + 1;
      const done = await this.retrying(hash, (h) =>
        this.sendBody(
          `UploadPart ${PartNumber} of ${what}`,
          this.concat(sources, start, end, h),
          (Body, abortSignal) =>
            this.client.send(
              new UploadPartCommand({
                Bucket: this.bucket,
                Key: key,
                UploadId: uploadId,
                PartNumber,
                Body,
                ContentLength: end - start,
              }),
              { abortSignal },
            ),
        ),
      );
      hash = done.hash;
      parts.push({ PartNumber, ETag: done.result.ETag ?? '' });
    }
    await this.call(`CompleteMultipartUpload ${what}`, (c) =>
      c.send(
        new CompleteMultipartUploadCommand({
          Bucket: this.bucket,
          Key: key,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts },
        }),
      ),
    );
    return hash?.digest('hex') ?? '';
  }

  /**
   * Bytes [start, end) of the concatenation of `sources`, streamed: ranged GETs of staged
   * chunks (a part may span several, or be a slice of one), or reads of the local chunk. Each
   * piece is added to `hash` as it passes; a source shorter than recorded fails it.
   */
  private concat(sources: Source[], start: number, end: number, hash: Hash | null): Readable {
    const pieces = async function* (this: S3Storage): AsyncGenerator<Buffer> {
      let at = 0;
      for (const source of sources) {
        const from = Math.max(start, at) - at;
        const to = Math.min(end, at + source.size) - at;
        at += source.size;
        if (to <= from) continue;
        const input =
          'file' in source
            ? createReadStream(source.file, { start: from, end: to - 1, highWaterMark: PIECE })
            : this.range(source.key, from, to - 1);
        let got = 0;
        for await (const data of input as AsyncIterable<Buffer>) {
          got += data.length;
          hash?.update(data);
          yield data;
        }
        if (got !== to - from) {
          const name = 'file' in source ? source.file : this.describe(source.key);
          throw new Error(`${name} ended after ${got} of ${to - from} bytes`);
        }
      }
    };
    return Readable.from(pieces.call(this), { objectMode: false });
  }

  // Ending uploads

  /**
   * Ends an upload for good: its tombstone is written, then its other objects are removed
   * (and the multipart upload a marker names is aborted). Late chunks are refused from then on.
   */
  private async finish(upload: UploadRef): Promise<void> {
    await this.putTombstone(upload);
    await this.clear(upload, await this.listUpload(upload));
  }

  /**
   * Writes the upload's tombstone under a key of its own, `<tombstone>.<token>` (stageCopy's
   * token): its PUT may be under way when the lock drops and land after another server staged a
   * chunk of the upload, which has a higher token. An upload is finished only by a tombstone no
   * copy outranks (listUpload), so that chunk keeps the upload going, in whatever order the two
   * land. Once it landed the lock is asked for again; if lost, the tombstone is removed.
   */
  private async putTombstone(upload: UploadRef): Promise<void> {
    // Without `fence` the lock cannot be lost: a tombstone without a token outranks every copy.
    const key = this.options.fence
      ? `${upload.tombstone}.${await this.options.fence()}`
      : upload.tombstone;
    try {
      await pausePoint('s3.before-tombstone-put');
      await this.putText(key, '');
      await pausePoint('s3.after-tombstone-put');
      await this.options.checkLock?.(upload.shareId);
    } catch (err) {
      await this.remove([key]).catch(() => undefined);
      throw err;
    }
  }

  /** Removes a finished upload's objects (but a marker it cannot abort yet). */
  private async clear(upload: UploadRef, objects: UploadObjects): Promise<void> {
    if (objects.multipart) await this.abortMarked(upload);
    const marker = `${upload.dir}multipart`;
    await this.remove(objects.keys.filter((k) => k !== marker));
  }

  /** Aborts the multipart upload a marker names; the marker goes when that is done (or cannot be). */
  private async abortMarked(upload: UploadRef): Promise<boolean> {
    const marker = `${upload.dir}multipart`;
    const text = await this.getText(marker);
    if (text === null) return true;
    let named: { key?: unknown; uploadId?: unknown } = {};
    try {
      named = JSON.parse(text) as typeof named;
    } catch {
      // unreadable: nothing to abort
    }
    if (typeof named.key === 'string' && typeof named.uploadId === 'string') {
      if (!(await this.abortMultipart(named.key, named.uploadId))) return false;
    }
    await this.remove([marker]);
    return true;
  }

  /** True when the multipart upload is gone (aborted, already gone, or the server cannot say). */
  private async abortMultipart(key: string, uploadId: string): Promise<boolean> {
    try {
      await this.call(`AbortMultipartUpload ${this.describe(key)}`, (c) =>
        c.send(
          new AbortMultipartUploadCommand({ Bucket: this.bucket, Key: key, UploadId: uploadId }),
        ),
      );
      return true;
    } catch (err) {
      const failure = err as S3RequestError;
      // s3rver has no AbortMultipartUpload (MethodNotAllowed); NoSuchUpload: it ended already.
      if (
        failure.status === 404 ||
        ['NoSuchUpload', 'MethodNotAllowed', 'NotImplemented'].includes(failure.code)
      )
        return true;
      this.log(`${failure.message}; it is tried again at the next sweep`);
      return false;
    }
  }

  async removeUploads(shareId: string): Promise<void> {
    checkName(shareId, 'share id');
    for (const upload of await this.listUploads(`uploads/${shareId}/`))
      await this.options.lock(upload.lockKey, () => this.end(upload));
  }

  async removeUpload(shareId: string, uploadId: string): Promise<void> {
    checkName(shareId, 'share id');
    const upload = this.upload(shareId, uploadKeyOf(uploadId));
    await this.options.lock(upload.lockKey, () => this.end(upload));
  }

  /**
   * Under its lock: finishes an upload (only if idle for `maxIdleMs`, when given), or clears what
   * a crash left beside its tombstone.
   */
  private async end(upload: UploadRef, maxIdleMs?: number): Promise<void> {
    const objects = await this.listUpload(upload);
    if (objects.finished !== undefined) await this.clear(upload, objects);
    else if (objects.keys.length === 0) return;
    else if (maxIdleMs === undefined || this.now() - objects.newest >= maxIdleMs) {
      await pausePoint('s3.before-end');
      // Found idle under the lock; if the lock was lost since, another server may have stored
      // a chunk of it (acknowledged) that this listing did not see: the upload is not ended.
      // (A tombstone landing after such a chunk is outranked by it: putTombstone.)
      if (maxIdleMs !== undefined) await this.options.checkLock?.(upload.shareId);
      await this.finish(upload);
    }
  }

  async sweep(maxIdleMs: number): Promise<void> {
    for (const upload of await this.listUploads('uploads/')) {
      if (this.now() - upload.newest < maxIdleMs) continue;
      await this.options.lock(upload.lockKey, () => this.end(upload, maxIdleMs)).catch(ignoreLost);
    }
    const keep = LIMITS.finishedUploadKeepMs;
    const root = this.key('finished/');
    for await (const tombstone of this.objects(root)) {
      if (this.now() - tombstone.modified <= keep) continue;
      const [shareId, name] = tombstone.key.slice(root.length).split('/');
      const key = name?.split('.')[0];
      if (!shareId || !key || !isUploadName(`${shareId}.${key}`)) continue;
      const upload = this.upload(shareId, key);
      await this.options.lock(upload.lockKey, async () => {
        // An outranked tombstone ended nothing: its upload is left to the idle sweep.
        const objects = await this.listUpload(upload);
        if (objects.finished !== undefined) await this.clear(upload, objects);
        await this.remove([tombstone.key]);
      });
    }
    await this.abortStaleMultipart(Math.max(maxIdleMs, STALE_MULTIPART_MS));
  }

  /**
   * Aborts multipart uploads of content begun longer than `maxAgeMs` ago, which no marker
   * recorded (a crash between starting one and writing its marker). Where the server has no
   * ListMultipartUploads (s3rver), the markers are all there is.
   */
  private async abortStaleMultipart(maxAgeMs: number): Promise<void> {
    const Prefix = this.key('content/');
    let KeyMarker: string | undefined;
    let UploadIdMarker: string | undefined;
    do {
      let page;
      try {
        page = await this.call(`ListMultipartUploads ${this.describe(Prefix)}`, (c) =>
          c.send(
            new ListMultipartUploadsCommand({
              Bucket: this.bucket,
              Prefix,
              KeyMarker,
              UploadIdMarker,
            }),
          ),
        );
      } catch (err) {
        const code = (err as S3RequestError).code;
        if (code === 'NotImplemented' || code === 'MethodNotAllowed') return;
        throw err;
      }
      for (const u of page.Uploads ?? []) {
        const initiated = u.Initiated?.getTime() ?? this.now();
        if (u.Key && u.UploadId && this.now() - initiated > maxAgeMs)
          await this.abortMultipart(u.Key, u.UploadId);
      }
      KeyMarker = page.IsTruncated ? page.NextKeyMarker : undefined;
      UploadIdMarker = page.IsTruncated ? page.NextUploadIdMarker : undefined;
    } while (KeyMarker);
  }

  // What is stored of uploads

  async isUnfinished(shareId: string, uploadId: string): Promise<boolean> {
    const upload = this.upload(shareId, uploadKeyOf(uploadId));
    const first = (prefix: string) =>
      this.call(`ListObjectsV2 ${this.describe(prefix)}`, (c) =>
        c.send(new ListObjectsV2Command({ Bucket: this.bucket, Prefix: prefix, MaxKeys: 1 })),
      ).then((page) => page.Contents?.[0]?.Key);
    // Chunk keys (digits) sort before every other name: the first key says whether there is one.
    const [key, tombstone] = await Promise.all([first(upload.dir), first(upload.tombstone)]);
    if (key === undefined || !/^\d+(\.\d+)?$/.test(key.slice(upload.dir.length))) return false;
    if (tombstone === undefined) return true;
    // Whether a copy outranks the tombstones takes every key.
    const objects = await this.listUpload(upload);
    return objects.finished === undefined && objects.chunks.size > 0;
  }

  async uploadStatus(
    shareId: string,
    uploadId: string,
  ): Promise<{ total: number; received: number[]; bytes: number } | 'finished' | null> {
    const upload = this.upload(shareId, uploadKeyOf(uploadId));
    const objects = await this.listUpload(upload);
    if (objects.finished !== undefined) return 'finished';
    if (objects.chunks.size === 0) return null;
    const meta = await this.readMeta(upload, objects);
    const received = [...objects.chunks.keys()].sort((a, b) => a - b);
    let bytes = 0;
    for (const size of objects.chunks.values()) bytes += size;
    return { total: meta.total, received, bytes };
  }

  async unfinished(): Promise<Map<string, { uploads: number; bytes: number }>> {
    const out = new Map<string, { uploads: number; bytes: number }>();
    // (What a crash left beside a tombstone counts until the next sweep clears it.)
    for (const upload of await this.listUploads('uploads/')) {
      if (upload.chunks.size === 0 || (await this.isPublished(upload, upload))) continue;
      const entry = out.get(upload.shareId) ?? { uploads: 0, bytes: 0 };
      entry.uploads++;
      for (const size of upload.chunks.values()) entry.bytes += size;
      out.set(upload.shareId, entry);
    }
    return out;
  }

  /**
   * Whether an upload without a tombstone has its content published all the same: assembled,
   * and its share holds it, so a crash (SIGKILL) came between publishing it and closing the
   * upload. Its staged chunks are then that content's, already counted as the share's: they
   * count for no unfinished upload (quotas, bounds) while they wait for the client's retry of
   * the last chunk (which closes the upload) or the idle sweep.
   */
  private async isPublished(upload: UploadRef, objects: UploadObjects): Promise<boolean> {
    if (!objects.publishing || objects.finished !== undefined || !this.options.published)
      return false;
    const content = parsePublishing(await this.getText(`${upload.dir}publishing`));
    return content !== null && (await this.options.published(upload.shareId, content.blob));
  }

  private upload(shareId: string, key: string): UploadRef {
    checkName(shareId, 'share id');
    return {
      shareId,
      dir: this.key(`uploads/${shareId}/${key}/`),
      tombstone: this.key(`finished/${shareId}/${key}`),
      lockKey: `upload:${shareId}:${key}`,
    };
  }

  /** One upload's objects (every page of the listing), and its tombstones that count. */
  private async listUpload(upload: UploadRef): Promise<UploadObjects> {
    const objects = emptyObjects();
    const tombstones: { key: string; token: number; modified: number }[] = [];
    await Promise.all([
      (async () => {
        for await (const object of this.objects(upload.dir))
          addObject(objects, object.key.slice(upload.dir.length), object);
      })(),
      (async () => {
        // The upload's own: `<key>` or `<key>.<token>` (every upload's key has the same length).
        for await (const object of this.objects(upload.tombstone)) {
          const token = tombstoneToken(object.key.slice(upload.tombstone.length));
          if (token !== null) tombstones.push({ ...object, token });
        }
      })(),
    ]);
    for (const tombstone of tombstones) {
      // A chunk staged by a later lock holder outranks a tombstone whose lock was lost.
      if (tombstone.token <= objects.top) objects.stale.push(tombstone.key);
      else objects.finished = Math.max(objects.finished ?? 0, tombstone.modified);
    }
    return objects;
  }

  /** The uploads with objects under `uploads/…` (relative to the prefix), and those objects. */
  private async listUploads(under: string): Promise<(UploadRef & UploadObjects)[]> {
    const found = new Map<string, UploadRef & UploadObjects>();
    const root = this.key('uploads/');
    for await (const object of this.objects(this.key(under))) {
      const match = /^([^/]+)\/([^/]+)\/([^/]+)$/.exec(object.key.slice(root.length));
      if (!match) continue;
      const [, shareId, key, name] = match as unknown as [string, string, string, string];
      // Not fshare's (an object someone put under uploads/): it stopped the start with "Not a
      // valid share id".
      if (!isUploadName(`${shareId}.${key}`)) continue;
      const dir = `${root}${shareId}/${key}/`;
      let entry = found.get(dir);
      if (!entry) {
        entry = { ...this.upload(shareId, key), ...emptyObjects() };
        found.set(dir, entry);
      }
      addObject(entry, name, object);
    }
    return [...found.values()];
  }

  /** The upload's fields: its meta object, or (when that is missing) its first chunk's. */
  private async readMeta(upload: UploadRef, objects: UploadObjects): Promise<Meta> {
    if (objects.meta) {
      const meta = parseMeta(await this.getText(objects.meta.key));
      if (meta) return meta;
    }
    let first = Infinity;
    for (const index of objects.chunks.keys()) first = Math.min(first, index);
    const record = await this.chunkRecord(objects.copies.get(first)!.key);
    return { v: 1, total: record.total, layout: record.layout, created: 0 };
  }

  /** What a staged chunk's metadata says of it and its upload. */
  private async chunkRecord(
    key: string,
  ): Promise<{ total: number; layout: Layout | null; offset?: number }> {
    const head = await this.call(`HeadObject ${this.describe(key)}`, (c) =>
      c.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key })),
    );
    const m = head.Metadata ?? {};
    const num = (v: string | undefined) =>
      v !== undefined && /^\d+$/.test(v) ? Number(v) : undefined;
    const total = num(m.total);
    if (total === undefined) throw new Error(`The staged chunk ${this.describe(key)} has no total`);
    const chunkSize = num(m.chunksize);
    const fileSize = num(m.filesize);
    return {
      total,
      layout: chunkSize !== undefined && fileSize !== undefined ? { chunkSize, fileSize } : null,
      offset: num(m.offset),
    };
  }

  // Reading and removing content

  async open(blob: string): Promise<ContentReader | null> {
    const key = this.contentKey(blob);
    let head;
    try {
      head = await this.call(`HeadObject ${this.describe(key)}`, (c) =>
        c.send(new HeadObjectCommand({ Bucket: this.bucket, Key: key })),
      );
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
    const controller = new AbortController();
    this.readers.add(controller);
    const close = () => {
      controller.abort();
      this.readers.delete(controller);
    };
    return {
      size: head.ContentLength ?? 0,
      mtimeMs: head.LastModified?.getTime() ?? 0,
      stream: (start, end) => {
        const body =
          end < start
            ? Readable.from([])
            : Readable.from(this.range(key, start, end, controller.signal), { objectMode: false });
        body.once('close', close);
        return body;
      },
      close: async () => close(),
    };
  }

  /**
   * Bytes [first, last] of an object, streamed (a ranged GET); fails if it holds fewer. A server
   * that answers with more than the range (s3rver takes "bytes=0-0" for all of it) is read only
   * as far as needed.
   */
  private async *range(
    key: string,
    first: number,
    last: number,
    signal?: AbortSignal,
  ): AsyncGenerator<Buffer> {
    const what = this.describe(key);
    const object = await this.call(`GetObject ${what}`, (c) =>
      c.send(
        new GetObjectCommand({ Bucket: this.bucket, Key: key, Range: `bytes=${first}-${last}` }),
        { abortSignal: signal },
      ),
    );
    const body = object.Body as Readable;
    const wanted = last - first + 1;
    // Where the body starts: the first byte of its Content-Range, else (none) the object's.
    let skip = first - Number(/^bytes (\d+)-/.exec(object.ContentRange ?? '')?.[1] ?? 0);
    let got = 0;
    try {
      if (skip < 0) throw new Error(`${what} was answered from byte ${first - skip}, not ${first}`);
      for await (let data of body as AsyncIterable<Buffer>) {
        bodyPassedOn(data.length);
        if (skip > 0) {
          const n = Math.min(skip, data.length);
          data = data.subarray(n);
          skip -= n;
        }
        if (got + data.length > wanted) data = data.subarray(0, wanted - got);
        if (data.length === 0) continue;
        got += data.length;
        yield data;
        if (got === wanted) break;
      }
    } finally {
      body.destroy();
    }
    if (got !== wanted) throw new Error(`${what} ended after ${got} of ${wanted} bytes`);
  }

  async digest(blob: string): Promise<string> {
    if (this.options.hasher.disabled) return '';
    const key = this.contentKey(blob);
    const object = await this.call(`GetObject ${this.describe(key)}`, (c) =>
      c.send(new GetObjectCommand({ Bucket: this.bucket, Key: key })),
    );
    const hash = createHash('sha256');
    await pipeline(object.Body as Readable, hash);
    return hash.digest('hex');
  }

  /**
   * Content a share no longer names is removed only after removedContentKeepMs. Another server
   * may have read the share's record and opened the old content (HeadObject) without having sent
   * its GET yet; on files, an open file stays readable after it is unlinked, but an S3 object
   * that is deleted is gone for that GET too, and its download would fail. Kept in this process
   * only: content whose removal a crash cut short is removed at a later start, once it is
   * UNREFERENCED_GRACE_MS old (init).
   */
  async removeContent(blob: string): Promise<void> {
    const key = this.contentKey(blob);
    const keep = this.options.removedContentKeepMs ?? 0;
    if (keep <= 0) return this.remove([key]);
    this.doomed.push({ key, due: this.now() + keep });
    this.removeLater();
  }

  private removeLater(): void {
    if (this.doomTimer || this.doomed.length === 0) return;
    const wait = Math.max(0, this.doomed[0]!.due - this.now());
    this.doomTimer = setTimeout(() => {
      this.doomTimer = null;
      void this.removeDue(false);
    }, wait);
    this.doomTimer.unref();
  }

  /** Removes the content whose time has come (`all`: every one still waiting). */
  private async removeDue(all: boolean): Promise<void> {
    const now = this.now();
    const keys: string[] = [];
    while (this.doomed.length > 0 && (all || this.doomed[0]!.due <= now))
      keys.push(this.doomed.shift()!.key);
    try {
      await this.remove(keys);
    } catch (err) {
      // Tried again while the server runs (found from outside: an object store down for that
      // moment left deleted shares' bytes in the bucket until a start an hour later); at a stop,
      // left for a later start to remove (init): it is content no share names.
      const wait = Math.min(REMOVE_RETRY_MS, this.options.removedContentKeepMs ?? REMOVE_RETRY_MS);
      if (!all) this.doomed.unshift(...keys.map((key) => ({ key, due: now + wait })));
      this.log(
        `fshare: could not remove content no share names: ${(err as Error).message}${all ? '' : `; tried again in ${wait / 1000} s`}`,
      );
    }
    if (!all) this.removeLater();
  }

  async close(): Promise<void> {
    if (this.doomTimer) clearTimeout(this.doomTimer);
    this.doomTimer = null;
    // Nothing else would remove them until a start an hour from now.
    await this.removeDue(true);
    for (const reader of this.readers) reader.abort();
    this.readers.clear();
    this.client.destroy();
  }

  // S3 requests

  private key(rest: string): string {
    return `${this.prefix}${rest}`;
  }

  private contentKey(blob: string): string {
    checkName(blob, 'content name');
    return this.key(`content/${blob}`);
  }

  /** An object's address for messages (never credentials). */
  private describe(key: string): string {
    return `s3://${this.bucket}/${key}`;
  }

  /** Runs a request; a failure becomes an S3RequestError that says what failed and why. */
  private async call<T>(what: string, run: (client: S3Client) => Promise<T>): Promise<T> {
    try {
      return await run(this.client);
    } catch (err) {
      throw this.failure(err, what);
    }
  }

  private failure(err: unknown, what: string): Error {
    if (err instanceof S3RequestError || err instanceof ChunkRefusedError) return err;
    const e = err as {
      name?: string;
      message?: string;
      code?: string;
      cause?: { code?: string };
      $metadata?: { httpStatusCode?: number };
    };
    const name = e.name ?? 'Error';
    const status = e.$metadata?.httpStatusCode;
    if (name === 'CredentialsProviderError')
      return new S3RequestError(
        `S3 ${what} failed: no AWS credentials were found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or configure ~/.aws)`,
        name,
      );
    const network = e.code ?? e.cause?.code;
    if (status === undefined && network && /^E[A-Z_]+$/.test(network))
      return new S3RequestError(
        `S3 ${what} failed: cannot reach ${this.where} (${network})`,
        network,
      );
    const message = e.message && e.message !== 'UnknownError' ? `: ${e.message}` : '';
    const http = status ? ` (HTTP ${status})` : '';
    return new S3RequestError(`S3 ${what} failed: ${name}${http}${message}`, name, status);
  }

  /**
   * Sends a request with a streamed body. The SDK pipes the body into the request without
   * watching it, so a failing body aborts the request here, and its error is what is thrown.
   */
  private async sendBody<T>(
    what: string,
    body: Readable,
    send: (body: Readable, signal: AbortSignal) => Promise<T>,
  ): Promise<T> {
    const controller = new AbortController();
    let failure: unknown = null;
    body.on('error', (err) => {
      failure ??= err;
      controller.abort();
    });
    try {
      return await send(body, controller.signal);
    } catch (err) {
      // The body's own error (a staged chunk that could not be read, a short one) as it is.
      if (failure) throw failure;
      throw this.failure(err, what);
    } finally {
      body.destroy();
    }
  }

  /**
   * Tries a streamed request again (from the start, with the hash as it was before it) when it
   * failed in a way that may pass: a network error, a 5xx, throttling.
   */
  private async retrying<T>(
    hash: Hash | null,
    attempt: (hash: Hash | null) => Promise<T>,
  ): Promise<{ result: T; hash: Hash | null }> {
    for (let n = 1; ; n++) {
      const h = hash?.copy() ?? null;
      try {
        return { result: await attempt(h), hash: h };
      } catch (err) {
        if (n >= ATTEMPTS || !transient(err)) throw err;
        await sleep(200 * 2 ** n);
      }
    }
  }

  /** A small object's text, or null when there is none. */
  private async getText(key: string): Promise<string | null> {
    try {
      const object = await this.call(`GetObject ${this.describe(key)}`, (c) =>
        c.send(new GetObjectCommand({ Bucket: this.bucket, Key: key })),
      );
      return await object.Body!.transformToString();
    } catch (err) {
      if (isMissing(err)) return null;
      throw err;
    }
  }

  private async putText(key: string, text: string): Promise<void> {
    await this.call(`PutObject ${this.describe(key)}`, (c) =>
      c.send(new PutObjectCommand({ Bucket: this.bucket, Key: key, Body: text })),
    );
  }

  /** The ETag of the chosen copy of an upload's chunk, or null when there is none. */
  private async chosenTag(upload: UploadRef, index: number): Promise<string | null> {
    const found = emptyObjects();
    // `<index>` and its `<index>.<token>` sort before the other keys with this prefix (`.` < `0`).
    for await (const object of this.objects(`${upload.dir}${index}`, 10)) {
      const name = object.key.slice(upload.dir.length);
      if (!name.startsWith(`${index}.`) && name !== String(index)) break;
      addObject(found, name, object);
    }
    return found.tags.get(index) ?? null;
  }

  /** Every object under a key prefix, page by page (of `pageSize` keys, S3's 1000 by default). */
  private async *objects(
    prefix: string,
    pageSize?: number,
  ): AsyncGenerator<{ key: string; size: number; modified: number; etag: string }> {
    let token: string | undefined;
    do {
      const page = await this.call(`ListObjectsV2 ${this.describe(prefix)}`, (c) =>
        c.send(
          new ListObjectsV2Command({
            Bucket: this.bucket,
            Prefix: prefix,
            ContinuationToken: token,
            MaxKeys: pageSize,
          }),
        ),
      );
      for (const o of page.Contents ?? [])
        if (o.Key)
          yield {
            key: o.Key,
            size: o.Size ?? 0,
            modified: o.LastModified?.getTime() ?? 0,
            etag: o.ETag ?? '',
          };
      token = page.IsTruncated ? page.NextContinuationToken : undefined;
    } while (token);
  }

  /** Deletes objects (no error for those already gone), up to 1000 per request. */
  private async remove(keys: string[]): Promise<void> {
    for (let i = 0; i < keys.length; i += DELETE_BATCH) {
      const batch = keys.slice(i, i + DELETE_BATCH);
      if (batch.length === 1) {
        await this.call(`DeleteObject ${this.describe(batch[0]!)}`, (c) =>
          c.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: batch[0] })),
        );
        continue;
      }
      const out = await this.call(`DeleteObjects ${this.describe(batch[0]!)}…`, (c) =>
        c.send(
          new DeleteObjectsCommand({
            Bucket: this.bucket,
            Delete: { Objects: batch.map((Key) => ({ Key })), Quiet: true },
          }),
        ),
      );
      const failed = out.Errors?.[0];
      if (failed)
        throw new S3RequestError(
          `S3 DeleteObject ${this.describe(failed.Key ?? '')} failed: ${failed.Code}: ${failed.Message}`,
          failed.Code ?? 'Error',
        );
    }
  }
}

/** `s3://BUCKET[/PREFIX]` → the bucket, and the prefix ('' or ending in "/"). */
export function parseS3Url(url: string): { bucket: string; prefix: string } {
  const match = /^s3:\/\/([^/?#]*)(?:\/([^?#]*))?$/.exec(url);
  if (!match)
    throw new Error(`The storage URL must be s3://BUCKET or s3://BUCKET/PREFIX, not "${url}"`);
  const bucket = match[1]!;
  if (!/^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$/.test(bucket) || bucket.includes('..'))
    throw new Error(
      `"${bucket}" is not an S3 bucket name: 3 to 63 lower-case letters, digits, "." and "-", starting and ending with a letter or digit`,
    );
  const path = (match[2] ?? '').replace(/\/+$/, '');
  if (path === '') return { bucket, prefix: '' };
  const segments = path.split('/');
  if (
    segments.some((s) => s === '' || s === '.' || s === '..') ||
    /[\u0000-\u001f\u007f\\]/.test(path)
  )
    throw new Error(
      `"${path}" is not a usable key prefix: it must not have empty, "." or ".." parts, backslashes or control characters`,
    );
  return { bucket, prefix: `${path}/` };
}

/** The region of the AWS default chain (AWS_REGION, ~/.aws/config…), else us-east-1. */
async function configuredRegion(): Promise<string> {
  const probe = new S3Client({});
  try {
    return await probe.config.region();
  } catch {
    return 'us-east-1';
  } finally {
    probe.destroy();
  }
}

/** An upload's key: the dzuuid is a client's string and never becomes part of a key itself. */
function uploadKeyOf(uploadId: string): string {
  return createHash('sha256').update(uploadId).digest('hex').slice(0, 40);
}

/** Share ids and content names are server-made; anything else must not become a key. */
function checkName(name: string, what: string): void {
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(name)) throw new Error(`Not a valid ${what}: "${name}"`);
}

function emptyObjects(): UploadObjects {
  return {
    chunks: new Map(),
    tags: new Map(),
    copies: new Map(),
    replaced: [],
    stale: [],
    top: 0,
    keys: [],
    meta: null,
    multipart: false,
    publishing: false,
    newest: 0,
  };
}

function addObject(
  objects: UploadObjects,
  name: string,
  object: { key: string; size: number; modified: number; etag: string },
): void {
  objects.keys.push(object.key);
  objects.newest = Math.max(objects.newest, object.modified);
  const copy = parseCopy(name, object);
  if (copy) {
    objects.top = Math.max(objects.top, copy.token);
    const index = copy.name === 'meta' ? -1 : Number(copy.name);
    const chosen = index < 0 ? objects.meta : objects.copies.get(index);
    // The copy with the highest token wins, in whatever order the PUTs landed.
    if (chosen && chosen.token >= copy.token) return void objects.replaced.push(copy.key);
    if (chosen) objects.replaced.push(chosen.key);
    if (index < 0) return void (objects.meta = copy);
    objects.copies.set(index, copy);
    objects.chunks.set(index, copy.size);
    objects.tags.set(index, copy.etag);
  } else if (name === 'multipart') objects.multipart = true;
  else if (name === 'publishing') objects.publishing = true;
}

/** A tombstone's token, from what follows the upload's key: none (older servers) outranks all. */
function tombstoneToken(suffix: string): number | null {
  if (suffix === '') return Infinity;
  const match = /^\.(\d{1,15})$/.exec(suffix);
  return match ? Number(match[1]) : null;
}

/** A chunk's or meta's copy, from its name under the upload's directory; null for other objects. */
function parseCopy(
  name: string,
  object: { key: string; size: number; etag: string },
): (Copy & { name: string }) | null {
  const match = /^(\d+|meta)(?:\.(\d{1,15}))?$/.exec(name);
  if (!match) return null;
  const { key, size, etag } = object;
  return { name: match[1]!, token: Number(match[2] ?? 0), key, size, etag };
}

/** The content a `publishing` record names, or null when it is cut short or not ours. */
function parsePublishing(text: string | null): NewContent | null {
  if (text === null) return null;
  try {
    const c = JSON.parse(text) as NewContent;
    if (
      typeof c.blob === 'string' &&
      /^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(c.blob) &&
      Number.isSafeInteger(c.size) &&
      typeof c.sha256 === 'string'
    )
      return c;
  } catch {
    // cut short: counts as absent
  }
  return null;
}

function parseMeta(text: string | null): Meta | null {
  if (text === null) return null;
  try {
    const meta = JSON.parse(text) as Meta;
    const layoutOk =
      meta.layout === null ||
      (typeof meta.layout === 'object' &&
        Number.isSafeInteger(meta.layout.chunkSize) &&
        Number.isSafeInteger(meta.layout.fileSize));
    const shaOk = meta.sha256 === undefined || /^[0-9a-f]{64}$/.test(meta.sha256);
    const sizeOk =
      (meta.size === undefined || Number.isSafeInteger(meta.size)) &&
      (meta.chunkSize === undefined || Number.isSafeInteger(meta.chunkSize));
    if (
      meta.v === 1 &&
      Number.isSafeInteger(meta.total) &&
      meta.total >= 1 &&
      layoutOk &&
      shaOk &&
      sizeOk
    )
      return meta;
  } catch {
    // cut short or not ours: counts as absent
  }
  return null;
}

/** Placed mode: every chunk but the last has chunkSize bytes, the last the rest. */
function checkPlacedLength(meta: Meta, index: number, bytes: number): void {
  const { chunkSize, fileSize } = meta.layout!;
  const start = index * chunkSize;
  const length = index < meta.total - 1 ? chunkSize : fileSize - start;
  if (bytes !== length)
    throw new ChunkRefusedError(
      'invalid',
      `Chunk ${index} must have ${length} bytes (dzchunksize and dztotalfilesize), not ${bytes}`,
    );
}

/**
 * The ETag S3 gives an object stored by one PutObject of these bytes (without SSE-KMS): their
 * MD5 in quotes. A store that makes ETags otherwise matches nothing here, which only costs a 409.
 */
async function plainEtag(path: string): Promise<string> {
  const md5 = createHash('md5');
  for await (const piece of createReadStream(path, { highWaterMark: PIECE }))
    md5.update(piece as Buffer);
  return `"${md5.digest('hex')}"`;
}

/**
 * How long content whose removal failed waits before it is tried again (removeDue): at most
 * this, and no longer than content is kept before its removal.
 */
const REMOVE_RETRY_MS = 60_000;

/** A lock lost while a sweep held it: that upload is left to the next sweep. */
function ignoreLost(err: unknown): void {
  if (!(err instanceof LockLostError)) throw err;
}

function isMissing(err: unknown): boolean {
  const failure = err as S3RequestError;
  return failure.status === 404 || failure.code === 'NoSuchKey' || failure.code === 'NotFound';
}

/** Failures worth another try: the network, a 5xx, throttling. */
function transient(err: unknown): boolean {
  if (!(err instanceof S3RequestError)) return false;
  if (err.status === undefined) return !['CredentialsProviderError'].includes(err.code);
  return err.status >= 500 || err.code === 'SlowDown' || err.code === 'RequestTimeout';
}
