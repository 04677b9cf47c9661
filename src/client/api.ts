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
import { callJson, isRecord, type AnswerShape, type ApiClient } from './http.js';
import { sharePath } from './refs.js';

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

/** Every change the API makes answers `{"status": "success", …}` (API.md "Bodies"). */
const SUCCESS: AnswerShape = { what: 'a success', ok: (b) => b.status === 'success' };
const TOKEN: AnswerShape = {
  what: 'a token',
  ok: (b) => b.status === 'success' && isString(b.auth_token) && b.auth_token !== '',
};
/** A new share or user: its address in `url`. */
const CREATED: AnswerShape = {
  what: 'a success with the new address',
  ok: (b) => b.status === 'success' && isString(b.url) && idFromUrl(b.url) !== '',
};
const SHARE: AnswerShape = {
  what: 'a share',
  ok: (b) => isString(b.share_id) && isString(b.file_name),
};
const USER: AnswerShape = {
  what: 'a user',
  ok: (b) => isString(b.username) && isStringList(b.permissions),
};
const WHOAMI: AnswerShape = {
  what: 'an identity',
  ok: (b) => (b.username === null || isString(b.username)) && isStringList(b.permissions),
};
const SETTINGS: AnswerShape = {
  what: 'the settings',
  ok: (b) => isStringList(b.default_permissions),
};
/** A page of a list: a "data" list of objects and a "next" page number or null. */
const PAGE: AnswerShape = {
  what: 'a page of a list',
  ok: (b) =>
    Array.isArray(b.data) &&
    b.data.every(isRecord) &&
    (b.next === undefined || b.next === null || Number.isSafeInteger(b.next)),
};
const LIST: AnswerShape = {
  what: 'a list',
  ok: (b) => Array.isArray(b.data) && b.data.every(isRecord),
};
const UPLOAD_STATE: AnswerShape = {
  what: 'the state of an upload',
  ok: (b) =>
    Number.isSafeInteger(b.total) &&
    Array.isArray(b.received) &&
    b.received.every((i) => Number.isSafeInteger(i)),
};
const NEW_LINK: AnswerShape = {
  what: 'a new link',
  ok: (b) => b.status === 'success' && isString(b.url) && isString(b.download_url),
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
    expect: SUCCESS,
  });
}

export function whoami(client: ApiClient): Promise<Whoami> {
  return callJson(client, { method: 'GET', path: '/whoami', expect: WHOAMI });
}

// Shares

export function listFiles(client: ApiClient, query?: PageQuery): Promise<Page<Share>> {
  return callPage(client, '/files', query);
}

/** fshare extension: when a share or link ends; seconds from now, or null for never. */
export interface ExpiryRequest {
  expires_in?: number | null;
}

export function createFile(
  client: ApiClient,
  fileName?: string,
  extra: ExpiryRequest = {},
): Promise<CreatedResponse> {
  return callJson(client, {
    method: 'POST',
    path: '/files',
    json: { ...(fileName === undefined ? {} : { file_name: fileName }), ...extra },
    // A create whose answer is lost is sent again with the same key: fshare serve then answers
    // with the share the first one made. (A server without the extension may make a second,
    // empty share, as running the command again would.)
    idempotencyKey: randomUUID(),
    expect: CREATED,
  });
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
      expect: PAGE,
    });
    for (const s of result.data) if (matches(s)) found.push(s);
    page = result.next;
  }
  return found;
}

export function getFile(client: ApiClient, id: string): Promise<Share> {
  return callJson<Share>(client, { method: 'GET', path: sharePath(id), expect: SHARE });
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
  return callJson(client, { method: 'GET', path: `${sharePath(id)}/links`, expect: LIST });
}

export function listLinks(client: ApiClient, query?: PageQuery): Promise<Page<Link>> {
  return callPage(client, '/links', query);
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
  return callPage(client, '/users', query);
}

export function getUser(client: ApiClient, username: string): Promise<User> {
  return callJson(client, { method: 'GET', path: userPath(username), expect: USER });
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
): Promise<StatusResponse> {
  return callJson(client, {
    method: 'PATCH',
    path: userPath(username),
    json: changes,
    expect: SUCCESS,
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

/** One page of a list, checked for the shape every caller reads. */
function callPage<T>(client: ApiClient, path: string, query?: PageQuery): Promise<Page<T>> {
  return callJson<Page<T>>(client, { method: 'GET', path, query: pageQuery(query), expect: PAGE });
}

/** Walks every page of a paginated list, following `next`. */
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
