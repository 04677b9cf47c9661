import { createHash } from 'node:crypto';
import { constants, createReadStream } from 'node:fs';
import {
  mkdir,
  open,
  readdir,
  readFile,
  rename,
  rm,
  stat,
  unlink,
  writeFile,
} from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';

/** Where content and unfinished uploads live. One file-system implementation today. */
export interface ContentStorage {
  /** Directory where incoming chunk bodies are first written (then moved, never copied). */
  readonly incomingDir: string;
  /**
   * Files a received chunk (a file in `incomingDir`) under its upload and index, replacing an
   * earlier chunk of the same index. Returns how many distinct indexes have arrived.
   */
  putChunk(
    shareId: string,
    uploadId: string,
    index: number,
    total: number,
    file: string,
  ): Promise<number>;
  /**
   * Streams a chunk that names its byte offset straight into the upload's data file: no copy at
   * the end. It counts as arrived only once `placeChunk` records it.
   */
  writePlaced(shareId: string, uploadId: string, offset: number, data: Readable): Promise<number>;
  /** Records a placed chunk; like `putChunk`, returns how many distinct indexes have arrived. */
  placeChunk(
    shareId: string,
    uploadId: string,
    index: number,
    total: number,
    offset: number,
    length: number,
  ): Promise<number>;
  /** Joins the upload's chunks in index order and atomically replaces the share's content. */
  assemble(shareId: string, uploadId: string, total: number): Promise<{ size: number }>;
  /** Path of the share's content, for streaming reads (open it; it may be replaced by rename). */
  contentPath(shareId: string): string;
  /** Removes the share's content and all its unfinished uploads. */
  removeShare(shareId: string): Promise<void>;
  /** Removes uploads idle for longer than `maxIdleMs`. */
  sweep(maxIdleMs: number): Promise<void>;
}

export class TotalMismatchError extends Error {}

/** Placed chunks that leave a gap or overlap: the upload cannot be assembled. */
export class LayoutError extends Error {}

const JOIN_BUFFER = 1024 * 1024;

/**
 * File-system storage. Names on disk come only from server-generated share ids (validated UUIDs)
 * and hashes: `dzuuid` and file names never become paths.
 *
 *   content/<share_id>                                    the share's bytes
 *   uploads/<share_id>.<sha256(dzuuid)>/                one unfinished upload:
 *       total          dztotalchunks, fixed by the first chunk
 *       <index>        a chunk received as a file of its own (clients without offsets)
 *       <index>.at     "offset length" of a chunk written in place into `data`
 *       data           the content being assembled
 *   incoming/                                             chunk bodies being received
 */
export class FileStorage implements ContentStorage {
  readonly incomingDir: string;
  private readonly contentDir: string;
  private readonly uploadsDir: string;

  constructor(dataDir: string) {
    this.contentDir = join(dataDir, 'content');
    this.uploadsDir = join(dataDir, 'uploads');
    this.incomingDir = join(dataDir, 'incoming');
  }

  async init(): Promise<void> {
    for (const dir of [this.contentDir, this.uploadsDir, this.incomingDir]) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
    }
    // Nothing is in flight at start: partial request bodies are leftovers of a crash.
    await this.emptyDir(this.incomingDir);
  }

  private uploadDir(shareId: string, uploadId: string): string {
    const key = createHash('sha256').update(uploadId).digest('hex').slice(0, 40);
    return join(this.uploadsDir, `${shareId}.${key}`);
  }

  /** Creates the upload's directory and fixes its total, or checks it against the first one. */
  private async openUpload(shareId: string, uploadId: string, total: number): Promise<string> {
    const dir = this.uploadDir(shareId, uploadId);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const totalFile = join(dir, 'total');
    const known = await readFile(totalFile, 'utf8').catch(() => null);
    if (known === null) {
      await writeFile(totalFile, String(total), { mode: 0o600 });
    } else if (Number(known) !== total) {
      throw new TotalMismatchError(
        `dztotalchunks is ${total} but earlier chunks of this upload said ${known}`,
      );
    }
    return dir;
  }

  /** The on-disk record of arrival: a chunk file or a placement record per index. */
  private async arrived(dir: string): Promise<number> {
    const indexes = new Set<string>();
    for (const name of await readdir(dir)) {
      const m = /^(\d+)(\.at)?$/.exec(name);
      if (m) indexes.add(m[1]!);
    }
    return indexes.size;
  }

  async putChunk(shareId: string, uploadId: string, index: number, total: number, file: string) {
    const dir = await this.openUpload(shareId, uploadId, total);
    await rm(join(dir, `${index}.at`), { force: true });
    await rename(file, join(dir, String(index)));
    return this.arrived(dir);
  }

  async writePlaced(shareId: string, uploadId: string, offset: number, data: Readable) {
    const dir = this.uploadDir(shareId, uploadId);
    await mkdir(dir, { recursive: true, mode: 0o700 });
    const handle = await open(join(dir, 'data'), constants.O_WRONLY | constants.O_CREAT, 0o600);
    const sink = handle.createWriteStream({ start: offset, highWaterMark: JOIN_BUFFER });
    await pipeline(data, sink);
    return sink.bytesWritten;
  }

  async placeChunk(
    shareId: string,
    uploadId: string,
    index: number,
    total: number,
    offset: number,
    length: number,
  ) {
    const dir = await this.openUpload(shareId, uploadId, total);
    await rm(join(dir, String(index)), { force: true });
    await writeFile(join(dir, `${index}.at`), `${offset} ${length}`, { mode: 0o600 });
    return this.arrived(dir);
  }

  async assemble(shareId: string, uploadId: string, total: number) {
    const dir = this.uploadDir(shareId, uploadId);
    const names = new Set(await readdir(dir));
    if (total === 1 && names.has('0')) return this.adoptSingleChunk(shareId, dir);
    const out = await open(join(dir, 'data'), constants.O_WRONLY | constants.O_CREAT, 0o600);
    let size = 0;
    try {
      for (let i = 0; i < total; i++) {
        if (names.has(`${i}.at`)) {
          // Already in place: only check that it continues exactly where the previous one ended.
          const [offset, length] = (await readFile(join(dir, `${i}.at`), 'utf8'))
            .split(' ')
            .map(Number);
          if (offset !== size) {
            throw new LayoutError(
              `chunk ${i} starts at byte ${offset}, but chunks 0-${i - 1} end at ${size}`,
            );
          }
          size += length!;
          continue;
        }
        // A chunk of its own: copied to its place. 1 MiB reads keep memory flat.
        const chunk = createReadStream(join(dir, String(i)), { highWaterMark: JOIN_BUFFER });
        for await (const data of chunk) {
          const bytes = data as Buffer;
          let off = 0;
          while (off < bytes.length) {
            const { bytesWritten } = await out.write(bytes, off, bytes.length - off, size + off);
            off += bytesWritten;
          }
          size += bytes.length;
        }
      }
      // Bytes past the end come from a chunk cut off by the size limit, or a shorter re-send.
      await out.truncate(size);
      await out.sync();
    } finally {
      await out.close();
    }
    await rename(join(dir, 'data'), this.contentPath(shareId));
    await rm(dir, { recursive: true, force: true });
    return { size };
  }

  /** A one-chunk upload is already the content: made durable and renamed, never copied. */
  private async adoptSingleChunk(shareId: string, dir: string) {
    const chunk = join(dir, '0');
    const handle = await open(chunk, 'r+');
    let size: number;
    try {
      size = (await handle.stat()).size;
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(chunk, this.contentPath(shareId));
    await rm(dir, { recursive: true, force: true });
    return { size };
  }

  contentPath(shareId: string): string {
    return join(this.contentDir, shareId);
  }

  async removeShare(shareId: string): Promise<void> {
    await rm(this.contentPath(shareId), { force: true });
    for (const name of await readdir(this.uploadsDir)) {
      if (name.startsWith(`${shareId}.`)) {
        await rm(join(this.uploadsDir, name), { recursive: true, force: true });
      }
    }
  }

  async sweep(maxIdleMs: number): Promise<void> {
    const cutoff = Date.now() - maxIdleMs;
    for (const name of await readdir(this.uploadsDir)) {
      const dir = join(this.uploadsDir, name);
      const info = await stat(dir).catch(() => null);
      if (info && info.mtimeMs < cutoff) await rm(dir, { recursive: true, force: true });
    }
  }

  private async emptyDir(dir: string): Promise<void> {
    for (const name of await readdir(dir)) await unlink(join(dir, name)).catch(() => undefined);
  }
}
