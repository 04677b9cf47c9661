import { open, readFile, rename } from 'node:fs/promises';
import { join } from 'node:path';
import { Low, type Adapter } from 'lowdb';
import type { Permission } from '../shared/permissions.js';
import type { Share, User } from '../shared/types.js';

export interface UserRecord extends User {
  password_hash: string;
}

export type ShareRecord = Share;

export interface DbData {
  users: UserRecord[];
  /** Oldest first: the order GET /files lists them in. */
  shares: ShareRecord[];
  settings: { default_permissions: Permission[] };
  /** Revoked token ids → their expiry (seconds since epoch), kept until then. */
  revoked: Record<string, number>;
}

const EMPTY: DbData = {
  users: [],
  shares: [],
  settings: { default_permissions: [] },
  revoked: {},
};

/**
 * lowdb adapter that replaces the file atomically and durably: temp file, fsync, rename, fsync
 * of the directory. steno (lowdb's default) renames but never fsyncs.
 */
class DurableJsonFile implements Adapter<DbData> {
  constructor(
    private readonly file: string,
    private readonly dir: string,
  ) {}

  async read(): Promise<DbData | null> {
    try {
      return JSON.parse(await readFile(this.file, 'utf8')) as DbData;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw new Error(`Cannot read ${this.file}: ${(err as Error).message}`);
    }
  }

  async write(data: DbData): Promise<void> {
    const tmp = `${this.file}.tmp`;
    const handle = await open(tmp, 'w', 0o600);
    try {
      await handle.writeFile(JSON.stringify(data));
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, this.file);
    const dir = await open(this.dir, 'r');
    try {
      await dir.sync();
    } finally {
      await dir.close();
    }
  }
}

/**
 * Metadata in lowdb. Changes are applied to the in-memory data synchronously (so concurrent
 * requests never lose one another's changes) and then persisted through one serialised queue
 * that coalesces: every change waits for a write that began after it, and one write covers all
 * changes made while the previous write ran.
 */
export class Store {
  private readonly db: Low<DbData>;
  private readonly usersByName = new Map<string, UserRecord>();
  private readonly sharesById = new Map<string, ShareRecord>();
  private writing: Promise<void> | null = null;
  private queued: Promise<void> | null = null;

  private constructor(dataDir: string) {
    // A fresh copy: lowdb keeps the default object itself, and stores must never share data.
    this.db = new Low<DbData>(
      new DurableJsonFile(join(dataDir, 'db.json'), dataDir),
      structuredClone(EMPTY),
    );
  }

  static async open(dataDir: string): Promise<Store> {
    const store = new Store(dataDir);
    await store.db.read();
    store.db.data = { ...structuredClone(EMPTY), ...store.db.data };
    for (const u of store.db.data.users) store.usersByName.set(u.username, u);
    for (const s of store.db.data.shares) store.sharesById.set(s.share_id, s);
    return store;
  }

  private get data(): DbData {
    return this.db.data;
  }

  /** Resolves once every change made before the call is on disk. */
  persist(): Promise<void> {
    if (!this.writing) {
      this.writing = this.db.write().finally(() => {
        this.writing = null;
      });
      return this.writing;
    }
    // A write is running and may have serialised the data before our change: queue one more.
    this.queued ??= this.writing
      .catch(() => undefined)
      .then(() => {
        this.queued = null;
        return this.persist();
      });
    return this.queued;
  }

  // Users

  getUser(name: string): UserRecord | undefined {
    return this.usersByName.get(name);
  }

  userCount(): number {
    return this.data.users.length;
  }

  listUsers(offset: number, limit: number): UserRecord[] {
    return this.data.users.slice(offset, offset + limit);
  }

  async addUser(user: UserRecord): Promise<void> {
    this.data.users.push(user);
    this.usersByName.set(user.username, user);
    await this.persist();
  }

  /** Applies changes to a user; a rename also moves the user's shares to the new name. */
  async updateUser(name: string, changes: Partial<UserRecord>): Promise<UserRecord> {
    const user = this.usersByName.get(name)!;
    Object.assign(user, changes);
    if (user.username !== name) {
      this.usersByName.delete(name);
      this.usersByName.set(user.username, user);
      for (const share of this.data.shares) {
        if (share.owner_name === name) share.owner_name = user.username;
      }
    }
    await this.persist();
    return user;
  }

  async deleteUser(name: string): Promise<void> {
    const user = this.usersByName.get(name);
    if (!user) return;
    this.usersByName.delete(name);
    this.data.users.splice(this.data.users.indexOf(user), 1);
    await this.persist();
  }

  // Shares

  getShare(id: string): ShareRecord | undefined {
    return this.sharesById.get(id.toLowerCase());
  }

  shareCount(): number {
    return this.data.shares.length;
  }

  listShares(offset: number, limit: number): ShareRecord[] {
    return this.data.shares.slice(offset, offset + limit);
  }

  async addShare(share: ShareRecord): Promise<void> {
    this.data.shares.push(share);
    this.sharesById.set(share.share_id, share);
    await this.persist();
  }

  async updateShare(id: string, changes: Partial<ShareRecord>): Promise<ShareRecord> {
    const share = this.sharesById.get(id)!;
    Object.assign(share, changes);
    await this.persist();
    return share;
  }

  async deleteShare(id: string): Promise<void> {
    const share = this.sharesById.get(id);
    if (!share) return;
    this.sharesById.delete(id);
    this.data.shares.splice(this.data.shares.indexOf(share), 1);
    await this.persist();
  }

  // Settings and revocations

  get settings(): DbData['settings'] {
    return this.data.settings;
  }

  async setSettings(settings: DbData['settings']): Promise<void> {
    this.data.settings = settings;
    await this.persist();
  }

  isRevoked(jti: string): boolean {
    return jti in this.data.revoked;
  }

  /** Records a revocation and drops the ones whose tokens have expired anyway. */
  async revoke(jti: string, exp: number): Promise<void> {
    const now = Math.floor(Date.now() / 1000);
    for (const [id, e] of Object.entries(this.data.revoked)) {
      if (e < now) delete this.data.revoked[id];
    }
    this.data.revoked[jti] = exp;
    await this.persist();
  }
}
