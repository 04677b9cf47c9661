import type { Readable, Writable } from 'node:stream';
import type { Owner } from './owner.js';

/**
 * Content storage: the bytes of shares and of unfinished chunked uploads. One implementation
 * today (files.ts); routes only see this interface. Its promises:
 *
 * - A chunk is stored durably before `commit` resolves; a chunk that is refused (or whose request
 *   fails) leaves its upload as it was, and its bytes never reach content.
 * - New content appears whole or not at all: it is written and made durable under a new name,
 *   then handed to `publish`, which makes it the share's content. If publish throws, the new
 *   content is dropped and the old stays.
 * - Once an upload has completed, failed its digest, been swept or lost its share, a late chunk
 *   of it is refused (UploadFinishedError) and changes nothing.
 * - The sha256 of new content is computed while its bytes arrive.
 */
export interface ContentStorage {
  /**
   * Start-up: removes content no share refers to and what unfinished requests left behind.
   * `referenced` tells whether a content name is in use. With `owner`, content no share names
   * is removed only if the storage belongs to that store (owner.ts: ForeignContentError).
   */
  init(referenced: (blob: string) => boolean, owner?: Owner): Promise<void>;

  /**
   * Claims room for an incoming body of about `bytes` bytes, or throws InsufficientStorageError
   * when the free space would fall below the reserve. Call the returned function when done.
   */
  reserve(bytes: number): Promise<() => void>;

  /**
   * Throws InsufficientStorageError when the disk that keeps the content cannot take `bytes`
   * more beyond its reserve. Absent where content is kept elsewhere (S3): no such bound.
   */
  holdsMore?(bytes: number): Promise<void>;

  /**
   * Receives a chunk's bytes as they stream in. `fields` are the chunk's fields when they came
   * before its data in the request, else null. Resolves when the bytes are stored (not yet part
   * of the upload: that is `commit`).
   */
  receive(
    shareId: string,
    fields: ChunkFields | null,
    body: Readable,
    maxBytes: number,
  ): Promise<ReceivedChunk>;

  /** Drops a received chunk that will not be committed. */
  discard(chunk: ReceivedChunk): Promise<void>;

  /**
   * Makes a received chunk part of its upload, durably. When that completes the upload, the new
   * content is handed to `publish` (which returns the content name it replaced, if any) and
   * 'complete' is returned; otherwise 'stored'.
   */
  commit(
    shareId: string,
    fields: ChunkFields,
    chunk: ReceivedChunk,
    publish: (content: NewContent) => Promise<string | undefined>,
  ): Promise<'stored' | 'complete'>;

  /** True when an upload of this share with this dzuuid has stored chunks and is not finished. */
  isUnfinished(shareId: string, uploadId: string): Promise<boolean>;

  /**
   * What the server holds of one upload of a share: the indexes of its committed chunks (sorted)
   * and the bytes they hold; 'finished' when it completed, failed its digest or was removed less
   * than the tombstone period ago (a late chunk would be refused); null when there is none.
   */
  uploadStatus(
    shareId: string,
    uploadId: string,
  ): Promise<{ total: number; received: number[]; bytes: number } | 'finished' | null>;

  /** Per share with unfinished uploads: how many, and the bytes their stored chunks hold. */
  unfinished(): Promise<Map<string, { uploads: number; bytes: number }>>;

  /** Opens content for reading; null when it does not exist. */
  open(blob: string): Promise<ContentReader | null>;

  /** The sha256 of stored content (for shares stored before digests were kept). */
  digest(blob: string): Promise<string>;

  /**
   * Called before a record stops naming `blob` (a removal, a replacement, an expiry), so that a
   * start that finds it named by no share (a crash before removeContent) knows it was let go and
   * removes it, rather than setting it aside as content it cannot account for. Never throws (a
   * removal works on a full disk); without it such content is set aside.
   */
  releasing?(blob: string): Promise<void>;

  /** Removes content (no error when it is already gone). */
  removeContent(blob: string): Promise<void>;

  /** Removes every unfinished upload of a share; late chunks of them are refused. */
  removeUploads(shareId: string): Promise<void>;

  /** Removes one unfinished upload of a share (if it has stored chunks); late chunks are refused. */
  removeUpload(shareId: string, uploadId: string): Promise<void>;

  /** Removes uploads idle for longer than `maxIdleMs`, and old records of finished ones. */
  sweep(maxIdleMs: number): Promise<void>;

  close(): Promise<void>;
}

/** Dropzone's placed-chunk layout: every chunk but the last has `chunkSize` bytes. */
export interface Layout {
  chunkSize: number;
  fileSize: number;
}

/** The chunk-protocol fields of one chunk, checked (API.md, and our additive ones). */
export interface ChunkFields {
  uploadId: string;
  index: number;
  total: number;
  /** dzchunkbyteoffset */
  offset?: number;
  /** dzchunksize and dztotalfilesize, both given: the chunk can be written in place. */
  layout?: Layout;
  /** dzchunksize, given with or without dztotalfilesize: every chunk but the last has it. */
  chunkSize?: number;
  /** dztotalfilesize, given with or without dzchunksize: what the whole upload must hold. */
  fileSize?: number;
  /** dzsha256: the whole file's sha256 as the client computed it (lower-case hex). */
  sha256?: string;
}

/** A received chunk, as `receive` left it; only the storage that made it looks inside. */
export interface ReceivedChunk {
  readonly bytes: number;
  /** More bytes arrived than `receive` was allowed to store; the excess was not stored. */
  readonly overflow: boolean;
}

export interface NewContent {
  blob: string;
  size: number;
  sha256: string;
}

export interface ContentReader {
  size: number;
  mtimeMs: number;
  /** Streams bytes [start, end] (inclusive); the stream closes the reader when it ends. */
  stream(start: number, end: number): Readable;
  /**
   * Optional, and preferred when present: writes bytes [start, end] (inclusive) to `out` from a
   * few buffers used again and again (each write awaited), then closes the reader. Rejects when
   * `out` fails (the client went away) or `signal` aborts (its connection closed); the reader
   * is closed either way.
   */
  writeTo?(out: Writable, start: number, end: number, signal?: AbortSignal): Promise<void>;
  close(): Promise<void>;
}

/** Why a chunk was refused; routes turn these into HTTP answers. */
export class ChunkRefusedError extends Error {
  constructor(
    readonly reason: 'invalid' | 'finished' | 'superseded' | 'digest',
    message: string,
  ) {
    super(message);
  }
}

/** Not enough free space for the body (or the disk is full). */
export class InsufficientStorageError extends Error {}

/**
 * The content storage could not be reached or failed on its side (an object store's 5xx, a
 * network error): the request is answered 503 with Retry-After, and nothing was changed.
 */
export class StorageUnavailableError extends Error {}

/**
 * Stored content that is not what its record says (a size other than the recorded one): damage
 * on the disk or in the bucket, which no retry mends. 503 without Retry-After, and a log line.
 */
export class DamagedContentError extends StorageUnavailableError {}

/**
 * Content its record names that the storage does not hold, the storage itself there (an older
 * db.json restored): no retry brings it back.
 */
export class MissingContentError extends StorageUnavailableError {}
