import type { Request, RequestHandler, Response, Router } from 'express';
import { DEFAULT_PER_PAGE, MAX_PER_PAGE, type Page } from '../shared/types.js';
import type { Share, User } from '../shared/types.js';
import { HttpError, methodNotAllowed } from './errors.js';
import type { ShareRecord, UserRecord } from './store/index.js';
import { queryInt } from './validate.js';

type Method = 'get' | 'post' | 'put' | 'patch' | 'delete';

/**
 * Registers the handlers of one path. Other methods get 405 with an Allow header unless
 * `fallThrough` is set (POST-only paths under /users/ that GET reads as a user lookup).
 */
export function route(
  router: Router,
  path: string,
  handlers: Partial<Record<Method, RequestHandler>>,
  fallThrough = false,
): void {
  const r = router.route(path);
  const allowed: string[] = [];
  for (const [method, handler] of Object.entries(handlers) as [Method, RequestHandler][]) {
    r[method](handler);
    allowed.push(method.toUpperCase());
    if (method === 'get') allowed.push('HEAD');
  }
  if (!fallThrough) r.all(methodNotAllowed([...allowed, 'OPTIONS']));
}

export function success(res: Response, message: string, status = 200): void {
  res.status(status).json({ status: 'success', message });
}

/** The one place a share becomes JSON. */
export function shareJson(s: ShareRecord): Share {
  return {
    share_id: s.share_id,
    file_name: s.file_name,
    owner_name: s.owner_name,
    initialized: s.initialized,
    locked: s.locked,
    create_date: s.create_date,
    size: s.size,
    sha256: s.initialized ? (s.sha256 ?? null) : null,
    expires: s.expires ?? null,
  };
}

/** The one place a user becomes JSON: never the password hash. */
export function userJson(u: UserRecord, used: number): User {
  return {
    username: u.username,
    permissions: u.permissions,
    register_date: u.register_date,
    quota: u.quota,
    used,
  };
}

/** API.md pagination: `?page` and `?per_page`; a page past the last is a 404 (but page 1). */
export async function paginate<R, T>(
  req: Request,
  total: number,
  slice: (offset: number, limit: number) => Promise<R[]>,
  toJson: (r: R) => T,
): Promise<Page<T>> {
  const page = queryInt(req.query.page, 'page', 1);
  const perPage = queryInt(req.query.per_page, 'per_page', DEFAULT_PER_PAGE, MAX_PER_PAGE);
  const pages = Math.ceil(total / perPage);
  if (page > pages && page !== 1) {
    // Named as sent (less any leading zeros): past 2^53 the number would name another page.
    const sent = String(req.query.page).replace(/^0+/, '');
    throw new HttpError(404, `Page ${sent} is past the last page (${pages})`);
  }
  return {
    data: (await slice((page - 1) * perPage, perPage)).map(toJson),
    prev: page > 1 ? page - 1 : null,
    next: page < pages ? page + 1 : null,
    pages,
  };
}
