import type { Request } from 'express';
import { isPermission, sortPermissions, type Permission } from '../shared/permissions.js';
import { Errors } from './errors.js';
import { LIMITS } from './limits.js';
import { formatDuration } from '../shared/duration.js';
import { parseIsoWithZone } from './dates.js';

/** A JSON request body as received: must be a plain object. */
export type Body = Record<string, unknown>;

/** Marks a body that did not parse: reported as 400 only after API.md's earlier checks (401…423). */
export const UNPARSABLE = Symbol('unparsable JSON body');

export function requireObject(body: unknown, optional = false): Body {
  if (body === UNPARSABLE) throw Errors.badRequest('The request body is not valid JSON');
  if (body === undefined && optional) return {};
  if (body === null || typeof body !== 'object' || Array.isArray(body)) {
    throw Errors.badRequest(
      body === undefined
        ? 'A JSON object body is required (Content-Type: application/json)'
        : 'The body must be a JSON object',
    );
  }
  return body as Body;
}

/**
 * The body of a request whose body is optional (POST /files, POST /files/<id>/links): a JSON
 * object, or nothing at all (`{}`). A body that was sent but is not JSON (text/plain, a form, no
 * Content-Type, `application/vnd.api+json`, an unparsable Content-Type) is a 400, as PATCH
 * answers: one rule for every JSON body, only `application/json` is read as JSON.
 */
export async function optionalObject(req: Request): Promise<Body> {
  if (req.body !== undefined) return requireObject(req.body);
  if (await hasUnreadBody(req))
    throw Errors.badRequest(
      `A JSON object body is required (Content-Type: application/json), not ${req.get('content-type')?.trim() || 'a body without a Content-Type'}`,
    );
  return {};
}

/**
 * For routes that read no body (lock, unlock, DELETE, extend): a body declared JSON that was
 * sent anyway must still parse as a JSON object, else 400 and nothing changes.
 */
export function noJsonBody(req: Request): void {
  if (req.body !== undefined) requireObject(req.body);
}

/** Whether a request carries bytes that no body parser read. */
function hasUnreadBody(req: Request): Promise<boolean> {
  const length = req.headers['content-length'];
  if (req.headers['transfer-encoding'] === undefined)
    return Promise.resolve(length !== undefined && Number(length) !== 0);
  if (req.readableEnded) return Promise.resolve(false);
  return new Promise((resolve) => {
    const done = (found: boolean) => {
      req.off('data', onData);
      req.off('end', onEnd);
      req.off('error', onEnd);
      req.resume(); // the rest is read and dropped
      resolve(found);
    };
    const onData = (chunk: Buffer) => {
      if (chunk.length > 0) done(true);
    };
    const onEnd = () => done(false);
    req.on('data', onData);
    req.once('end', onEnd);
    req.once('error', onEnd);
  });
}

/** API.md: unknown or read-only fields in a body are a 400. */
export function onlyFields(
  body: Body,
  writable: readonly string[],
  readOnly: readonly string[] = [],
) {
  for (const key of Object.keys(body)) {
    if (readOnly.includes(key)) throw Errors.badRequest(`Field "${key}" is read-only`);
    if (!writable.includes(key)) throw Errors.badRequest(`Unknown field "${key}"`);
  }
}

export function requireFields(body: Body, fields: readonly string[]) {
  for (const key of fields) {
    if (!(key in body)) throw Errors.badRequest(`Field "${key}" is required`);
  }
}

/**
 * Whether a string has 1 to `max` characters, counted as Unicode code points (what docs/API.md's
 * "characters" means: '💥' is one, not two UTF-16 units).
 */
export function hasChars(value: string, max: number): boolean {
  if (value.length === 0) return false;
  if (value.length <= max) return true; // never more code points than UTF-16 units
  if (value.length > 2 * max) return false; // never fewer than half
  let n = 0;
  for (const _ of value) if (++n > max) return false;
  return true;
}

export function stringField(body: Body, key: string, max = 1024): string {
  const value = body[key];
  if (typeof value !== 'string' || !hasChars(value, max)) {
    throw Errors.badRequest(
      `Field "${key}" must be a non-empty string of at most ${max} characters`,
    );
  }
  return value;
}

/**
 * A password being set: 1-1024 characters of well-formed Unicode. A lone surrogate would be
 * hashed as U+FFFD, so other strings (any lone surrogate, U+FFFD itself) would sign in with it.
 */
export function passwordField(body: Body, key: string): string {
  const value = stringField(body, key);
  if (!isWellFormed(value))
    throw Errors.badRequest(
      `A password must be well-formed Unicode: field "${key}" has a lone surrogate`,
    );
  return value;
}

/**
 * A share's file name: 1-1024 characters of well-formed Unicode (a lone surrogate cannot be
 * encoded in a header or a file name, so it is refused here rather than fail every download).
 */
export function fileNameField(body: Body, key = 'file_name'): string {
  const value = stringField(body, key, LIMITS.maxFileNameChars);
  if (!isWellFormed(value))
    throw Errors.badRequest(`Field "${key}" must be well-formed Unicode (it has a lone surrogate)`);
  const bad = UNSAFE_NAME_CHAR.exec(value);
  if (bad)
    throw Errors.badRequest(
      `Field "${key}" must not contain control characters (U+0000–U+001F, U+007F–U+009F), line or paragraph separators (U+2028, U+2029) or bidirectional embeddings, overrides and isolates (U+202A–U+202E, U+2066–U+2069); it has U+${bad[0].charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}`,
    );
  return value;
}

/**
 * Characters a file name may not have: C0 controls, DEL, C1 controls (a NUL or CR/LF reaches
 * every client's file system and terminal), the line and paragraph separators (line breaks to
 * editors, log viewers and JavaScript before ES2019), and the bidi embeddings, overrides and
 * isolates that make "txt.exe" show as "exe.txt".
 */
export const UNSAFE_NAME_CHAR =
  /[\u0000-\u001f\u007f-\u009f\u2028\u2029\u202a-\u202e\u2066-\u2069]/;

const LONE_SURROGATE = /[\uD800-\uDBFF](?![\uDC00-\uDFFF])|(?<![\uD800-\uDBFF])[\uDC00-\uDFFF]/g;

/** String.prototype.isWellFormed (ES2024). */
export function isWellFormed(text: string): boolean {
  LONE_SURROGATE.lastIndex = 0;
  return !LONE_SURROGATE.test(text);
}

/** String.prototype.toWellFormed (ES2024): lone surrogates become U+FFFD. */
export function toWellFormed(text: string): string {
  return text.replace(LONE_SURROGATE, '\uFFFD');
}

export function permissionsField(body: Body, key: string): Permission[] {
  const value = body[key];
  if (!Array.isArray(value))
    throw Errors.badRequest(`Field "${key}" must be a list of permissions`);
  for (const p of value) {
    if (!isPermission(p)) throw Errors.badRequest(`Unknown permission ${JSON.stringify(p)}`);
  }
  return sortPermissions(value as Permission[]);
}

const RESERVED_USERNAMES = new Set(['login', 'logout', 'extend', 'password']);
const USERNAME_RE = /^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$/;

/** Whether a name is one a user may have (API.md "Users"); `fshare serve --admin-user` too. */
export function isUsername(value: string): boolean {
  return USERNAME_RE.test(value) && !RESERVED_USERNAMES.has(value.toLowerCase());
}

export function usernameField(body: Body, key = 'username'): string {
  const value = body[key];
  if (typeof value !== 'string' || !USERNAME_RE.test(value)) {
    throw Errors.badRequest(
      `Field "${key}" must be 1-64 characters of letters, digits, ".", "_", "@" or "-", starting with a letter or digit`,
    );
  }
  if (RESERVED_USERNAMES.has(value.toLowerCase())) {
    throw Errors.badRequest(`"${value}" is reserved and cannot be a username`);
  }
  return value;
}

/** A storage quota: a whole number of bytes, or null for none. */
export function quotaField(body: Body, key = 'quota'): number | null {
  const value = body[key];
  if (value === null) return null;
  if (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 0)
    throw Errors.badRequest(`Field "${key}" must be a number of bytes (0 or more), or null`);
  return value;
}

/** A positive integer from a query string; `fallback` when absent. */
export function queryInt(value: unknown, name: string, fallback: number, max?: number): number {
  if (value === undefined) return fallback;
  if (typeof value !== 'string' || !/^\d+$/.test(value)) {
    throw Errors.badRequest(`"${name}" must be a positive integer`);
  }
  const n = Number(value);
  if (n < 1) throw Errors.badRequest(`"${name}" must be at least 1`);
  if (max !== undefined && n > max) throw Errors.badRequest(`"${name}" must be at most ${max}`);
  return n;
}

/**
 * An expiry in a body (docs/API.md "Expiry"): `expires_in` (whole seconds from now) or
 * `expires` (an ISO 8601 time with a zone, or null for never). Undefined when neither is given.
 * `cap` is the longest expiry this caller may give (settings.max_expiry for users without ADMIN).
 */
export function expiryField(
  body: Body,
  now: number,
  cap: number | null,
): string | null | undefined {
  const hasIn = 'expires_in' in body;
  const hasAt = 'expires' in body;
  if (hasIn && hasAt) throw Errors.badRequest('Give "expires" or "expires_in", not both');
  let at: number | null;
  if (hasIn) {
    const value = body.expires_in;
    if (value === null) at = null;
    else if (
      typeof value !== 'number' ||
      !Number.isSafeInteger(value) ||
      value < 1 ||
      value > LIMITS.maxExpirySeconds
    )
      throw Errors.badRequest(
        `Field "expires_in" must be a number of seconds from 1 to ${LIMITS.maxExpirySeconds}, or null`,
      );
    else at = now + value * 1000;
  } else if (hasAt) {
    const value = body.expires;
    if (value === null) at = null;
    else {
      // A real time: "2030-02-30T00:00:00Z" is refused, not read as 2 March.
      const parsed = typeof value === 'string' ? parseIsoWithZone(value) : NaN;
      if (Number.isNaN(parsed))
        throw Errors.badRequest(
          'Field "expires" must be an ISO 8601 time with a zone that names a real date and time (2026-12-01T12:00:00Z), or null',
        );
      if (parsed <= now) throw Errors.badRequest('Field "expires" is in the past');
      if (parsed > now + LIMITS.maxExpirySeconds * 1000)
        throw Errors.badRequest(`Field "expires" is more than ${LIMITS.maxExpirySeconds} s away`);
      at = parsed;
    }
  } else return undefined;
  if (cap !== null && (at === null || at > now + cap * 1000))
    throw Errors.badRequest(
      `The server allows an expiry of at most ${cap} s (${formatDuration(cap)}) from now; ${at === null ? '"never" is' : 'this is'} beyond it`,
    );
  return at === null ? null : new Date(at).toISOString();
}

/** A download limit in a body: a positive whole number, or null for none. */
export function maxDownloadsField(body: Body, cap: number | null): number | null | undefined {
  if (!('max_downloads' in body)) return undefined;
  const value = body.max_downloads;
  if (value !== null && (typeof value !== 'number' || !Number.isSafeInteger(value) || value < 1))
    throw Errors.badRequest('Field "max_downloads" must be a whole number of 1 or more, or null');
  if (cap !== null && (value === null || value > cap))
    throw Errors.badRequest(`The server allows at most ${cap} downloads per link`);
  return value;
}
