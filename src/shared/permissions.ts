/** The seven permission names of API.md, in their canonical serialisation order. */
export const PERMISSIONS = ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'ADMIN', 'READ'] as const;

export type Permission = (typeof PERMISSIONS)[number];

export function isPermission(value: unknown): value is Permission {
  return typeof value === 'string' && (PERMISSIONS as readonly string[]).includes(value);
}

/** Deduplicates and orders permissions as API.md serialises them. */
export function sortPermissions(perms: Iterable<Permission>): Permission[] {
  const set = new Set(perms);
  return PERMISSIONS.filter((p) => set.has(p));
}
