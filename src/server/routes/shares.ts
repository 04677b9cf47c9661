import type { Request } from 'express';
import { isUuid } from '../../shared/ids.js';
import type { Permission } from '../../shared/permissions.js';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { Errors, HttpError } from '../errors.js';
import { isExpired } from '../expiry.js';
import type { ShareRecord } from '../store/index.js';

/**
 * The checks every /files/<id> endpoint starts with, in API.md's order: permission (401/403),
 * then existence (404; an id that is not a UUID names nothing, and an expired share is gone even
 * before the sweeper deletes it), then ownership (403) if asked.
 */
export async function findShare(
  req: Request,
  { store, clock }: Pick<Context, 'store' | 'clock'>,
  permission: Permission,
  ownerOnly = false,
): Promise<ShareRecord> {
  need(req, permission);
  const id = String(req.params.id);
  const share = isUuid(id) ? await store.getShare(id) : undefined;
  if (!share || isExpired(share, clock())) throw Errors.shareNotFound();
  if (ownerOnly) checkOwner(req, share);
  return share;
}

/** Only the owner, by user id (anonymous callers own the shares that have no owner). */
export function checkOwner(req: Request, share: ShareRecord): void {
  if (share.owner_id !== req.caller.userId) throw Errors.notOwner();
}

/** Links (and a share's expiry beyond the cap) are for the share's owner or an administrator. */
export function isAdmin(req: Request): boolean {
  return req.caller.permissions.includes('ADMIN');
}

/**
 * A share whose owner was deleted is kept, and only DELETE acts on it (docs/API.md): locking it
 * or making a link to it is refused, so nothing can stand in the way of its deletion.
 */
export async function refuseOrphan(store: Context['store'], share: ShareRecord): Promise<void> {
  if (share.owner_id !== null && !(await store.getUserById(share.owner_id)))
    throw new HttpError(403, 'The owner of this share was deleted: only DELETE acts on it now');
}
