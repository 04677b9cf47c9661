import { open, readFile, rename, type FileHandle } from 'node:fs/promises';
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
  /** Sequence number of the last journal entry this snapshot includes. */
  seq: number;
}

/** One change to the metadata: what the journal records and what replay applies. */
type Op =
  | { op: 'addUser'; user: UserRecord }
  | { op: 'updateUser'; name: string; changes: Partial<UserRecord> }
  | { op: 'deleteUser'; name: string }
  | { op: 'addShare'; share: ShareRecord }
  | { op: 'updateShare'; id: string; changes: Partial<ShareRecord> }
  | { op: 'deleteShare'; id: string }
  | { op: 'setSettings'; settings: DbData['settings'] }
  | { op: 'revoke'; jti: string; exp: number; now: number };

const EMPTY: DbData = {
  users: [],
  shares: [],
  settings: { default_permissions: [] },
  revoked: {},
  seq: 0,
};

/** Journal size that triggers folding it into the snapshot (db.json). */
const COMPACT_BYTES = 8 * 1024 * 1024;

async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, 'r');
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

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
    // Serialised before the first await: the snapshot is exactly the data at the call.
    const text = JSON.stringify(data);
    const tmp = `${this.file}.tmp`;
    const handle = await open(tmp, 'w', 0o600);
    try {
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, this.file);
    await fsyncDir(this.dir);
  }
}

/**
 * Metadata: a lowdb snapshot (db.json) plus an append-only journal (db.journal).
 *
 * A change is applied to the in-memory data synchronously (so concurrent requests never lose one
 * another's changes), then appended to the journal and fsynced before the caller's promise
 * resolves. Appends go through one serialised queue that commits as a group: every change made
 * while a write runs goes into the next write. The cost of a change is a small append, whatever
 * the number of shares; the journal is folded into db.json when it grows, at start and at close.
 */
export class Store {
  private readonly db: Low<DbData>;
  private readonly journalPath: string;
  private journal!: FileHandle;
  private journalBytes = 0;
  private readonly usersByName = new Map<string, UserRecord>();
  private readonly sharesById = new Map<string, ShareRecord>();
  private pending: string[] = [];
  private writing: Promise<void> | null = null;
  private queued: Promise<void> | null = null;
  private closed = false;
  /** Set by close(): the next write folds the journal into db.json. */
  private compactNext = false;

  private constructor(dataDir: string) {
    this.journalPath = join(dataDir, 'db.journal');
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
    for (const u of store.data.users) store.usersByName.set(u.username, u);
    for (const s of store.data.shares) store.sharesById.set(s.share_id, s);
    await store.replay();
    // Start from a clean snapshot and an empty journal (this also drops a torn last line).
    await store.db.write();
    await (await open(store.journalPath, 'w', 0o600)).close();
    await fsyncDir(dataDir);
    // Append mode: after a truncation the next write lands at offset 0, not at a stale position.
    store.journal = await open(store.journalPath, 'a', 0o600);
    return store;
  }

  private get data(): DbData {
    return this.db.data;
  }

  /** Applies the journal entries the snapshot does not include yet. */
  private async replay(): Promise<void> {
    let text: string;
    try {
      text = await readFile(this.journalPath, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return;
      throw err;
    }
    for (const line of text.split('\n')) {
      let entry: Op & { seq: number };
      try {
        entry = JSON.parse(line) as Op & { seq: number };
      } catch {
        break; // a line cut by a crash was never acknowledged: stop there
      }
      if (entry.seq <= this.data.seq) continue;
      this.apply(entry);
      this.data.seq = entry.seq;
    }
  }

  /** The one place metadata changes, live and on replay. */
  private apply(op: Op): void {
    const data = this.data;
    switch (op.op) {
      case 'addUser':
        data.users.push(op.user);
        this.usersByName.set(op.user.username, op.user);
        break;
      case 'updateUser': {
        const user = this.usersByName.get(op.name)!;
        Object.assign(user, op.changes);
        if (user.username !== op.name) {
          this.usersByName.delete(op.name);
          this.usersByName.set(user.username, user);
          for (const share of data.shares) {
            if (share.owner_name === op.name) share.owner_name = user.username;
          }
        }
        break;
      }
      case 'deleteUser': {
        const user = this.usersByName.get(op.name);
        if (!user) break;
        this.usersByName.delete(op.name);
        data.users.splice(data.users.indexOf(user), 1);
        break;
      }
      case 'addShare':
        data.shares.push(op.share);
        this.sharesById.set(op.share.share_id, op.share);
        break;
      case 'updateShare':
        Object.assign(this.sharesById.get(op.id)!, op.changes);
        break;
      case 'deleteShare': {
        const share = this.sharesById.get(op.id);
        if (!share) break;
        this.sharesById.delete(op.id);
        data.shares.splice(data.shares.indexOf(share), 1);
        break;
      }
      case 'setSettings':
        data.settings = op.settings;
        break;
      case 'revoke':
        for (const [id, exp] of Object.entries(data.revoked)) {
          if (exp < op.now) delete data.revoked[id];
        }
        data.revoked[op.jti] = op.exp;
        break;
    }
  }

  /** Applies a change now; resolves once it is durable. */
  private change(op: Op): Promise<void> {
    this.apply(op);
    this.data.seq += 1;
    // Copied into the line now: later changes to the same record must not leak into it.
    this.pending.push(`${JSON.stringify({ seq: this.data.seq, ...op })}\n`);
    return this.flush();
  }

  /** Resolves once every change made before the call is on disk. */
  flush(): Promise<void> {
    if (!this.writing) {
      this.writing = this.writePending().finally(() => {
        this.writing = null;
      });
      return this.writing;
    }
    // A write is running and took the pending lines before ours: queue one more.
    this.queued ??= this.writing
      .catch(() => undefined)
      .then(() => {
        this.queued = null;
        return this.flush();
      });
    return this.queued;
  }

  private async writePending(): Promise<void> {
    const lines = this.pending;
    this.pending = [];
    if (this.compactNext || this.journalBytes >= COMPACT_BYTES) {
      this.compactNext = false;
      // The snapshot is taken synchronously here, so it holds exactly the lines just taken.
      await this.compact();
      return;
    }
    if (lines.length === 0) return;
    const text = lines.join('');
    await this.journal.write(text);
    await this.journal.datasync();
    this.journalBytes += Buffer.byteLength(text);
  }

  /** Folds everything into db.json, then empties the journal. Only from the write queue. */
  private async compact(): Promise<void> {
    await this.db.write();
    await this.journal.truncate(0);
    this.journalBytes = 0;
  }

  /** Flushes, folds the journal into db.json and closes it. */
  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.flush();
    this.compactNext = true;
    await this.flush();
    await this.journal.close();
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

  addUser(user: UserRecord): Promise<void> {
    return this.change({ op: 'addUser', user });
  }

  /** Applies changes to a user; a rename also moves the user's shares to the new name. */
  updateUser(name: string, changes: Partial<UserRecord>): Promise<void> {
    return this.change({ op: 'updateUser', name, changes });
  }

  deleteUser(name: string): Promise<void> {
    return this.change({ op: 'deleteUser', name });
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

  addShare(share: ShareRecord): Promise<void> {
    return this.change({ op: 'addShare', share });
  }

  updateShare(id: string, changes: Partial<ShareRecord>): Promise<void> {
    return this.change({ op: 'updateShare', id, changes });
  }

  deleteShare(id: string): Promise<void> {
    return this.change({ op: 'deleteShare', id });
  }

  // Settings and revocations

  get settings(): DbData['settings'] {
    return this.data.settings;
  }

  setSettings(settings: DbData['settings']): Promise<void> {
    return this.change({ op: 'setSettings', settings });
  }

  isRevoked(jti: string): boolean {
    return jti in this.data.revoked;
  }

  /** Records a revocation and drops the ones whose tokens have expired anyway. */
  revoke(jti: string, exp: number): Promise<void> {
    return this.change({ op: 'revoke', jti, exp, now: Math.floor(Date.now() / 1000) });
  }
}
