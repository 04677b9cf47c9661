import type { ContentStorage } from './storage/index.js';
import type { MetadataStore } from './store/index.js';

/**
 * A handover's second step. An upload belongs to the owner it was started under, so a handover
 * ends the share's unfinished uploads; the storage cannot do that in the metadata's write, so the
 * new owner is recorded together with a mark (`pending_handover`), and the mark is cleared once
 * the uploads have ended. A server killed in between leaves the mark: the next request for the
 * share, or the next start of a server, ends them then. Until then they count for no one.
 *
 * Under a lock of its own, taken by no one holding the share's or an upload's lock: the ending
 * takes upload locks, and a completing chunk takes its upload's lock, then the share's. A chunk
 * of the share that finds the mark waits here, so no upload it starts is ended afterwards.
 */
export async function endFormerUploads(
  store: MetadataStore,
  storage: ContentStorage,
  shareId: string,
  mark: string,
): Promise<void> {
  await store.withShareLock(`handover of ${shareId}`, async () => {
    if ((await store.getShare(shareId))?.pending_handover !== mark) return;
    await storage.removeUploads(shareId);
    // A later handover's mark stays: its own ending is still to come.
    await store.withShareLock(shareId, async () => {
      if ((await store.getShare(shareId))?.pending_handover === mark)
        await store.updateShare(shareId, { pending_handover: null });
    });
  });
}

/**
 * A user's unfinished uploads, from the storage's list (`all`): how many, and the bytes of their
 * stored chunks. Those of the shares they own, but not those a handover to them is ending.
 */
export async function unfinishedOf(
  store: MetadataStore,
  all: Map<string, { uploads: number; bytes: number }>,
  ownerId: string,
): Promise<{ uploads: number; bytes: number }> {
  const mine = { uploads: 0, bytes: 0 };
  for (const [shareId, pending] of all) {
    const share = await store.getShare(shareId);
    if (share?.owner_id !== ownerId || share.pending_handover) continue;
    mine.uploads += pending.uploads;
    mine.bytes += pending.bytes;
  }
  return mine;
}
