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
  /**
   * fshare extension: when the server deletes the share (ISO 8601 UTC with a Z), null for
   * never. Absent from servers without expiry.
   */
  expires?: string | null;
}

/** fshare extension: a share link as its owner sees it (never its token, except at creation). */
export interface Link {
  id: string;
  share_id: string;
  /** The share's name (null if the share is gone). */
  file_name: string | null;
  /** The page anyone can open; only in the answer that created the link. */
  url?: string;
  /** The bytes themselves (`url` + `?download`); only in the answer that created the link. */
  download_url?: string;
  created_by: string | null;
  create_date: string;
  expires: string | null;
  max_downloads: number | null;
  downloads: number;
  downloads_left: number | null;
  has_password: boolean;
  /** "active", "expired" (the link's or the share's expiry passed) or "used-up". */
  state: 'active' | 'expired' | 'used-up';
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
  /** fshare extension: longest expiry in seconds for users without ADMIN; null for none. */
  max_expiry?: number | null;
  /** fshare extension: most downloads per link for users without ADMIN; null for none. */
  max_downloads?: number | null;
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
