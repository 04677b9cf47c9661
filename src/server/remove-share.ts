import { fault } from './faults.js';
import type { ContentStorage } from './storage/index.js';
import { blobOf, type MetadataStore, type ShareRecord } from './store/index.js';

/**
 * Removes a share, for DELETE and for expiry: under the share's lock its content is marked as
 * being let go (`releasing`: a crash after the record's change leaves content a start removes,
 * not sets aside) and its record goes, durably; only then its bytes and unfinished uploads (a
 * failure in between leaves unreferenced files, never a share without content; the share is
 * removed all the same, and the failure is logged).
 *
 * `mayGo` sees the record as it is under the lock: it throws to refuse the removal, or returns
 * false to leave the share as it is (then nothing is returned).
 */
export async function removeShare(
  store: MetadataStore,
  storage: ContentStorage,
  log: (line: string) => void,
  shareId: string,
  mayGo: (current: ShareRecord | undefined) => boolean,
): Promise<ShareRecord | undefined> {
  const gone = await store.withShareLock(shareId, async () => {
    const current = await store.getShare(shareId);
    if (!mayGo(current) || !current) return undefined;
    if (current.initialized) await storage.releasing?.(blobOf(current));
    await store.deleteShare(shareId);
    await fault('delete.after-record');
    return current;
  });
  if (!gone) return undefined;
  // The share is gone with its record: what follows is clean-up, whose failure (an object store
  // not answering) is the log's, not the request's. Found from outside: DELETE answered 503 "try
  // again" for a share it had deleted. Content left behind is no share's: a start removes it
  // (its mark above, or an hour on with S3), and uploads left are ended at a start or swept.
  try {
    if (gone.initialized) await storage.removeContent(blobOf(gone));
    await storage.removeUploads(gone.share_id);
  } catch (err) {
    log(
      `share ${shareId} was deleted, but removing its stored bytes failed (${(err as Error).message}); what is left is removed later`,
    );
  }
  return gone;
}
