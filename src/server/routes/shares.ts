import type { Request } from 'express';
import { isUuid } from '../../shared/ids.js';
import type { Permission } from '../../shared/permissions.js';
import { need } from '../auth.js';
import { Errors } from '../errors.js';
import type { ShareRecord, Store } from '../store.js';

/**
 * The checks every /files/<id> endpoint starts with, in API.md's order: permission (401/403),
 * then existence (404; an id that is not a UUID names nothing), then ownership (403) if asked.
 */
export function findShare(
  req: Request,
  store: Store,
  permission: Permission,
  ownerOnly = false,
): ShareRecord {
  need(req, permission);
  const id = String(req.params.id);
  const share = isUuid(id) ? store.getShare(id) : undefined;
  if (!share) throw Errors.shareNotFound();
  if (ownerOnly && share.owner_name !== req.caller.username) throw Errors.notOwner();
  return share;
}
