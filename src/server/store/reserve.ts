import { randomBytes } from 'node:crypto';
import { open, statfs } from 'node:fs/promises';
import { writeFully } from '../../shared/copy.js';
import { isOutOfSpace } from '../fsutil.js';
import { LIMITS } from '../limits.js';

/**
 * A file of real bytes kept in the data directory so that removals (deleting a share, a link or
 * a user, revoking a token) can be recorded on a disk that something else filled to the last
 * byte: when such a change cannot be appended for lack of space, the file is emptied and the
 * append tried again in the room it held. While it is not whole, `short` is set and every other
 * change waits for it to be made whole again (refused when it cannot be), so that room stays for
 * removals. Random bytes, so a compressing file system cannot make it smaller than it claims.
 */
export class RemovalReserve {
  /** The file is not whole: released, or it could not be made at start. */
  short = false;
  private filling: Promise<void> | null = null;

  constructor(
    private readonly path: string,
    private readonly bytes = LIMITS.removalReserveBytes,
  ) {}

  /** Makes the file whole when the disk has room for it; `short` says whether it is. */
  fill(): Promise<void> {
    this.filling ??= this.write().finally(() => (this.filling = null));
    return this.filling;
  }

  private async write(): Promise<void> {
    const handle = await open(this.path, 'a+', 0o600).catch((err: unknown) => {
      // No inode for it: as short as no room (other failures are the disk's, said elsewhere).
      if (isOutOfSpace(err)) this.short = true;
      throw err;
    });
    try {
      const { size } = await handle.stat();
      if (size >= this.bytes) {
        this.short = false;
        return;
      }
      const fs = await statfs(this.path);
      if (fs.bavail * fs.bsize < this.bytes - size) {
        this.short = true;
        return;
      }
      try {
        await writeFully(handle, randomBytes(this.bytes - size), size);
        await handle.datasync();
        this.short = false;
      } catch (err) {
        // What could be written is given back: a reserve only counts whole.
        await handle.truncate(0).catch(() => undefined);
        if (!isOutOfSpace(err)) throw err;
        this.short = true;
      }
    } finally {
      await handle.close();
    }
  }

  /** Empties the file, giving its room to the disk; false when it held nothing to give. */
  async release(): Promise<boolean> {
    await this.filling?.catch(() => undefined);
    // Short from now on, whatever follows: a removal is never tried again on nothing.
    this.short = true;
    const handle = await open(this.path, 'a+', 0o600);
    try {
      const { size } = await handle.stat();
      if (size === 0) return false;
      await handle.truncate(0);
      return true;
    } finally {
      await handle.close();
    }
  }
}
