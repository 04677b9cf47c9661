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
  userCount(): Promise<number>;
  listUsers(offset: number, limit: number): Promise<UserRecord[]>;
  addUser(user: UserRecord): Promise<void>;
  /** Applies changes to a user; a rename also moves the user's shares to the new name. */
  updateUser(name: string, changes: Partial<UserRecord>): Promise<void>;
  deleteUser(name: string): Promise<void>;

  getShare(id: string): Promise<ShareRecord | undefined>;
  shareCount(): Promise<number>;
  /** Oldest first: the order GET /files lists them in. */
  listShares(offset: number, limit: number): Promise<ShareRecord[]>;
  /** Every share (for start-up checks and migrations), without copying the list. */
  eachShare(): AsyncIterable<ShareRecord>;
  addShare(share: ShareRecord): Promise<void>;
  updateShare(id: string, changes: Partial<ShareRecord>): Promise<void>;
  deleteShare(id: string): Promise<void>;

  getSettings(): Promise<Settings>;
  setSettings(settings: Settings): Promise<void>;
  isRevoked(jti: string): Promise<boolean>;
  /** Records a revocation (and forgets the ones whose tokens have expired anyway). */
  revoke(jti: string, exp: number): Promise<void>;

  /** Runs `task` while no other task holds the same share's lock. */
  withShareLock<T>(id: string, task: () => Promise<T>): Promise<T>;

  /** Flushes and closes; later calls reject. */
  close(): Promise<void>;
}

export interface UserRecord extends User {
  password_hash: string;
}

export interface ShareRecord extends Share {
  /**
   * Name of the content's file in the content storage; absent for shares written by fshare 0.1,
   * whose content is named after the share id. Never sent to clients.
   */
  blob?: string;
}

export interface Settings {
  default_permissions: Permission[];
}

/** The file name a share's content is stored under. */
export function blobOf(share: ShareRecord): string {
  return share.blob ?? share.share_id;
}

/** A change named a user or share that does not exist (any more). Nothing was changed. */
export class MissingRecordError extends Error {
  constructor(readonly kind: 'user' | 'share') {
    super(kind === 'user' ? 'No user with this name' : 'No share with this id');
  }
}

/** A change would give a second user the same name. Nothing was changed. */
export class DuplicateUserError extends Error {
  constructor() {
    super('A user with this name already exists');
  }
}

/**
 * The metadata files cannot be read back as written: start-up stops with this message, which
 * names the file and line and the way out.
 */
export class DamagedMetadataError extends Error {
  override readonly name = 'DamagedMetadataError';
}
