/**
 * The one JSON shape of each kind of object the CLI prints with --json (docs/CLI.md, "JSON
 * output"): every command that prints a share prints this share, and so on. Times are ISO 8601
 * with their zone; fields a server does not send are null, never missing.
 */
import { shareUrl } from '../client/refs.js';
import type { Link, Share, User } from '../shared/types.js';
import { isoWithZone } from './lists.js';

export interface ShareShape {
  share_id: string;
  url: string;
  file_name: string;
  owner_name: string | null;
  initialized: boolean;
  locked: boolean;
  create_date: string;
  size: number | null;
  sha256: string | null;
  /** When the server deletes the share; null for never (or a server without expiry). */
  expires: string | null;
}

export function shareShape(server: string, s: Share): ShareShape {
  return {
    share_id: s.share_id,
    url: shareUrl(server, s.share_id),
    file_name: s.file_name,
    owner_name: s.owner_name,
    initialized: s.initialized,
    locked: s.locked,
    create_date: isoWithZone(s.create_date),
    size: s.size ?? null,
    sha256: s.sha256 ?? null,
    expires: s.expires ?? null,
  };
}

/** A share link. `url` and `download_url` are known only to the command that made the link. */
export interface LinkShape {
  id: string;
  share_id: string;
  file_name: string | null;
  url: string | null;
  download_url: string | null;
  created_by: string | null;
  create_date: string;
  expires: string | null;
  max_downloads: number | null;
  downloads: number;
  downloads_left: number | null;
  has_password: boolean;
  state: Link['state'];
}

export function linkShape(l: Link): LinkShape {
  return {
    id: l.id,
    share_id: l.share_id,
    file_name: l.file_name ?? null,
    url: l.url ?? null,
    download_url: l.download_url ?? null,
    created_by: l.created_by,
    create_date: isoWithZone(l.create_date),
    expires: l.expires,
    max_downloads: l.max_downloads,
    downloads: l.downloads,
    downloads_left: l.downloads_left,
    has_password: l.has_password,
    state: l.state,
  };
}

export interface UserShape {
  username: string;
  permissions: string[];
  register_date: string;
  quota: number | null;
  used: number | null;
}

export function userShape(u: User): UserShape {
  return {
    username: u.username,
    permissions: u.permissions,
    register_date: isoWithZone(u.register_date),
    quota: u.quota ?? null,
    used: u.used ?? null,
  };
}

/** What one upload, replace or download did. */
export interface TransferShape {
  /** null for a share link's download (a link does not say which share it is for). */
  share_id: string | null;
  url: string | null;
  file_name: string | null;
  /** The local file read (upload, replace) or written (get; null for standard output). */
  path: string | null;
  size: number;
  /** The sha256 of the bytes sent or received (null for a byte range). */
  sha256: string | null;
  /** True when the server's own sha256 was compared and matched. */
  verified: boolean;
  /** Bytes that were already there: a resumed upload or download. */
  resumed_bytes: number;
  /** upload --expires: when the server deletes the share; otherwise null. */
  expires: string | null;
  /** upload --link: the link made for the share; otherwise null. */
  link: LinkShape | null;
}
