import { readFileSync } from 'node:fs';
import { open, readFile, rename, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { Low, type Adapter } from 'lowdb';
import { fault } from '../faults.js';
import { fsyncDir, isOutOfSpace, writeFileDurably } from '../fsutil.js';
import { writeFully } from '../../shared/copy.js';
import { naming } from '../../shared/syserr.js';
import { lockDataDir, type DataDirLock } from './dirlock.js';
import { KeyedMutex } from '../mutex.js';
import { RemovalReserve } from './reserve.js';
import { encodeLine, readJournal, type Entry } from './journal.js';
import {
  ChangedMeanwhileError,
  DamagedMetadataError,
  sameUserState,
  type LinkRecord,
  type MetadataStore,
  type NewShare,
  type CopyMark,
  type Settings,
  type ShareChanges,
  type StoreIdentity,
  tokenSpeaks,
  type UserChanges,
  type UserRecord,
  type UserState,
} from './index.js';
import {
  applyLegacy,
  emptyData,
  isLegacy,
  migrateLegacy,
  State,
  type DbData,
  type LegacyData,
  type Op,
} from './state.js';

/** Journal size that triggers folding it into the snapshot (db.json). */
const COMPACT_BYTES = 8 * 1024 * 1024;
/** After a failed compaction (a full disk), wait this long before trying again. */
const COMPACT_RETRY_MS = 30_000;

export interface LowdbStoreOptions {
  /** Start even if the journal is damaged: keep every valid entry, move the damaged file aside. */
  repair?: boolean;
  /** Receives notices: a torn journal end that was dropped, what a repair kept and skipped. */
  log?: (line: string) => void;
}

/**
 * lowdb adapter that replaces the file atomically and durably: temp file, fsync, rename, fsync
 * of the directory. steno (lowdb's default) renames but never fsyncs. The text is serialised by
 * the caller, at the moment the snapshot must describe.
 */
class DurableJsonFile implements Adapter<string> {
  constructor(private readonly file: string) {}

  async read(): Promise<string | null> {
    try {
      return await readFile(this.file, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw naming(err, this.file); // a read's EISDIR carries no path
    }
  }

  async write(text: string): Promise<void> {
    await writeFileDurably(this.file, text);
  }
}

interface Loaded {
  state: State;
  /** Where appends continue: the end of the last whole journal line. */
  goodBytes: number;
  journalBytes: number;
  notices: string[];
  /** Set when a repair dropped lines: the journal must be moved aside and rewritten. */
  repaired: boolean;
  /** Set when the files were fshare 0.1's: the new format must be written before anything else. */
  migrated: boolean;
  /** Set when the snapshot had no store id: one was made, and a snapshot must hold it. */
  idMade: boolean;
}

/**
 * Rebuilds the state from a snapshot's text and the journal's bytes. Without `repair`, damage
 * anywhere but a torn end throws DamagedMetadataError naming the file and line.
 */
function load(
  snapshotText: string | null,
  journal: Buffer,
  files: { snapshot: string; journal: string },
  repair: boolean,
): Loaded {
  let parsed: Partial<DbData> & { version?: unknown };
  const damaged = (what: string) =>
    new DamagedMetadataError(
      `${files.snapshot} ${what}. It is only ever replaced whole, so this is damage to the disk ` +
        `or a copy cut short: restore it from a backup.`,
    );
  // An empty file is damage too: fshare never writes one. Read as a new store, it made a new
  // administrator and the start removed every stored file as named by no share.
  if (snapshotText !== null && snapshotText.trim() === '') throw damaged('is empty');
  try {
    parsed = snapshotText !== null ? (JSON.parse(snapshotText) as Partial<DbData>) : { version: 2 };
  } catch (err) {
    throw damaged(`is damaged (${(err as Error).message})`);
  }
  const problem = shapeProblem(parsed);
  if (problem) throw damaged(`is not fshare's metadata (${problem})`);
  if (typeof parsed.version === 'number' && parsed.version > 2)
    throw new DamagedMetadataError(
      `${files.snapshot} was written by a newer fshare (metadata version ${parsed.version}); ` +
        `this one reads version 2 and fshare 0.1's. Run that newer fshare, or restore a backup ` +
        `made before it ran.`,
    );
  const legacy = isLegacy(parsed);
  const old = legacy
    ? ({
        users: [],
        shares: [],
        settings: { default_permissions: [] },
        revoked: {},
        seq: 0,
        ...parsed,
      } as unknown as LegacyData)
    : null;
  const data: DbData = old ? emptyData() : { ...emptyData(), ...parsed, version: 2 };
  // Made now (kept in memory until a snapshot holds it) when the snapshot has none.
  const idMade = old !== null || typeof parsed.store_id !== 'string';
  let state = new State(data);
  const contents = readJournal(journal);
  const notices: string[] = [];
  const skipped: string[] = contents.damaged.map((d) => `line ${d.line} (${d.reason})`);
  if (contents.damaged.length && !repair) {
    const first = contents.damaged[0]!;
    throw new DamagedMetadataError(
      `${files.journal} line ${first.line} is damaged (${first.reason}) and valid entries follow ` +
        `it. Start with \`fshare serve --repair\` to keep every valid entry and move the damaged ` +
        `journal aside.`,
    );
  }
  const seqOf = () => (old ? old.seq : data.seq);
  let gapRepaired = false;
  const first = contents.lines[0]?.entry.seq;
  if (snapshotText === null && first !== undefined && first > 1)
    throw new DamagedMetadataError(
      `${files.snapshot} is missing, and ${files.journal} begins at change ${first}: the ` +
        `changes before it were folded into ${files.snapshot}. Restore it from a backup.`,
    );
  // A journal that ends before its snapshot is one from before a fold: a fold empties the
  // journal once the snapshot holds every change in it, so the journal of now ends at the
  // snapshot's change or after it. Found from outside: a db.journal restored alone from an older
  // backup started silently, without the changes the journal it replaced held.
  const last = contents.lines[contents.lines.length - 1];
  if (!old && snapshotText !== null && last && last.entry.seq < seqOf()) {
    const stale =
      `${files.journal} ends at change ${last.entry.seq} (line ${last.line}), and ` +
      `${files.snapshot} holds the changes up to ${seqOf()}: the journal is older than the ` +
      `snapshot (${files.journal} restored from an older backup?), and the changes made since ` +
      `${files.snapshot} was written are in neither`;
    if (!repair)
      throw new DamagedMetadataError(
        `${stale}. Restore ${files.journal} from the same backup as ${files.snapshot}, or, to go ` +
          `on from ${files.snapshot} alone, move ${files.journal} aside.`,
      );
    notices.push(`repair: ${stale}; started from ${files.snapshot}`);
    gapRepaired = true;
  }
  for (const { line, entry } of contents.lines) {
    if (entry.seq <= seqOf()) continue; // already in the snapshot
    // Changes between what the snapshot holds and this entry are in neither file. Found from
    // outside: a db.json restored from a backup older than the last fold, beside the journal of
    // now, started with the backup's state plus the journal's later changes, and the changes in
    // between (a share, a removal, a revoked token, a new password) silently undone.
    if (!old && entry.seq > seqOf() + 1) {
      const gap =
        `${files.journal} line ${line} is change ${entry.seq}, and ${files.snapshot} holds the ` +
        `changes up to ${seqOf()}: ${entry.seq - 1 === seqOf() + 1 ? `change ${entry.seq - 1} is` : `changes ${seqOf() + 1} to ${entry.seq - 1} are`} in neither ` +
        `(${files.snapshot} restored from a backup older than its journal?)`;
      if (!repair)
        throw new DamagedMetadataError(
          `${gap}. Restore ${files.journal} from the same backup as ${files.snapshot}, or, to go ` +
            `on from ${files.snapshot} alone, move ${files.journal} aside.`,
        );
      notices.push(`repair: ${gap}; the later changes were applied`);
      gapRepaired = true;
    }
    try {
      if (old) applyLegacy(old, entry as unknown as Parameters<typeof applyLegacy>[1]);
      else state.apply(entry as unknown as Op, true);
    } catch (err) {
      if (!repair)
        throw new DamagedMetadataError(
          `${files.journal} line ${line} cannot be applied (${(err as Error).message}). Start ` +
            `with \`fshare serve --repair\` to keep every valid entry and move the damaged ` +
            `journal aside.`,
        );
      skipped.push(`line ${line} (${(err as Error).message})`);
      continue;
    }
    if (old) old.seq = entry.seq;
    else data.seq = entry.seq;
  }
  if (old) {
    state = new State(migrateLegacy(old));
    notices.push(`${files.snapshot}: metadata of fshare 0.1 carried over (users now have ids)`);
  }
  if (contents.torn)
    notices.push(
      `${files.journal}: dropped an unfinished last entry (line ${contents.torn.line}, ` +
        `${contents.torn.reason}); a crash cut it, so it was never acknowledged`,
    );
  if (skipped.length)
    notices.push(`repair: skipped ${files.journal} ${skipped.join(', ')}; kept every other entry`);
  return {
    state,
    goodBytes: contents.goodBytes,
    journalBytes: journal.length,
    notices,
    repaired: skipped.length > 0 || gapRepaired,
    migrated: legacy && (snapshotText !== null || contents.lines.length > 0),
    idMade,
  };
}

const isRecord = (v: unknown): v is Record<string, unknown> =>
  typeof v === 'object' && v !== null && !Array.isArray(v);

/**
 * What makes a parsed snapshot something other than fshare's metadata (of this version or 0.1),
 * or null. Read as a store, a stray JSON file started an empty server or failed with a
 * TypeError.
 */
function shapeProblem(parsed: unknown): string | null {
  if (!isRecord(parsed))
    return `it holds ${Array.isArray(parsed) ? 'a list' : parsed === null ? 'null' : `a ${typeof parsed}`}, not an object`;
  for (const key of ['users', 'shares', 'links'])
    if (key in parsed) {
      const value = parsed[key];
      if (!Array.isArray(value) || !value.every(isRecord))
        return `"${key}" is not a list of records`;
    }
  for (const key of ['settings', 'revoked', 'former_users'])
    if (key in parsed && !isRecord(parsed[key])) return `"${key}" is not an object`;
  if ('seq' in parsed && !(Number.isSafeInteger(parsed.seq) && (parsed.seq as number) >= 0))
    return '"seq" is not a count';
  if ('store_id' in parsed && typeof parsed.store_id !== 'string') return '"store_id" is not text';
  if ('version' in parsed && typeof parsed.version !== 'number') return '"version" is not a number';
  if ('version' in parsed && (parsed.version as number) < 2)
    return `unknown version ${parsed.version}`;
  // fshare 0.1 wrote no version, and always its users, shares, settings and seq.
  if (!('version' in parsed) && !('users' in parsed && 'shares' in parsed))
    return 'no version, users or shares';
  return null;
}

/** A change refused because the disk is full (answered 507, as ENOSPC is). */
function outOfSpace(): Error {
  return Object.assign(new Error('the disk is full (the reserve for removals is spent)'), {
    code: 'ENOSPC',
  });
}

/** Changes that only remove: the reserve keeps room to record them on a full disk. */
const REMOVALS: ReadonlySet<Op['op']> = new Set([
  'deleteShare',
  'deleteLink',
  'deleteUser',
  'revoke',
]);

/** A removal, or the end of every token of a user (`DELETE /users/<name>/tokens`). */
function isRemoval(op: Op): boolean {
  if (op.op === 'updateUser')
    return Object.entries(op.changes).every(
      ([k, v]) => k === 'token_gen' || (k === 'kept_token' && v === null),
    );
  return REMOVALS.has(op.op);
}

interface Waiter {
  op: Op;
  line: string;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/**
 * Metadata in a lowdb snapshot (db.json) plus an append-only journal (db.journal).
 *
 * A change is checked and applied to the in-memory state at once, so concurrent requests see
 * one another's changes in order, then appended to the journal; its promise resolves only after
 * the append was written in full and fsynced. Appends commit as a group: every change made while
 * a write runs goes into the next one. If an append fails (a full disk, an I/O error), the
 * journal is cut back to its last good byte and the state is rebuilt from the files, so every
 * change of the failed group and every change made since is undone and rejected.
 */
export class LowdbStore implements MetadataStore {
  private readonly db: Low<string>;
  private readonly files: { snapshot: string; journal: string };
  private state!: State;
  private journal!: FileHandle;
  private journalBytes = 0;
  private pending: Waiter[] = [];
  private writing: Promise<void> | null = null;
  private closed = false;
  private compactNext = false;
  private compactAfter = 0;
  /** Set when a failed write could not be undone: every change is refused until a restart. */
  private broken: Error | null = null;
  private readonly shareLocks = new KeyedMutex();
  /** This process's hold on the data directory, released by close(). */
  private lock: DataDirLock | undefined;
  /** Room for removals on a full disk (`reserve` in the data directory). */
  private readonly reserve: RemovalReserve;
  /** Whether db.json holds the store id (one made at this start is kept by the next snapshot). */
  private idSaved = false;
  private idMade = false;

  private constructor(
    private readonly dataDir: string,
    private readonly log: (line: string) => void,
  ) {
    this.files = { snapshot: join(dataDir, 'db.json'), journal: join(dataDir, 'db.journal') };
    this.db = new Low<string>(new DurableJsonFile(this.files.snapshot), '');
    this.reserve = new RemovalReserve(join(dataDir, 'reserve'));
  }

  static async open(dataDir: string, options: LowdbStoreOptions = {}): Promise<LowdbStore> {
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    // Before anything is read: another process may be writing these files.
    const lock = await lockDataDir(dataDir, log);
    try {
      const store = await LowdbStore.load(dataDir, options, log);
      store.lock = lock;
      await store.reserve.fill().catch(() => undefined);
      if (store.reserve.short)
        log(
          `metadata: no room on the disk for ${join(dataDir, 'reserve')}; changes other than removals are refused until there is`,
        );
      return store;
    } catch (err) {
      await lock.release();
      throw err;
    }
  }

  private static async load(
    dataDir: string,
    options: LowdbStoreOptions,
    log: (line: string) => void,
  ): Promise<LowdbStore> {
    const store = new LowdbStore(dataDir, log);
    // Not db.read(): lowdb takes an empty file for a missing one.
    const snapshot = await new DurableJsonFile(store.files.snapshot).read();
    const journal = await readFile(store.files.journal).catch((err: NodeJS.ErrnoException) => {
      if (err.code === 'ENOENT') return Buffer.alloc(0);
      throw naming(err, store.files.journal); // a read's EISDIR carries no path
    });
    const loaded = load(snapshot, journal, store.files, options.repair ?? false);
    for (const notice of loaded.notices) log(notice);
    store.state = loaded.state;
    store.idSaved = !loaded.idMade;
    store.idMade = loaded.idMade;
    if (loaded.repaired || loaded.migrated) {
      // A new snapshot must hold what was kept (or carried over) before anything is appended:
      // the old journal cannot be replayed over it.
      if (loaded.repaired) {
        const aside = `${store.files.journal}.damaged-${new Date().toISOString().replace(/[:.]/g, '-')}`;
        await rename(store.files.journal, aside);
        log(`repair: moved the damaged journal to ${aside}`);
      }
      store.db.data = JSON.stringify(store.state.data);
      await store.db.write().catch((err: Error) => {
        throw new Error(
          `cannot write ${store.files.snapshot} (${err.message}); nothing was changed`,
        );
      });
      store.idSaved = true;
      store.journal = await open(store.files.journal, loaded.repaired ? 'a' : 'w', 0o600);
      await store.journal.sync();
      await fsyncDir(dataDir);
      return store;
    }
    // Appends continue right after the last whole line: cut off a torn end first.
    store.journal = await open(store.files.journal, 'a+', 0o600);
    if (loaded.goodBytes < loaded.journalBytes) {
      await store.journal.truncate(loaded.goodBytes);
      await store.journal.sync();
    }
    store.journalBytes = loaded.goodBytes;
    // Start from a clean snapshot and an empty journal; on a full disk, go on with the journal.
    // A store id made now is kept by that snapshot.
    if (store.journalBytes > 0 || snapshot === null || loaded.idMade) {
      store.compactNext = true;
      await store.flush().catch(() => undefined);
    }
    return store;
  }

  // Reads: copies, so that a caller holding a record never sees it change under it (and can
  // never change the state by accident), as with a database.

  async getUser(name: string) {
    const user = this.state.usersByName.get(name);
    return user && { ...user };
  }

  async getUserById(id: string) {
    const user = this.state.usersById.get(id);
    return user && { ...user };
  }

  async userCount() {
    return this.state.data.users.length;
  }

  async listUsers(offset: number, limit: number) {
    return this.state.data.users.slice(offset, offset + limit).map((u) => ({ ...u }));
  }

  async usageOf(userId: string) {
    return this.state.usage.get(userId) ?? 0;
  }

  async getShare(id: string) {
    const share = this.state.sharesById.get(id.toLowerCase());
    return share && this.state.view(share);
  }

  async identity(): Promise<StoreIdentity> {
    return { id: this.idSaved ? this.state.data.store_id! : null, made: this.idMade };
  }

  async unfinishedCopy() {
    const mark = this.state.data.copy_unfinished;
    return mark ? { ...mark } : null;
  }

  markCopy(mark: CopyMark | null) {
    return this.change({ op: 'markCopy', mark: mark && { ...mark } });
  }

  clearUnfinishedCopy() {
    return this.change({ op: 'clearCopy' });
  }

  async shareCount() {
    return this.state.data.shares.length;
  }

  async listShares(offset: number, limit: number) {
    return this.state.data.shares.slice(offset, offset + limit).map((s) => this.state.view(s));
  }

  async *eachShare() {
    // A copy of the list: shares may come and go while the caller awaits between items.
    for (const share of [...this.state.data.shares]) yield this.state.view(share);
  }

  async getSettings() {
    return { ...this.state.data.settings };
  }

  async getLink(id: string) {
    const link = this.state.linksById.get(id);
    return link && { ...link };
  }

  async getLinkByTokenHash(tokenSha256: string) {
    const link = this.state.linksByHash.get(tokenSha256);
    return link && { ...link };
  }

  async listLinks(shareId?: string) {
    const all = this.state.data.links;
    return (shareId === undefined ? all : all.filter((l) => l.share_id === shareId)).map((l) => ({
      ...l,
    }));
  }

  async listOwnedLinks(ownerId: string) {
    return this.state.data.links
      .filter((l) => this.state.sharesById.get(l.share_id)?.owner_id === ownerId)
      .map((l) => ({ ...l }));
  }

  async expiredShares(now: number) {
    const due: ReturnType<State['view']>[] = [];
    for (const [id, at] of this.state.expiring) {
      const share = this.state.sharesById.get(id);
      if (at <= now && share) due.push(this.state.view(share));
    }
    return due;
  }

  async nextExpiry() {
    let next: number | null = null;
    for (const at of this.state.expiring.values()) if (next === null || at < next) next = at;
    return next;
  }

  async isRevoked(jti: string) {
    return jti in this.state.data.revoked;
  }

  // Changes

  addUser(user: UserRecord, options?: { copied?: boolean }) {
    return this.change({
      op: 'addUser',
      user: { ...user },
      ...(options?.copied ? { copied: true as const } : {}),
    });
  }

  async updateUser(
    id: string,
    { end_tokens, keep_token, ...changes }: UserChanges,
    expect?: UserState,
  ) {
    let gen = 0;
    // Resolved when the change is applied, so the generation read is the one it replaces.
    await this.change(() => {
      const user = this.state.usersById.get(id);
      // Checked where it is applied: nothing can change the user between this and the write.
      if (user && expect && !sameUserState(user, expect)) throw new ChangedMeanwhileError();
      gen = (changes.token_gen ?? user?.token_gen ?? 0) + (end_tokens ? 1 : 0);
      if (!end_tokens) return { op: 'updateUser', id, changes };
      const ended: UserChanges = { ...changes, token_gen: gen };
      // The token to keep must still speak for the user now: one ended by a change written
      // first (a sign-out everywhere) stays ended.
      if (keep_token && user && tokenSpeaks(user, keep_token)) ended.kept_token = keep_token;
      else if (user?.kept_token) ended.kept_token = null;
      return { op: 'updateUser', id, changes: ended };
    });
    return gen;
  }

  deleteUser(id: string) {
    return this.change({ op: 'deleteUser', id });
  }

  addShare(share: NewShare) {
    const { owner_name: _shown, ...stored } = share as NewShare & { owner_name?: unknown };
    return this.change({ op: 'addShare', share: stored });
  }

  updateShare(id: string, changes: ShareChanges) {
    return this.change({ op: 'updateShare', id, changes });
  }

  deleteShare(id: string) {
    return this.change({ op: 'deleteShare', id });
  }

  setSettings(settings: Settings) {
    return this.change({ op: 'setSettings', settings });
  }

  updateSettings(changes: Partial<Settings>) {
    return this.change(() => ({
      op: 'setSettings',
      settings: { ...this.state.data.settings, ...changes },
    }));
  }

  revoke(jti: string, exp: number) {
    return this.change({ op: 'revoke', jti, exp, now: Math.floor(Date.now() / 1000) });
  }

  addLink(link: LinkRecord) {
    return this.change({ op: 'addLink', link: { ...link } });
  }

  deleteLink(id: string) {
    return this.change({ op: 'deleteLink', id });
  }

  countDownload(id: string) {
    return this.change({ op: 'countDownload', id });
  }

  withShareLock<T>(id: string, task: () => Promise<T>): Promise<T> {
    return this.shareLocks.run(id.toLowerCase(), task);
  }

  /**
   * Applies a change now; resolves once it is durable. While the reserve for removals is spent
   * (the disk is full), any other change first waits for it to be made whole again, and is
   * refused (out of space, 507) when it cannot be: the reserve's room stays for removals. `op`
   * may be a function that makes it when it applies (a change that depends on the state it
   * replaces: a generation plus one, settings merged).
   */
  private change(op: Op | (() => Op)): Promise<void> {
    if (!this.reserve.short || isRemoval(typeof op === 'function' ? op() : op))
      return this.changeNow(op);
    return this.reserve
      .fill()
      .catch(() => undefined)
      .then(() => {
        if (this.reserve.short) throw outOfSpace();
        return this.changeNow(op);
      });
  }

  private changeNow(made: Op | (() => Op)): Promise<void> {
    if (this.closed) return Promise.reject(new Error('the metadata store is closed'));
    if (this.broken) return Promise.reject(this.broken);
    const op = typeof made === 'function' ? made() : made;
    // Copied into the line first: the state keeps the op's objects and changes them later.
    const seq = this.state.data.seq + 1;
    const line = encodeLine({ seq, ...op } as Entry);
    try {
      this.state.apply(op); // throws, having changed nothing, when the change cannot apply
    } catch (err) {
      return Promise.reject(err as Error); // a refused change is a rejection, like any other
    }
    this.state.data.seq = seq;
    return new Promise<void>((resolve, reject) => {
      this.pending.push({ op, line, resolve, reject });
      void this.flush();
    });
  }

  /** Resolves once every change made before the call is on disk (or has failed). */
  flush(): Promise<void> {
    this.writing ??= this.writeLoop().finally(() => {
      this.writing = null;
      // A change made after the loop's last look (by code its last batch resumed) was handed
      // this ending loop by flush(): it is written now, not whenever the next change comes.
      if (this.pending.length > 0) void this.flush();
    });
    return this.writing;
  }

  private async writeLoop(): Promise<void> {
    while (this.pending.length > 0 || this.compactDue()) {
      const batch = this.pending;
      this.pending = [];
      // Taken now, when the state holds exactly what is durable plus this batch.
      const snapshot = this.compactDue() ? JSON.stringify(this.state.data) : null;
      if (batch.length > 0) {
        try {
          await this.append(batch.map((w) => w.line).join(''));
        } catch (err) {
          await this.undoSinceLastGood(batch, err);
          continue;
        }
        for (const w of batch) w.resolve();
      }
      if (snapshot !== null) await this.compact(snapshot);
    }
  }

  private compactDue(): boolean {
    return (
      this.compactNext || (this.journalBytes >= COMPACT_BYTES && Date.now() >= this.compactAfter)
    );
  }

  /** Appends the text in full and fsyncs it; throws, with the journal cut back, otherwise. */
  private async append(text: string): Promise<void> {
    const bytes = Buffer.from(text);
    await fault('journal.mid-write', () =>
      this.journal.write(bytes.subarray(0, bytes.length >> 1)),
    );
    await writeFully(this.journal, bytes, null);
    await fault('journal.before-fsync');
    await this.journal.datasync();
    this.journalBytes += bytes.length;
  }

  /**
   * A failed append: cut the journal back to its last good byte and rebuild the state from the
   * files, then reject the failed group and every change applied since (they are all undone).
   */
  private async undoSinceLastGood(batch: Waiter[], err: unknown): Promise<void> {
    try {
      await this.journal.truncate(this.journalBytes);
    } catch (cutErr) {
      this.log(`metadata: cannot cut ${this.files.journal} back after a failed write: ${cutErr}`);
    }
    // Synchronous from here on, so no change can slip in between the rebuild and the reject.
    try {
      let snapshot: string | null = null;
      try {
        snapshot = readFileSync(this.files.snapshot, 'utf8');
      } catch (readErr) {
        if ((readErr as NodeJS.ErrnoException).code !== 'ENOENT') throw readErr;
      }
      const journal = readFileSync(this.files.journal).subarray(0, this.journalBytes);
      const id = this.state.data.store_id;
      this.state = load(snapshot, journal, this.files, false).state;
      this.state.data.store_id = id; // made at the start, maybe not in a snapshot yet
    } catch (rebuildErr) {
      // The state may hold undone changes now: refuse every change until a restart.
      this.broken = new Error(
        `the metadata store failed and needs a restart: ${String(rebuildErr)}`,
      );
      this.log(`metadata: ${this.broken.message}`);
    }
    const undone = [...batch, ...this.pending];
    this.pending = [];
    // A full disk: removals are applied again (in their order, on the state rebuilt from the
    // files) and written with the room the reserve gives back; the rest are refused.
    const retry = isOutOfSpace(err) && !this.broken && !this.reserve.short;
    for (const w of undone) {
      if (retry && isRemoval(w.op) && this.reapply(w)) continue;
      w.reject(err);
    }
    if (this.pending.length === 0) return;
    const released = await this.reserve.release().catch(() => false);
    if (released)
      this.log(
        `metadata: the disk is full: removals are recorded in the room of ${join(this.dataDir, 'reserve')}, other changes are refused until it can be made again`,
      );
  }

  /** Applies an undone change again, queued with a new sequence number; false if it cannot be. */
  private reapply(w: Waiter): boolean {
    const seq = this.state.data.seq + 1;
    try {
      this.state.apply(w.op);
    } catch {
      return false;
    }
    this.state.data.seq = seq;
    this.pending.push({ ...w, line: encodeLine({ seq, ...w.op } as Entry) });
    return true;
  }

  /** Writes the snapshot (the state as of `text`), then empties the journal. */
  private async compact(text: string): Promise<void> {
    this.compactNext = false;
    try {
      this.db.data = text;
      await this.db.write();
      this.idSaved = true;
      await fault('compact.after-rename');
      // Entries up to the snapshot's seq are skipped at replay, so a crash before this is harmless.
      await this.journal.truncate(0);
      await this.journal.sync();
      this.journalBytes = 0;
    } catch (err) {
      this.compactAfter = Date.now() + COMPACT_RETRY_MS;
      this.log(
        `metadata: cannot fold the journal into ${this.files.snapshot} (${(err as Error).message}); the journal keeps every change`,
      );
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.flush();
    this.compactNext = true;
    await this.flush();
    await this.journal.close();
    await this.lock?.release();
  }
}
