import { writeSync } from 'node:fs';
import type { FileHandle } from 'node:fs/promises';
import type { Writable } from 'node:stream';

/**
 * The most one write() call is given. Writes of 1 MiB made the kernel put the page cache in large
 * folios, which on the benchmark's VM come from memory the hypervisor had taken back (free page
 * reporting works on 2 MiB blocks): the same 512 MiB cost 1–1.8 s of system time in 1 MiB writes
 * and 0.2–0.5 s in 256 KiB writes (bench/README.md, "Downloads: where the writes go"). Elsewhere
 * the extra system calls cost nothing measurable.
 */
export const WRITE_MAX = 256 * 1024;

/**
 * Writes every byte or throws: a short write (a disk filling up) is continued, and one that
 * makes no progress is an error, never a silent loss. `position` null appends at the file's end.
 */
export async function writeFully(
  handle: FileHandle,
  bytes: Uint8Array,
  position: number | null,
): Promise<void> {
  let done = 0;
  while (done < bytes.length) {
    const { bytesWritten } = await handle.write(
      bytes,
      done,
      Math.min(bytes.length - done, WRITE_MAX),
      position === null ? null : position + done,
    );
    if (bytesWritten <= 0)
      throw Object.assign(new Error('write made no progress'), { code: 'EIO' });
    done += bytesWritten;
  }
}

/**
 * writeFully for code that must not yield: the same rules, with writeSync. `position` null writes
 * at the descriptor's own offset (standard output redirected to a file).
 */
export function writeFullySync(fd: number, bytes: Uint8Array, position: number | null): void {
  for (let done = 0; done < bytes.length;) {
    const at = position === null ? null : position + done;
    const n = writeSync(fd, bytes, done, Math.min(bytes.length - done, WRITE_MAX), at);
    if (n <= 0) throw Object.assign(new Error('write made no progress'), { code: 'EIO' });
    done += n;
  }
}

/** Pieces are read and written in this size. */
const PIECE = 1024 * 1024;

/** Pieces, by size, used again from one transfer to the next: memory stays flat. */
const spare = new Map<number, Buffer[]>();
/** At most this many of each size wait to be used again; more in use at once are allocated. */
const MAX_SPARE = 8;

/**
 * A piece of memory (1 MiB unless told), from those given back if there is one. With a fresh
 * pair per chunk, a 512 MiB upload in 8 MiB chunks left 128 MiB of pieces for the garbage
 * collector to find.
 */
export function takePiece(size = PIECE): Buffer {
  return spare.get(size)?.pop() ?? Buffer.allocUnsafeSlow(size);
}

/** Gives pieces back once nothing reads or writes them any more. */
export function givePieces(...pieces: Buffer[]): void {
  for (const piece of pieces) {
    let list = spare.get(piece.length);
    if (!list) spare.set(piece.length, (list = []));
    if (list.length < MAX_SPARE) list.push(piece);
  }
}

/** Lets every spare piece go: a process that has gone idle gives their memory back. */
export function dropSparePieces(): void {
  spare.clear();
}

/** The file ended before the range did: it is shorter than it was (changed, or damaged). */
export class ShortFileError extends Error {
  override readonly name = 'ShortFileError';
}

/**
 * Writes bytes [start, end) of an open file to `out` through two 1 MiB buffers used in turn: one
 * is read into while the other is written, and a buffer is read into again only once its write
 * is done (each write's callback awaited). A fresh Buffer per read, as createReadStream makes,
 * left tens of MB of garbage per transfer. Rejects when `out` fails or closes (the peer went
 * away) and when the file ends early (ShortFileError); the handle stays the caller's.
 */
export async function writeFileRange(
  handle: FileHandle,
  out: Writable,
  start: number,
  end: number,
  signal?: AbortSignal,
): Promise<void> {
  if (end <= start) return;
  const buffers = [takePiece(), takePiece()];
  let writing: Promise<void> | undefined;
  // A connection that closes may leave a write's callback uncalled: its close ends the wait, and
  // so does `signal` (an answer queued behind another on its connection gets no close of its own).
  let cut: ((err: Error) => void) | undefined;
  const onClose = () => cut?.(new Error('the connection closed'));
  out.once('close', onClose);
  signal?.addEventListener('abort', onClose);
  try {
    if (signal?.aborted) throw new Error('the connection closed');
    for (let at = start, turn = 0; at < end; turn ^= 1) {
      const buffer = buffers[turn]!;
      const { bytesRead } = await handle.read(buffer, 0, Math.min(PIECE, end - at), at);
      if (bytesRead === 0) throw new ShortFileError(`the file ended at byte ${at} of ${end}`);
      await writing; // the other buffer's write: at most one in flight, and this one is free
      if (out.destroyed || signal?.aborted) throw new Error('the connection closed');
      const piece = buffer.subarray(0, bytesRead);
      writing = new Promise<void>((resolve, reject) => {
        cut = reject;
        out.write(piece, (err) => (err ? reject(err) : resolve()));
      });
      writing.catch(() => undefined); // awaited at the next turn; never an unhandled rejection
      at += bytesRead;
    }
    await writing;
    givePieces(...buffers);
  } finally {
    out.off('close', onClose);
    signal?.removeEventListener('abort', onClose);
  }
}
