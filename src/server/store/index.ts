import type { Permission } from '../../shared/permissions.js';
import type { Share, User } from '../../shared/types.js';

/**
 * Metadata: users, shares, settings, revoked tokens. One implementation today (lowdb.ts: a lowdb
 * snapshot plus an fsynced journal); routes only see this interface.
 *
 * The promise every implementation keeps: a change resolves only once it is durable; a change
 * that rejects has changed nothing (not in memory, not on disk); a change that names a record
 * which no longer exists rejects with MissingRecordError and changes nothing.
 */
export interface MetadataStore {
  getUser(name: string): Promise<UserRecord | undefined>;
  getUserById(id: string): Promise<UserRecord | undefined>;
  userCount(): Promise<number>;
  listUsers(offset: number, limit: number): Promise<UserRecord[]>;
  /**
   * Refuses (DuplicateUserError) a name that is taken, in any case, at the moment of writing.
   * `copied`: a user copied as it is from another store (admin import/export), whose name may
   * differ only in case from another's there (a pair made before that rule): kept, as there.
   */
  addUser(user: UserRecord, options?: { copied?: boolean }): Promise<void>;
  /**
   * Changes a user; a new name must be free (DuplicateUserError), and the last user with ADMIN
   * keeps it (LastAdminError). Resolves to the user's token generation after the change. With
   * `expect`, the user must still be as read (name, permissions, quota) at the moment of writing,
   * else ChangedMeanwhileError (an `If-Match` that no longer holds).
   */
  updateUser(id: string, changes: UserChanges, expect?: UserState): Promise<number>;
  /**
   * Removes a user; their shares keep their owner id, which no user will ever have again. The
   * last user with ADMIN cannot be removed (LastAdminError).
   */
  deleteUser(id: string): Promise<void>;
  /** Bytes of content in the shares a user owns. */
  usageOf(userId: string): Promise<number>;

  getShare(id: string): Promise<ShareRecord | undefined>;
  shareCount(): Promise<number>;
  /** Oldest first: the order GET /files lists them in. */
  listShares(offset: number, limit: number): Promise<ShareRecord[]>;
  /** Every share (for start-up checks and migrations), without copying the list. */
  eachShare(): AsyncIterable<ShareRecord>;
  addShare(share: NewShare): Promise<void>;
  updateShare(id: string, changes: ShareChanges): Promise<void>;
  deleteShare(id: string): Promise<void>;

  getSettings(): Promise<Settings>;
  setSettings(settings: Settings): Promise<void>;
  /**
   * Sets the given settings and keeps the others, in one step: two changes of different
   * settings at once (also through two servers) both stay.
   */
  updateSettings(changes: Partial<Settings>): Promise<void>;
  isRevoked(jti: string): Promise<boolean>;
  /** Records a revocation (and forgets the ones whose tokens have expired anyway). */
  revoke(jti: string, exp: number): Promise<void>;

  getLink(id: string): Promise<LinkRecord | undefined>;
  /** The link whose token has this sha256 (hex); tokens themselves are never stored. */
  getLinkByTokenHash(tokenSha256: string): Promise<LinkRecord | undefined>;
  /** A share's links, or every link (oldest first). */
  listLinks(shareId?: string): Promise<LinkRecord[]>;
  /** The links of the shares this user owns (oldest first), found by the store in one pass. */
  listOwnedLinks(ownerId: string): Promise<LinkRecord[]>;
  addLink(link: LinkRecord): Promise<void>;
  deleteLink(id: string): Promise<void>;
  /**
   * Counts one download of a link, atomically: rejects with LinkUsedUpError, changing nothing,
   * when the link has no downloads left. Durable when it resolves.
   */
  countDownload(id: string): Promise<void>;
  /** Shares whose expiry is at or before `now` (ms since the epoch). */
  expiredShares(now: number): Promise<ShareRecord[]>;
  /** The earliest expiry of any share (ms since the epoch), or null. */
  nextExpiry(): Promise<number | null>;

  /** Runs `task` while no other task holds the same share's lock. */
  withShareLock<T>(id: string, task: () => Promise<T>): Promise<T>;
  /**
   * Inside withShareLock's task, where the lock can be lost (PostgreSQL): a number higher than
   * any it gave before, to any server; LockLostError once the lock was lost.
   */
  fenceToken?(): Promise<number>;

  /** This store's identity, which the content storage records (storage/owner.ts). */
  identity(): Promise<StoreIdentity>;

  /**
   * A copy into this store (`fshare admin import`/`export`) that began and did not end, or null.
   * A store so marked holds part of a copy: no server starts on it, and no copy reads it.
   */
  unfinishedCopy(): Promise<CopyMark | null>;
  /** Marks this store as the target of a copy under way, or (null) ends the mark; durable. */
  markCopy(mark: CopyMark | null): Promise<void>;
  /**
   * Removes, in one step, every user, share, link, former user's name and revocation: what a
   * copy that did not finish wrote, before it starts over. Only for a store so marked (throws
   * otherwise); its settings, identity and mark stay.
   */
  clearUnfinishedCopy(): Promise<void>;

  /** Flushes and closes; later calls reject. */
  close(): Promise<void>;
}

/** What a copy under way records in its target (MetadataStore.markCopy). */
export interface CopyMark {
  /** The command that began it, e.g. `fshare admin import`. */
  by: string;
  /** Where it copies from, as the command named it. */
  from: string;
  /** When it began (ISO 8601). */
  started: string;
}

/** `NAME holds part of a copy that did not finish (BY from FROM, begun STARTED)`. */
export function unfinishedCopyText(name: string, mark: CopyMark): string {
  return `${name} holds part of a copy that did not finish (${mark.by} from ${mark.from}, begun ${mark.started})`;
}

export interface StoreIdentity {
  /** Made with the store, never changed; null until it is durable (a full disk at the start). */
  id: string | null;
  /** The store had none before this start (a new store, or one older than store ids). */
  made: boolean;
}

export interface UserRecord extends Omit<User, 'quota' | 'used'> {
  /** Immutable: tokens and ownership refer to it, never to the name. */
  id: string;
  password_hash: string;
  /**
   * Tokens carry the generation they were issued in; bumping it (a password change, "sign out
   * everywhere") ends every older token at once.
   */
  token_gen: number;
  /** Bytes of content this user may own; null for no limit. */
  quota: number | null;
  /**
   * A user carried over from fshare 0.1, whose tokens named the user only by name: such tokens
   * are accepted until the user's generation changes or the user is renamed.
   */
  legacy_tokens?: boolean;
  /**
   * The one token the user's own password change left working, the one that made it: it speaks
   * for the user although its generation ended (clients of the reference server go on with the
   * token they have). The next end of the user's tokens replaces or clears it.
   */
  kept_token?: KeptToken | null;
}

/** A token (its `jti` and generation) kept working across an end of its user's tokens. */
export interface KeptToken {
  jti: string;
  gen: number;
}

/** Whether a token of the user speaks for them: of their current generation, or the one kept. */
export function tokenSpeaks(
  user: Pick<UserRecord, 'token_gen' | 'kept_token'>,
  token: KeptToken,
): boolean {
  const kept = user.kept_token;
  return token.gen === user.token_gen || (kept?.jti === token.jti && kept.gen === token.gen);
}

export type UserChanges = Partial<
  Pick<
    UserRecord,
    'username' | 'permissions' | 'password_hash' | 'token_gen' | 'quota' | 'kept_token'
  >
> & {
  legacy_tokens?: false;
  /**
   * Ends every token issued so far: the generation goes up by one at the moment of writing, so
   * two such changes at once end the tokens issued between them too (a generation read earlier
   * and written back plus one would not).
   */
  end_tokens?: true;
  /**
   * With end_tokens: this token (the caller's) goes on working. Kept only if it still speaks for
   * the user where the change is written (no other end of tokens came first); any end of tokens
   * without it clears the token kept before.
   */
  keep_token?: KeptToken;
};

export interface ShareRecord extends Share {
  /** The owner's user id; null when anonymous users own the share. */
  owner_id: string | null;
  /**
   * Name of the content's file in the content storage; absent for shares written by fshare 0.1,
   * whose content is named after the share id. Never sent to clients.
   */
  blob?: string;
  /**
   * Set, with the new owner, by a handover whose ending of the share's unfinished uploads is
   * still to come (handover.ts); a new value for each handover. Never sent to clients.
   */
  pending_handover?: string | null;
}

/** A share as stored: `owner_name` is not stored, it is the owner's current name. */
export type NewShare = Omit<ShareRecord, 'owner_name'>;

export type ShareChanges = Partial<
  Pick<
    ShareRecord,
    | 'file_name'
    | 'owner_id'
    | 'initialized'
    | 'locked'
    | 'size'
    | 'sha256'
    | 'blob'
    | 'expires'
    | 'pending_handover'
  >
>;

export interface Settings {
  default_permissions: Permission[];
  /** Longest expiry (seconds from now) a user without ADMIN may give a share or link. */
  max_expiry?: number | null;
  /** Most downloads a user without ADMIN may allow a link. */
  max_downloads?: number | null;
}

/** A share link (docs/API.md "Share links"): anyone holding its token may download the share. */
export interface LinkRecord {
  /** Public id, for listing and revoking; not a secret. */
  id: string;
  share_id: string;
  /** sha256 (hex) of the token in the link's URL; the token is never stored. */
  token_sha256: string;
  /** The user id of whoever made it. */
  created_by: string | null;
  create_date: string;
  /** ISO 8601 UTC, or null for no expiry of its own (the share's still applies). */
  expires: string | null;
  max_downloads: number | null;
  downloads: number;
  /** The link's password hash, or null when it has none. */
  password_hash: string | null;
}

/** The file name a share's content is stored under. */
export function blobOf(share: ShareRecord): string {
  return share.blob ?? share.share_id;
}

/** A change named a user or share that does not exist (any more). Nothing was changed. */
export class MissingRecordError extends Error {
  constructor(readonly kind: 'user' | 'share' | 'link') {
    super(`No ${kind} with this ${kind === 'user' ? 'name' : 'id'}`);
  }
}

/** A link has no downloads left. Nothing was changed. */
export class LinkUsedUpError extends Error {
  constructor() {
    super('This link has no downloads left');
  }
}

/** A change would give a second user the same name. Nothing was changed. */
export class DuplicateUserError extends Error {
  constructor() {
    super('A user with this name already exists');
  }
}

/** What a user's ETag stands for: a change with `If-Match` applies only while it holds. */
export type UserState = Pick<UserRecord, 'username' | 'permissions' | 'quota'>;

export function sameUserState(user: UserState, expect: UserState): boolean {
  return (
    user.username === expect.username &&
    user.permissions.join(',') === expect.permissions.join(',') &&
    (user.quota ?? null) === (expect.quota ?? null)
  );
}

/** The user was changed since the client read it (`If-Match`): nothing was changed. */
export class ChangedMeanwhileError extends Error {
  constructor() {
    super(
      'The user was changed since you read it (If-Match does not match): read it again and redo the change',
    );
  }
}

/**
 * A change would leave no user with ADMIN, and so nobody who could manage users or settings.
 * Nothing was changed.
 */
export class LastAdminError extends Error {
  constructor() {
    super('This would leave the server without an administrator: give another user ADMIN first');
  }
}

/**
 * A share lock was lost while its task ran (PostgreSQL: the connection holding it dropped, or
 * its backend was terminated), so another task may hold it now: the task read and wrote nothing
 * more in the metadata from then on, and failed.
 */
export class LockLostError extends Error {
  constructor() {
    super('the database connection holding the share lock was lost');
  }
}

/**
 * A write whose outcome is unknown: its connection failed under it, so it may have committed,
 * and asking the database on another connection failed too. What the write would name (new
 * content) is kept: a start of the server removes it if no record names it.
 */
export class OutcomeUnknownError extends Error {
  constructor() {
    super('the database connection failed under a write, and whether it was made is unknown');
  }
}

/**
 * The metadata files cannot be read back as written: start-up stops with this message, which
 * names the file and line and the way out.
 */
export class DamagedMetadataError extends Error {
  override readonly name = 'DamagedMetadataError';
}
