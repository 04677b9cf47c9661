import type { Permission } from './permissions.js';

/** A share as the server serialises it (API.md "Shares"). */
export interface Share {
  share_id: string;
  file_name: string;
  owner_name: string | null;
  initialized: boolean;
  locked: boolean;
  /** ISO 8601 without a zone suffix, UTC, microseconds: 2026-11-21T20:05:31.546000 */
  create_date: string;
  /** fshare extension: bytes of content, null until initialized. */
  size: number | null;
  /**
   * fshare extension: lower-case hex sha256 of the content; null while there is none (and, for
   * content stored by fshare 0.1, until the server has computed it after an upgrade).
   */
  sha256?: string | null;
}

/** A user as the server serialises it: never a password. */
export interface User {
  username: string;
  permissions: Permission[];
  register_date: string;
  /** fshare extension: bytes of content the user may own, null for no limit (ADMIN sees it). */
  quota?: number | null;
  /** fshare extension: bytes of content the user owns (ADMIN and the user see it). */
  used?: number;
}

export interface Settings {
  default_permissions: Permission[];
}

export interface Whoami {
  username: string | null;
  permissions: Permission[];
}

export interface LoginResponse {
  status: string;
  message: string;
  username: string;
  auth_token: string;
}

export interface StatusResponse {
  status: string;
  message?: string;
}

export interface CreatedResponse {
  status: string;
  url: string;
}

/** One page of a paginated list (API.md "Pagination"). */
export interface Page<T> {
  data: T[];
  prev: number | null;
  next: number | null;
  pages: number;
}

export interface ErrorBody {
  status: 'fail';
  message: string;
}

/** API.md: per_page default and maximum. */
export const DEFAULT_PER_PAGE = 15;
export const MAX_PER_PAGE = 1000;
