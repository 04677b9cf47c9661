import { createHash, randomUUID } from 'node:crypto';
import { createReadStream } from 'node:fs';
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

const JOIN_BUFFER = 1024 * 1024;

/**
 * File-system storage. Names on disk come only from server-generated share ids (validated UUIDs)
 * and hashes: `dzuuid` and file names never become paths.
 *
 *   content/<share_id>                                    the share's bytes
 *   uploads/<share_id>.<sha256(dzuuid)>/total, /<index>   one unfinished upload
 *   incoming/                                             chunk bodies being received
 *   tmp/                                                  joins in progress
 */
export class FileStorage implements ContentStorage {
  readonly incomingDir: string;
  private readonly contentDir: string;
  private readonly uploadsDir: string;
  private readonly tmpDir: string;

  constructor(dataDir: string) {
    this.contentDir = join(dataDir, 'content');
    this.uploadsDir = join(dataDir, 'uploads');
    this.incomingDir = join(dataDir, 'incoming');
    this.tmpDir = join(dataDir, 'tmp');
  }

  async init(): Promise<void> {
    for (const dir of [this.contentDir, this.uploadsDir, this.incomingDir, this.tmpDir]) {
      await mkdir(dir, { recursive: true, mode: 0o700 });
    }
    // Nothing is in flight at start: partial request bodies and joins are leftovers of a crash.
    await this.emptyDir(this.incomingDir);
    await this.emptyDir(this.tmpDir);
  }

  private uploadDir(shareId: string, uploadId: string): string {
    const key = createHash('sha256').update(uploadId).digest('hex').slice(0, 40);
    return join(this.uploadsDir, `${shareId}.${key}`);
  }

  async putChunk(shareId: string, uploadId: string, index: number, total: number, file: string) {
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
    // The chunk's presence under its index is the on-disk record that it arrived.
    await rename(file, join(dir, String(index)));
    const names = await readdir(dir);
    return names.filter((n) => /^\d+$/.test(n)).length;
  }

  async assemble(shareId: string, uploadId: string, total: number) {
    const dir = this.uploadDir(shareId, uploadId);
    if (total === 1) return this.adoptSingleChunk(shareId, dir);
    const tmp = join(this.tmpDir, randomUUID());
    const out = await open(tmp, 'w', 0o600);
    let size = 0;
    try {
      for (let i = 0; i < total; i++) {
        // 1 MiB reads: few system calls, and memory stays flat whatever the chunk size.
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
      await out.sync();
    } catch (err) {
      await out.close();
      await rm(tmp, { force: true });
      throw err;
    }
    await out.close();
    await rename(tmp, this.contentPath(shareId));
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
