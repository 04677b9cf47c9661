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
import { ApiError } from './errors.js';
import { callJson, type ApiClient } from './http.js';
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

// Authentication

export function login(
  client: ApiClient,
  username: string,
  password: string,
): Promise<LoginResponse> {
  return callJson(client, { method: 'POST', path: '/users/login', json: { username, password } });
}

export function extend(client: ApiClient): Promise<LoginResponse> {
  return callJson(client, { method: 'POST', path: '/users/extend' });
}

/** Revokes `token` (by default the client's own). */
export function logout(client: ApiClient, token = client.token): Promise<StatusResponse> {
  return callJson(client, { method: 'POST', path: '/users/logout', json: { token } });
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
  });
}

export function whoami(client: ApiClient): Promise<Whoami> {
  return callJson(client, { method: 'GET', path: '/whoami' });
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
    });
    for (const s of result.data) if (matches(s)) found.push(s);
    page = result.next;
  }
  return found;
}

export async function getFile(client: ApiClient, id: string): Promise<Share> {
  const share = await callJson<Share>(client, { method: 'GET', path: sharePath(id) });
  if (!isRecord(share) || typeof share.share_id !== 'string' || typeof share.file_name !== 'string')
    throw new ApiError(200, `the server's answer to GET ${sharePath(id)} is not a share`);
  return share;
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
  return callJson(client, { method: 'PATCH', path: sharePath(id), json: changes });
}

export function putFile(
  client: ApiClient,
  id: string,
  share: Required<ShareChanges>,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PUT', path: sharePath(id), json: share });
}

export function deleteFile(client: ApiClient, id: string): Promise<StatusResponse> {
  return callJson(client, { method: 'DELETE', path: sharePath(id) });
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
  });
}

export function lockFile(client: ApiClient, id: string): Promise<StatusResponse> {
  return callJson(client, { method: 'POST', path: `${sharePath(id)}/lock` });
}

export function unlockFile(client: ApiClient, id: string): Promise<StatusResponse> {
  return callJson(client, { method: 'POST', path: `${sharePath(id)}/unlock` });
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
  return callJson(client, { method: 'POST', path: `${sharePath(id)}/links`, json: link });
}

export function shareLinks(client: ApiClient, id: string): Promise<{ data: Link[] }> {
  return callJson(client, { method: 'GET', path: `${sharePath(id)}/links` });
}

export function listLinks(client: ApiClient, query?: PageQuery): Promise<Page<Link>> {
  return callPage(client, '/links', query);
}

export function deleteLink(client: ApiClient, linkId: string): Promise<StatusResponse> {
  return callJson(client, { method: 'DELETE', path: `/links/${encodeURIComponent(linkId)}` });
}

// Users

export function listUsers(client: ApiClient, query?: PageQuery): Promise<Page<User>> {
  return callPage(client, '/users', query);
}

export function getUser(client: ApiClient, username: string): Promise<User> {
  return callJson(client, { method: 'GET', path: userPath(username) });
}

export interface NewUser {
  username: string;
  password: string;
  permissions: Permission[];
}

export function createUser(client: ApiClient, user: NewUser): Promise<CreatedResponse> {
  return callJson(client, { method: 'POST', path: '/users', json: user });
}

export function patchUser(
  client: ApiClient,
  username: string,
  changes: Partial<NewUser>,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PATCH', path: userPath(username), json: changes });
}

export function putUser(
  client: ApiClient,
  username: string,
  user: NewUser,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PUT', path: userPath(username), json: user });
}

export function deleteUser(client: ApiClient, username: string): Promise<StatusResponse> {
  return callJson(client, { method: 'DELETE', path: userPath(username) });
}

/** fshare extension: ends every token of the user issued so far ("sign out everywhere"). */
export function revokeTokens(client: ApiClient, username: string): Promise<StatusResponse> {
  return callJson(client, { method: 'DELETE', path: `${userPath(username)}/tokens` });
}

/** fshare extension: a user's storage quota in bytes, or null for none (ADMIN). */
export function setQuota(
  client: ApiClient,
  username: string,
  quota: number | null,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PATCH', path: userPath(username), json: { quota } });
}

// Settings

export function getSettings(client: ApiClient): Promise<Settings> {
  return callJson(client, { method: 'GET', path: '/admin/settings' });
}

export function patchSettings(
  client: ApiClient,
  changes: Partial<Settings>,
): Promise<StatusResponse> {
  return callJson(client, { method: 'PATCH', path: '/admin/settings', json: changes });
}

export function putSettings(client: ApiClient, settings: Settings): Promise<StatusResponse> {
  return callJson(client, { method: 'PUT', path: '/admin/settings', json: settings });
}

// Pagination

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/**
 * One page of a list, checked for the shape every caller reads (a "data" list of objects and a
 * "next" page number or null), so that an answer of another shape (a proxy's page, a server of
 * another kind) is one clear error, never a crash deep inside a command.
 */
async function callPage<T>(client: ApiClient, path: string, query?: PageQuery): Promise<Page<T>> {
  const page = await callJson<Page<T>>(client, { method: 'GET', path, query: pageQuery(query) });
  const next = isRecord(page) ? page.next : undefined;
  if (
    !isRecord(page) ||
    !Array.isArray(page.data) ||
    !page.data.every(isRecord) ||
    !(next === undefined || next === null || Number.isSafeInteger(next))
  )
    throw new ApiError(200, `the server's answer to GET ${path} is not a page of a list`);
  return page;
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
