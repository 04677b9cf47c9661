import {
  PERMISSIONS,
  isPermission,
  sortPermissions,
  type Permission,
} from '../../shared/permissions.js';
import { UsageError } from '../output.js';

function toPermission(word: string): Permission {
  const upper = word.trim().toUpperCase();
  if (!isPermission(upper))
    throw new UsageError(`unknown permission: ${word} (one of ${PERMISSIONS.join(', ')})`);
  return upper;
}

/** "READ,LIST", "read list" or several arguments → permissions in API order. */
export function parsePermissionList(words: string[]): Permission[] {
  const parts = words.flatMap((w) => w.split(/[\s,]+/)).filter((w) => w !== '');
  if (parts.length === 1 && parts[0]!.toLowerCase() === 'none') return [];
  return sortPermissions(parts.map(toPermission));
}

/** Applies "+READ -LIST" style changes to a permission list. */
export function applyPermissionChanges(current: Permission[], changes: string[]): Permission[] {
  const set = new Set(current);
  for (const change of changes.flatMap((c) => c.split(/[\s,]+/)).filter(Boolean)) {
    const sign = change[0];
    if (sign !== '+' && sign !== '-')
      throw new UsageError(`write +PERM to add or -PERM to remove, not ${change}`);
    const perm = toPermission(change.slice(1));
    if (sign === '+') set.add(perm);
    else set.delete(perm);
  }
  return sortPermissions(set);
}

export function formatPermissions(perms: readonly Permission[]): string {
  return perms.length ? perms.join(', ') : 'none';
}
