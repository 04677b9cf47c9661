import { randomUUID } from 'node:crypto';
import type { Permission } from '../shared/permissions.js';
import type {
  CreatedResponse,
  Link,
  LoginResponse,
  Page,
  Settings,
  Share,
  StatusResponse,
  User,
  Whoami,
} from '../shared/types.js';
import { callJson, header, isRecord, type AnswerShape, type ApiClient } from './http.js';
import { sharePath } from './refs.js';
import { isUuid } from '../shared/ids.js';

export interface PageQuery {
  page?: number;
  perPage?: number;
}

function pageQuery(q: PageQuery = {}): Record<string, number | undefined> {
  return { page: q.page, per_page: q.perPage };
}

function userPath(username: string): string {
  return `/users/${encodeURIComponent(username)}`;
}

// What each answer must be (docs/CLI.md "Errors and exit codes": an answer of another shape is
// one clear error, never a success the server did not state, nor a crash deep in a command).

const isString = (v: unknown): v is string => typeof v === 'string';
const isStringList = (v: unknown) => Array.isArray(v) && v.every(isString);
const isCount = (v: unknown) => Number.isSafeInteger(v) && (v as number) >= 0;
const orNull =
  (ok: (v: unknown) => boolean) =>
  (v: unknown): boolean =>
    v === null || ok(v);
/** A field only fshare serve sends (API.md's **Additive** ones): absent, or of its type. */
const extension =
  (ok: (v: unknown) => boolean) =>
  (v: unknown): boolean =>
    v === undefined || ok(v);
/** A bearer token: one word of visible ASCII, as an Authorization header carries it. */
const isToken = (v: unknown) => isString(v) && /^[\x21-\x7e]+$/.test(v);
/** A sha256 in hex (fshare serve writes lower case; either case is a digest). */
const isSha256 = (v: unknown) => isString(v) && /^[0-9a-fA-F]{64}$/.test(v);

/** Every change the API makes answers `{"status": "success", …}` (API.md "Bodies"). */
const SUCCESS: AnswerShape = { what: 'a success', ok: (b) => b.status === 'success' };
/** A sign-in: the user's name and a token that can be stored and sent as it is. */
const TOKEN: AnswerShape = {
  what: 'a token',
  ok: (b) =>
    b.status === 'success' && isString(b.username) && b.username !== '' && isToken(b.auth_token),
};
/** A changed password: fshare serve adds a new token (and the name), other servers do not. */
const PASSWORD_CHANGED: AnswerShape = {
  what: 'a success',
  ok: (b) =>
    b.status === 'success' &&
    (b.auth_token === undefined ||
      (isToken(b.auth_token) && isString(b.username) && b.username !== '')),
};
/** A new user: its address in `url`. */
const CREATED: AnswerShape = {
  what: 'a success with the new address',
  ok: (b) =>
    b.status === 'success' && isString(b.url) && !['', '.', '..'].includes(idFromUrl(b.url)),
};
/**
 * A new share: its address in `url`, ending in the share's id, a UUID (API.md "Shares"). Found
 * from outside: an answer of `/files/<id>/../../users` sent the chunks, then a DELETE, to
 * `/files/users`.
 */
const SHARE_CREATED: AnswerShape = {
  what: 'a success with the address of the new share',
  ok: (b) => b.status === 'success' && isString(b.url) && isUuid(idFromUrl(b.url)),
};
/** A share (API.md "Shares"); `size`, `sha256` and `expires` are fshare serve's own. */
const isShare = (b: Record<string, unknown>) =>
  isString(b.share_id) &&
  isString(b.file_name) &&
  orNull(isString)(b.owner_name) &&
  typeof b.initialized === 'boolean' &&
  typeof b.locked === 'boolean' &&
  isString(b.create_date) &&
  extension(orNull(isCount))(b.size) &&
  extension(orNull(isSha256))(b.sha256) &&
  extension(orNull(isString))(b.expires);
/** The share asked for by its id, not another (UUIDs compare without case). */
const shareWithId = (id: string): AnswerShape => ({
  what: `the share ${id}`,
  ok: (b) => isShare(b) && (b.share_id as string).toLowerCase() === id.toLowerCase(),
});
const isUser = (b: Record<string, unknown>) =>
  isString(b.username) &&
  isStringList(b.permissions) &&
  isString(b.register_date) &&
  extension(orNull(isCount))(b.quota) &&
  extension(isCount)(b.used);
const USER: AnswerShape = { what: 'a user', ok: isUser };
/** A share link (fshare serve's own, so every field is there). */
const isLink = (b: Record<string, unknown>) =>
  isString(b.id) &&
  isString(b.share_id) &&
  orNull(isString)(b.file_name) &&
  orNull(isString)(b.created_by) &&
  isString(b.create_date) &&
  orNull(isString)(b.expires) &&
  orNull(isCount)(b.max_downloads) &&
  isCount(b.downloads) &&
  orNull(isCount)(b.downloads_left) &&
  typeof b.has_password === 'boolean' &&
  isString(b.state);
const WHOAMI: AnswerShape = {
  what: 'an identity',
  ok: (b) => (b.username === null || isString(b.username)) && isStringList(b.permissions),
};
const SETTINGS: AnswerShape = {
  what: 'the settings',
  ok: (b) => isStringList(b.default_permissions),
};
/**
 * Page `page` of a list of `item`s (API.md "Pagination"): a "data" list of them, the number of
 * `pages`, and `next`, null or a later page that exists. A `next` that does not move on would
 * have a client walking every page ask for the same ones forever.
 */
const pageOf = (item: (b: Record<string, unknown>) => boolean, page: number): AnswerShape => ({
  what: 'a page of a list',
  ok: (b) =>
    Array.isArray(b.data) &&
    b.data.every((i) => isRecord(i) && item(i)) &&
    isCount(b.pages) &&
    (b.next === null ||
      (Number.isSafeInteger(b.next) &&
        (b.next as number) > page &&
        (b.next as number) <= (b.pages as number))),
});
const listOf = (item: (b: Record<string, unknown>) => boolean): AnswerShape => ({
  what: 'a list',
  ok: (b) => Array.isArray(b.data) && b.data.every((i) => isRecord(i) && item(i)),
});
const UPLOAD_STATE: AnswerShape = {
  what: 'the state of an upload',
  ok: (b) =>
    Number.isSafeInteger(b.total) &&
    Array.isArray(b.received) &&
    b.received.every((i) => Number.isSafeInteger(i)),
};
const NEW_LINK: AnswerShape = {
  what: 'a new link',
  ok: (b) => b.status === 'success' && isLink(b) && isString(b.url) && isString(b.download_url),
};

// Authentication

export function login(
  client: ApiClient,
  username: string,
  password: string,
): Promise<LoginResponse> {
  return callJson(client, {
    method: 'POST',
    path: '/users/login',
    json: { username, password },
    expect: TOKEN,
  });
}

export function extend(client: ApiClient): Promise<LoginResponse> {
  return callJson(client, { method: 'POST', path: '/users/extend', expect: TOKEN });
}

/** Revokes `token` (by default the client's own). */
export function logout(client: ApiClient, token = client.token): Promise<StatusResponse> {
  return callJson(client, {
    method: 'POST',
    path: '/users/logout',
    json: { token },
    expect: SUCCESS,
  });
}

/**
 * Changes the caller's own password. fshare serve ends every token issued before and answers
 * with a new one (`auth_token`); other servers answer without it.
 */
export function changePassword(
  client: ApiClient,
  oldPassword: string,
  newPassword: string,
): Promise<StatusResponse & Partial<LoginResponse>> {
  return callJson(client, {
    method: 'POST',
    path: '/users/password',
    json: { old: oldPassword, new: newPassword },
    expect: PASSWORD_CHANGED,
  });
}

export function whoami(client: ApiClient): Promise<Whoami> {
  return callJson(client, { method: 'GET', path: '/whoami', expect: WHOAMI });
}

// Shares

export function listFiles(client: ApiClient, query?: PageQuery): Promise<Page<Share>> {
  return callPage(client, '/files', isShare, query);
}

/** fshare extension: when a share or link ends; seconds from now, or null for never. */
export interface ExpiryRequest {
  expires_in?: number | null;
}

/**
 * A share made by POST /files; `replayed`: fshare serve answered an earlier create with this key.
 * `keyTaken`: the server said whether it was a repeat (`Idempotent-Replayed`, true or false), so
 * when it was not, no earlier create with this key made anything; a server that ignores the key
 * (the reference server) says nothing.
 */
export interface CreatedShare extends CreatedResponse {
  replayed: boolean;
  keyTaken: boolean;
}

export async function createFile(
  client: ApiClient,
  fileName?: string,
  extra: ExpiryRequest = {},
  key: string = randomUUID(),
): Promise<CreatedShare> {
  let said: string | undefined;
  const created = await callJson<CreatedResponse>(client, {
    method: 'POST',
    path: '/files',
    json: { ...(fileName === undefined ? {} : { file_name: fileName }), ...extra },
    // A create whose answer is lost is sent again with the same key: fshare serve then answers
    // with the share the first one made. (A server without the extension may make a second,
    // empty share, as running the command again would.)
    idempotencyKey: key,
    expect: SHARE_CREATED,
    onHeaders: (headers) => (said = header(headers, 'idempotent-replayed')?.trim().toLowerCase()),
  });
  return { ...created, replayed: said === 'true', keyTaken: said === 'true' || said === 'false' };
}

/**
 * Every share whose name is `file_name`, or starts with `name_prefix`. fshare serve filters on
 * the server (docs/API.md "Finding shares by name"); a server that ignores the query lists
 * everything, so the client walks every page and filters again: correct either way.
 */
export async function findShares(
  client: ApiClient,
  filter: { file_name: string } | { name_prefix: string },
): Promise<Share[]> {
  const matches = (s: Share) =>
    'file_name' in filter
      ? s.file_name === filter.file_name
      : s.file_name.startsWith(filter.name_prefix);
  const found: Share[] = [];
  let page: number | null = 1;
  while (page !== null) {
    const result: Page<Share> = await callJson(client, {
      method: 'GET',
      path: '/files',
      query: { ...filter, page, per_page: 1000 },
      expect: pageOf(isShare, page),
    });
    for (const s of result.data) if (matches(s)) found.push(s);
    page = result.next;
  }
  return found;
}

/** The share `id`; an answer that is not a share, or is another share, is an ApiError. */
export function getFile(client: ApiClient, id: string): Promise<Share> {
  return callJson<Share>(client, { method: 'GET', path: sharePath(id), expect: shareWithId(id) });
}

export interface ShareChanges {
  file_name?: string;
  owner_name?: string | null;
  /** fshare extension (seconds from now, or null: never). */
  expires_in?: number | null;
}

export function patchFile(
  client: ApiClient,
  id: string,
  changes: ShareChanges,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PATCH', path: sharePath(id), json: changes, expect: SUCCESS });
}

export function putFile(
  client: ApiClient,
  id: string,
  share: Required<ShareChanges>,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PUT', path: sharePath(id), json: share, expect: SUCCESS });
}

export function deleteFile(client: ApiClient, id: string): Promise<StatusResponse> {
  return callJson(client, {
    method: 'DELETE',
    path: sharePath(id),
    expect: SUCCESS,
    repeatable: true,
  });
}

/** fshare extension: which chunks of an unfinished upload the server holds. */
export interface UploadState {
  dzuuid: string;
  total: number;
  received: number[];
}

export function uploadState(client: ApiClient, id: string, dzuuid: string): Promise<UploadState> {
  return callJson(client, {
    method: 'GET',
    path: `${sharePath(id)}/uploads/${encodeURIComponent(dzuuid)}`,
    expect: UPLOAD_STATE,
  });
}

export function lockFile(client: ApiClient, id: string): Promise<StatusResponse> {
  return callJson(client, {
    method: 'POST',
    path: `${sharePath(id)}/lock`,
    expect: SUCCESS,
    repeatable: true,
  });
}

export function unlockFile(client: ApiClient, id: string): Promise<StatusResponse> {
  return callJson(client, {
    method: 'POST',
    path: `${sharePath(id)}/unlock`,
    expect: SUCCESS,
    repeatable: true,
  });
}

// Share links (fshare extension)

export interface NewLink extends ExpiryRequest {
  max_downloads?: number | null;
  password?: string;
}

export function createLink(
  client: ApiClient,
  id: string,
  link: NewLink,
): Promise<Link & { url: string; download_url: string }> {
  return callJson(client, {
    method: 'POST',
    path: `${sharePath(id)}/links`,
    json: link,
    expect: NEW_LINK,
  });
}

export function shareLinks(client: ApiClient, id: string): Promise<{ data: Link[] }> {
  return callJson(client, {
    method: 'GET',
    path: `${sharePath(id)}/links`,
    expect: listOf(isLink),
  });
}

export function listLinks(client: ApiClient, query?: PageQuery): Promise<Page<Link>> {
  return callPage(client, '/links', isLink, query);
}

export function deleteLink(client: ApiClient, linkId: string): Promise<StatusResponse> {
  return callJson(client, {
    method: 'DELETE',
    path: `/links/${encodeURIComponent(linkId)}`,
    expect: SUCCESS,
    repeatable: true,
  });
}

// Users

export function listUsers(client: ApiClient, query?: PageQuery): Promise<Page<User>> {
  return callPage(client, '/users', isUser, query);
}

export function getUser(client: ApiClient, username: string): Promise<User> {
  return callJson(client, { method: 'GET', path: userPath(username), expect: USER });
}

/** GET /users/<name> with its ETag (fshare serve; undefined from a server that sends none). */
export async function getUserTagged(
  client: ApiClient,
  username: string,
): Promise<{ user: User; etag: string | undefined }> {
  let etag: string | undefined;
  const user = await callJson<User>(client, {
    method: 'GET',
    path: userPath(username),
    expect: USER,
    onHeaders: (headers) => (etag = header(headers, 'etag')),
  });
  return { user, etag };
}

export interface NewUser {
  username: string;
  password: string;
  permissions: Permission[];
}

export function createUser(client: ApiClient, user: NewUser): Promise<CreatedResponse> {
  return callJson(client, { method: 'POST', path: '/users', json: user, expect: CREATED });
}

export function patchUser(
  client: ApiClient,
  username: string,
  changes: Partial<NewUser>,
  ifMatch?: string,
): Promise<StatusResponse> {
  return callJson(client, {
    method: 'PATCH',
    path: userPath(username),
    json: changes,
    expect: SUCCESS,
    ifMatch,
  });
}

export function putUser(
  client: ApiClient,
  username: string,
  user: NewUser,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PUT', path: userPath(username), json: user, expect: SUCCESS });
}

export function deleteUser(client: ApiClient, username: string): Promise<StatusResponse> {
  return callJson(client, { method: 'DELETE', path: userPath(username), expect: SUCCESS });
}

/** fshare extension: ends every token of the user issued so far ("sign out everywhere"). */
export function revokeTokens(client: ApiClient, username: string): Promise<StatusResponse> {
  return callJson(client, {
    method: 'DELETE',
    path: `${userPath(username)}/tokens`,
    expect: SUCCESS,
  });
}

/** fshare extension: a user's storage quota in bytes, or null for none (ADMIN). */
export function setQuota(
  client: ApiClient,
  username: string,
  quota: number | null,
): Promise<StatusResponse> {
  return callJson(client, {
    method: 'PATCH',
    path: userPath(username),
    json: { quota },
    expect: SUCCESS,
  });
}

// Settings

export function getSettings(client: ApiClient): Promise<Settings> {
  return callJson(client, { method: 'GET', path: '/admin/settings', expect: SETTINGS });
}

export function patchSettings(
  client: ApiClient,
  changes: Partial<Settings>,
): Promise<StatusResponse> {
  return callJson(client, {
    method: 'PATCH',
    path: '/admin/settings',
    json: changes,
    expect: SUCCESS,
  });
}

export function putSettings(client: ApiClient, settings: Settings): Promise<StatusResponse> {
  return callJson(client, {
    method: 'PUT',
    path: '/admin/settings',
    json: settings,
    expect: SUCCESS,
  });
}

// Pagination

/** One page of a list, each item checked for the shape every caller reads. */
function callPage<T>(
  client: ApiClient,
  path: string,
  item: (b: Record<string, unknown>) => boolean,
  query: PageQuery = {},
): Promise<Page<T>> {
  return callJson<Page<T>>(client, {
    method: 'GET',
    path,
    query: pageQuery(query),
    expect: pageOf(item, query.page ?? 1),
  });
}

/** Walks every page of a paginated list, following `next` (always a later page: pageOf). */
export async function* allPages<T>(
  fetchPage: (query: PageQuery) => Promise<Page<T>>,
  perPage = 1000,
): AsyncGenerator<T> {
  let page: number | null = 1;
  while (page !== null) {
    const result: Page<T> = await fetchPage({ page, perPage });
    yield* result.data;
    page = result.next;
  }
}

/** The id in a creation response's url ("/files/<id>" → "<id>"). */
export function idFromUrl(url: string): string {
  return decodeURIComponent(url.replace(/\/+$/, '').split('/').pop() ?? '');
}
