import { statfs } from 'node:fs/promises';
import { formatSize } from '../../shared/size.js';
import { InsufficientStorageError } from './index.js';

/**
 * The free-space reserve of a directory's disk (`--min-free`): room is claimed for each incoming
 * body before it is written, counting the bodies already arriving, and refused
 * (InsufficientStorageError, 507) when the free space would fall below the reserve.
 */
export class SpaceReserve {
  private reserved = 0;

  constructor(
    private readonly dir: string,
    private readonly minFreeBytes: number,
  ) {}

  async reserve(bytes: number): Promise<() => void> {
    const fs = await statfs(this.dir);
    const free = fs.bavail * fs.bsize - this.reserved;
    if (free - bytes < this.minFreeBytes) {
      // With the same figures as check(): what this body needs, what is free once the bodies
      // already arriving have theirs, and the reserve.
      throw new InsufficientStorageError(
        `The server has too little free space for this chunk: it needs ${formatSize(bytes)}, has ${formatSize(Math.max(0, free))} free${this.reserved > 0 ? ' beside the chunks arriving now' : ''} and keeps ${formatSize(this.minFreeBytes)} free`,
      );
    }
    this.reserved += bytes;
    let released = false;
    return () => {
      if (!released) this.reserved -= bytes;
      released = true;
    };
  }

  /**
   * Throws InsufficientStorageError when the disk cannot take `bytes` more and keep its reserve
   * (a whole file declared at its first chunk): judged on the free space now, claiming nothing.
   */
  async check(bytes: number): Promise<void> {
    const fs = await statfs(this.dir);
    const free = fs.bavail * fs.bsize;
    if (free - bytes < this.minFreeBytes)
      throw new InsufficientStorageError(
        `The server has too little free space for this file: it needs ${formatSize(bytes)} more, has ${formatSize(free)} free and keeps ${formatSize(this.minFreeBytes)} free`,
      );
  }
}
