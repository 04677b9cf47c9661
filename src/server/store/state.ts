import { randomUUID } from 'node:crypto';
import type { Permission } from '../../shared/permissions.js';
import {
  type CopyMark,
  DuplicateUserError,
  LastAdminError,
  LinkUsedUpError,
  MissingRecordError,
  type LinkRecord,
  type NewShare,
  type Settings,
  type ShareChanges,
  type ShareRecord,
  type UserChanges,
  type UserRecord,
} from './index.js';

/** The metadata as db.json holds it (format 2: users have ids, shares refer to them). */
export interface DbData {
  version: 2;
  users: UserRecord[];
  /** Oldest first: the order GET /files lists them in. */
  shares: NewShare[];
  settings: Settings;
  /** Revoked token ids → their expiry (seconds since epoch), kept until then. */
  revoked: Record<string, number>;
  /** Sequence number of the last journal entry this snapshot includes. */
  seq: number;
  /** Ids of deleted users → their last name, so their shares can say whose they were. */
  former_users: Record<string, string>;
  /** Share links, oldest first (absent in snapshots written before links existed). */
  links: LinkRecord[];
  /**
   * This store's identity, made with it (absent in snapshots written before it existed): the
   * content storage records which store it belongs to (storage/owner.ts).
   */
  store_id?: string;
  /** A copy into this store that began and did not end (MetadataStore.unfinishedCopy). */
  copy_unfinished?: CopyMark;
}

/** One change to the metadata: what the journal records and what replay applies. */
export type Op =
  | { op: 'addUser'; user: UserRecord; copied?: true }
  | { op: 'updateUser'; id: string; changes: UserChanges }
  | { op: 'deleteUser'; id: string }
  | { op: 'addShare'; share: NewShare }
  | { op: 'updateShare'; id: string; changes: ShareChanges }
  | { op: 'deleteShare'; id: string }
  | { op: 'setSettings'; settings: Settings }
  | { op: 'revoke'; jti: string; exp: number; now: number }
  | { op: 'addLink'; link: LinkRecord }
  | { op: 'deleteLink'; id: string }
  | { op: 'countDownload'; id: string }
  | { op: 'markCopy'; mark: CopyMark | null }
  | { op: 'clearCopy' };

export const emptyData = (): DbData => ({
  version: 2,
  users: [],
  shares: [],
  settings: { default_permissions: [] },
  revoked: {},
  seq: 0,
  former_users: {},
  links: [],
  store_id: randomUUID(),
});

/** The in-memory state: the data plus its indexes. Built by replay, changed only by `apply`. */
export class State {
  readonly usersByName = new Map<string, UserRecord>();
  readonly usersById = new Map<string, UserRecord>();
  readonly sharesById = new Map<string, NewShare>();
  /** Bytes of content per owner id. */
  readonly usage = new Map<string, number>();
  readonly linksById = new Map<string, LinkRecord>();
  readonly linksByHash = new Map<string, LinkRecord>();
  /** Share id → its expiry (ms since the epoch), for shares that have one. */
  readonly expiring = new Map<string, number>();

  constructor(readonly data: DbData) {
    data.links ??= [];
    for (const l of data.links) this.indexLink(l);
    for (const u of data.users) {
      this.usersByName.set(u.username, u);
      this.usersById.set(u.id, u);
    }
    for (const s of data.shares) {
      this.sharesById.set(s.share_id, s);
      this.count(s, 1);
      this.indexExpiry(s);
    }
  }

  private indexLink(link: LinkRecord): void {
    this.linksById.set(link.id, link);
    this.linksByHash.set(link.token_sha256, link);
  }

  private indexExpiry(share: NewShare): void {
    if (share.expires) this.expiring.set(share.share_id, Date.parse(share.expires));
    else this.expiring.delete(share.share_id);
  }

  private removeLink(link: LinkRecord): void {
    this.linksById.delete(link.id);
    this.linksByHash.delete(link.token_sha256);
    this.data.links.splice(this.data.links.indexOf(link), 1);
  }

  private count(share: NewShare, sign: 1 | -1): void {
    if (share.owner_id === null || !share.size) return;
    this.usage.set(share.owner_id, (this.usage.get(share.owner_id) ?? 0) + sign * share.size);
  }

  /** Refuses (LastAdminError) to take ADMIN from `user` when no other user has it. */
  private keepAnAdmin(user: UserRecord): void {
    if (!user.permissions.includes('ADMIN')) return;
    for (const other of this.usersById.values())
      if (other !== user && other.permissions.includes('ADMIN')) return;
    throw new LastAdminError();
  }

  /** What `owner_name` says: the owner's current name, or whose it was. */
  ownerName(ownerId: string | null): string | null {
    if (ownerId === null) return null;
    const user = this.usersById.get(ownerId);
    if (user) return user.username;
    // Not a valid user name, so it can never be mistaken for a user of that name.
    return `${this.data.former_users[ownerId] ?? 'unknown'} (deleted)`;
  }

  /** A copy of a share as the API shows it. */
  view(share: NewShare): ShareRecord {
    return { ...share, owner_name: this.ownerName(share.owner_id) };
  }

  /**
   * Whether another user than `except` has `name` in any case: names that differ only in case
   * would be one person to a reader of a list. (Pairs made before this rule are kept: a replay
   * does not ask.)
   */
  private nameTakenInAnyCase(name: string, except?: UserRecord): boolean {
    const lower = name.toLowerCase();
    for (const [other, user] of this.usersByName)
      if (user !== except && other.toLowerCase() === lower) return true;
    return false;
  }

  /**
   * Checks that the change can apply, then applies it. Throws before touching anything when it
   * cannot. `replay` makes deletes of what is already gone a no-op (replay is idempotent).
   */
  apply(op: Op, replay = false): void {
    const data = this.data;
    switch (op.op) {
      case 'addUser':
        if (this.usersByName.has(op.user.username)) throw new DuplicateUserError();
        if (!replay && !op.copied && this.nameTakenInAnyCase(op.user.username))
          throw new DuplicateUserError();
        if (this.usersById.has(op.user.id)) throw new Error('user id already in use');
        data.users.push(op.user);
        this.usersByName.set(op.user.username, op.user);
        this.usersById.set(op.user.id, op.user);
        return;
      case 'updateUser': {
        const user = this.usersById.get(op.id);
        if (!user) throw new MissingRecordError('user');
        const oldName = user.username;
        const newName = op.changes.username;
        const renamed = newName !== undefined && newName !== oldName;
        if (renamed && this.usersByName.has(newName)) throw new DuplicateUserError();
        if (renamed && !replay && this.nameTakenInAnyCase(newName, user))
          throw new DuplicateUserError();
        if (!replay && op.changes.permissions && !op.changes.permissions.includes('ADMIN'))
          this.keepAnAdmin(user);
        Object.assign(user, op.changes);
        if (renamed) {
          this.usersByName.delete(oldName);
          this.usersByName.set(newName, user);
          // Tokens of fshare 0.1 name their user; after a rename that name may be another's.
          delete user.legacy_tokens;
        }
        return;
      }
      case 'deleteUser': {
        const user = this.usersById.get(op.id);
        if (!user) {
          if (replay) return;
          throw new MissingRecordError('user');
        }
        if (!replay) this.keepAnAdmin(user);
        this.usersByName.delete(user.username);
        this.usersById.delete(user.id);
        data.users.splice(data.users.indexOf(user), 1);
        data.former_users[user.id] = user.username;
        // The links a user made end with the user, as their tokens do.
        for (const link of data.links.filter((l) => l.created_by === op.id)) this.removeLink(link);
        return;
      }
      case 'addShare':
        if (this.sharesById.has(op.share.share_id)) throw new Error('share id already in use');
        data.shares.push(op.share);
        this.sharesById.set(op.share.share_id, op.share);
        this.count(op.share, 1);
        this.indexExpiry(op.share);
        return;
      case 'updateShare': {
        const share = this.sharesById.get(op.id);
        if (!share) throw new MissingRecordError('share');
        this.count(share, -1);
        Object.assign(share, op.changes);
        // Cleared, it is absent, as in a share never handed over.
        if (share.pending_handover === null) delete share.pending_handover;
        this.count(share, 1);
        this.indexExpiry(share);
        return;
      }
      case 'deleteShare': {
        const share = this.sharesById.get(op.id);
        if (!share) {
          if (replay) return;
          throw new MissingRecordError('share');
        }
        this.count(share, -1);
        this.sharesById.delete(op.id);
        this.expiring.delete(op.id);
        data.shares.splice(data.shares.indexOf(share), 1);
        // A share's links go with it.
        for (const link of data.links.filter((l) => l.share_id === op.id)) this.removeLink(link);
        return;
      }
      case 'setSettings':
        data.settings = op.settings;
        return;
      case 'revoke':
        for (const [id, exp] of Object.entries(data.revoked)) {
          if (exp < op.now) delete data.revoked[id];
        }
        data.revoked[op.jti] = op.exp;
        return;
      case 'addLink':
        if (!this.sharesById.has(op.link.share_id)) throw new MissingRecordError('share');
        // A link outlives no maker: one whose maker was deleted while it was being made (the
        // deletion removed that user's links) is refused. Journals from before this rule replay.
        if (!replay && op.link.created_by !== null && !this.usersById.has(op.link.created_by))
          throw new MissingRecordError('user');
        if (this.linksById.has(op.link.id) || this.linksByHash.has(op.link.token_sha256))
          throw new Error('link id already in use');
        data.links.push(op.link);
        this.indexLink(op.link);
        return;
      case 'deleteLink': {
        const link = this.linksById.get(op.id);
        if (!link) {
          if (replay) return;
          throw new MissingRecordError('link');
        }
        this.removeLink(link);
        return;
      }
      case 'countDownload': {
        const link = this.linksById.get(op.id);
        if (!link) {
          if (replay) return;
          throw new MissingRecordError('link');
        }
        // Replay repeats what was accepted; only a new count is checked.
        if (!replay && link.max_downloads !== null && link.downloads >= link.max_downloads)
          throw new LinkUsedUpError();
        link.downloads += 1;
        return;
      }
      case 'markCopy':
        if (op.mark) data.copy_unfinished = op.mark;
        else delete data.copy_unfinished;
        return;
      case 'clearCopy':
        if (!data.copy_unfinished && !replay) throw new Error('no copy to start over here');
        data.users = [];
        data.shares = [];
        data.links = [];
        data.revoked = {};
        data.former_users = {};
        for (const index of [
          this.usersByName,
          this.usersById,
          this.sharesById,
          this.usage,
          this.linksById,
          this.linksByHash,
          this.expiring,
        ])
          index.clear();
        return;
      default:
        throw new Error(`unknown operation ${JSON.stringify((op as { op: unknown }).op)}`);
    }
  }
}

// fshare 0.1: users were known by name only, and shares named their owner.

interface LegacyUser {
  username: string;
  permissions: Permission[];
  register_date: string;
  password_hash: string;
}

interface LegacyShare extends Omit<NewShare, 'owner_id'> {
  owner_name: string | null;
}

export interface LegacyData {
  users: LegacyUser[];
  shares: LegacyShare[];
  settings: Settings;
  revoked: Record<string, number>;
  seq: number;
}

type LegacyOp =
  | { op: 'addUser'; user: LegacyUser }
  | { op: 'updateUser'; name: string; changes: Partial<LegacyUser> }
  | { op: 'deleteUser'; name: string }
  | { op: 'addShare'; share: LegacyShare }
  | { op: 'updateShare'; id: string; changes: Partial<LegacyShare> }
  | { op: 'deleteShare'; id: string }
  | { op: 'setSettings'; settings: Settings }
  | { op: 'revoke'; jti: string; exp: number; now: number };

/** True for a snapshot written before format 2 (fshare 0.1). */
export function isLegacy(data: { version?: unknown }): boolean {
  return data.version !== 2;
}

/** Replays one journal entry of fshare 0.1, with 0.1's rules (everything by name). */
export function applyLegacy(data: LegacyData, op: LegacyOp): void {
  const user = (name: string) => data.users.find((u) => u.username === name);
  const share = (id: string) => data.shares.find((s) => s.share_id === id);
  switch (op.op) {
    case 'addUser':
      if (user(op.user.username)) throw new DuplicateUserError();
      data.users.push(op.user);
      return;
    case 'updateUser': {
      const found = user(op.name);
      if (!found) throw new MissingRecordError('user');
      Object.assign(found, op.changes);
      if (found.username !== op.name)
        for (const s of data.shares) if (s.owner_name === op.name) s.owner_name = found.username;
      return;
    }
    case 'deleteUser': {
      const found = user(op.name);
      if (found) data.users.splice(data.users.indexOf(found), 1);
      return;
    }
    case 'addShare':
      data.shares.push(op.share);
      return;
    case 'updateShare': {
      const found = share(op.id);
      if (!found) throw new MissingRecordError('share');
      Object.assign(found, op.changes);
      return;
    }
    case 'deleteShare': {
      const found = share(op.id);
      if (found) data.shares.splice(data.shares.indexOf(found), 1);
      return;
    }
    case 'setSettings':
      data.settings = op.settings;
      return;
    case 'revoke':
      for (const [id, exp] of Object.entries(data.revoked))
        if (exp < op.now) delete data.revoked[id];
      data.revoked[op.jti] = op.exp;
      return;
    default:
      throw new Error(`unknown operation ${JSON.stringify((op as { op: unknown }).op)}`);
  }
}

/**
 * fshare 0.1's data in format 2: every user gets an id; a share names its owner by that id. A
 * share whose owner had been deleted gets an id no user has (its old name is kept for display),
 * so a new user of that name does not inherit it. 0.1's tokens stay valid for the users they
 * name (legacy_tokens) until a password change, a "sign out everywhere" or a rename.
 */
export function migrateLegacy(old: LegacyData): DbData {
  const data = emptyData();
  const ids = new Map<string, string>();
  for (const u of old.users) {
    const id = randomUUID();
    ids.set(u.username, id);
    data.users.push({ ...u, id, token_gen: 0, quota: null, legacy_tokens: true });
  }
  for (const s of old.shares) {
    const { owner_name, ...rest } = s;
    let owner_id: string | null = null;
    if (owner_name !== null) {
      owner_id = ids.get(owner_name) ?? null;
      if (owner_id === null) {
        owner_id = randomUUID();
        ids.set(owner_name, owner_id);
        data.former_users[owner_id] = owner_name;
      }
    }
    data.shares.push({ ...rest, owner_id, sha256: rest.sha256 ?? null });
  }
  data.settings = old.settings;
  data.revoked = old.revoked;
  data.seq = old.seq;
  return data;
}
