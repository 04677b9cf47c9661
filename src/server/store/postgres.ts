import { AsyncLocalStorage } from 'node:async_hooks';
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import {
  Client,
  DatabaseError,
  Pool,
  types,
  type ClientConfig,
  type PoolClient,
  type QueryResultRow,
} from 'pg';
import type { RateLimiterAbstract } from 'rate-limiter-flexible';
import type { Permission } from '../../shared/permissions.js';
import { limiterClass } from '../limiters.js';
import { KeyedMutex } from '../mutex.js';
import {
  ChangedMeanwhileError,
  DuplicateUserError,
  LastAdminError,
  LinkUsedUpError,
  LockLostError,
  MissingRecordError,
  OutcomeUnknownError,
  type LinkRecord,
  type MetadataStore,
  type NewShare,
  type Settings,
  type ShareChanges,
  type CopyMark,
  type StoreIdentity,
  type ShareRecord,
  type UserChanges,
  type UserRecord,
  type UserState,
} from './index.js';
import { requireSessions } from './sessions.js';

/**
 * The schema, one entry per version (entry 0 is version 1). An entry that has shipped is never
 * edited: a change is a new entry. Dates are kept as the strings the records carry; `seq` is
 * the order of insertion, which is the order every list is in (as lowdb's arrays are);
 * `sha256_absent` and `expires_absent` tell a record without the field (written by fshare 0.1)
 * from one where it is null. A user's `legacy_tokens` is NULL when the record has no such field.
 */
export const MIGRATIONS: readonly string[] = [
  `CREATE TABLE fshare_users (
     seq bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT fshare_users_seq_key UNIQUE,
     id text CONSTRAINT fshare_users_pkey PRIMARY KEY,
     username text NOT NULL CONSTRAINT fshare_users_username_key UNIQUE,
     permissions text[] NOT NULL,
     register_date text NOT NULL,
     password_hash text NOT NULL,
     token_gen bigint NOT NULL,
     quota bigint,
     legacy_tokens boolean
   );
   -- Deleted users' last names, so that their shares can say whose they were.
   CREATE TABLE fshare_former_users (id text PRIMARY KEY, username text NOT NULL);
   CREATE TABLE fshare_shares (
     seq bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT fshare_shares_seq_key UNIQUE,
     share_id text CONSTRAINT fshare_shares_pkey PRIMARY KEY,
     -- UTF-8 bytes: a file name may hold U+0000, which text cannot.
     file_name bytea NOT NULL,
     owner_id text,
     initialized boolean NOT NULL,
     locked boolean NOT NULL,
     create_date text NOT NULL,
     size bigint,
     sha256 text,
     sha256_absent boolean NOT NULL DEFAULT false,
     expires text,
     expires_absent boolean NOT NULL DEFAULT false,
     -- Date.parse(expires), computed where lowdb computes it: in the server.
     expires_ms double precision,
     blob text
   );
   CREATE INDEX fshare_shares_owner ON fshare_shares (owner_id);
   CREATE INDEX fshare_shares_expiry ON fshare_shares (expires_ms) WHERE expires_ms IS NOT NULL;
   CREATE TABLE fshare_links (
     seq bigint GENERATED ALWAYS AS IDENTITY CONSTRAINT fshare_links_seq_key UNIQUE,
     id text CONSTRAINT fshare_links_pkey PRIMARY KEY,
     share_id text NOT NULL REFERENCES fshare_shares (share_id) ON DELETE CASCADE,
     token_sha256 text NOT NULL CONSTRAINT fshare_links_token_key UNIQUE,
     created_by text,
     create_date text NOT NULL,
     expires text,
     max_downloads bigint,
     downloads bigint NOT NULL,
     password_hash text
   );
   CREATE INDEX fshare_links_share ON fshare_links (share_id);
   CREATE INDEX fshare_links_creator ON fshare_links (created_by);
   -- Revoked token ids and their expiry (seconds since the epoch), kept until then.
   CREATE TABLE fshare_revoked (jti text PRIMARY KEY, exp double precision NOT NULL);
   CREATE INDEX fshare_revoked_exp ON fshare_revoked (exp);
   -- json, not jsonb: the settings come back exactly as they were written.
   CREATE TABLE fshare_settings (
     id boolean PRIMARY KEY DEFAULT true CHECK (id),
     settings json NOT NULL
   );
   CREATE TABLE fshare_secrets (name text PRIMARY KEY, value text NOT NULL);
   -- rate-limiter-flexible's own table (RateLimiterPostgres._getCreateTableStmt), made here so
   -- that the limiters never create it themselves.
   CREATE TABLE fshare_rate_limits (
     key varchar(255) PRIMARY KEY,
     points integer NOT NULL DEFAULT 0,
     expire bigint
   );
   CREATE INDEX fshare_rate_limits_expire ON fshare_rate_limits (expire);`,
  // User names that differ only in case name one user: a second "Bob" beside "bob" is refused.
  // A database that already holds such a pair (made before this version) keeps it, unguarded.
  `DO $$
   BEGIN
     IF NOT EXISTS (SELECT 1 FROM fshare_users GROUP BY lower(username) HAVING count(*) > 1) THEN
       CREATE UNIQUE INDEX fshare_users_username_lower ON fshare_users (lower(username));
     END IF;
   END $$;`,
  // The token a user's own password change left working (UserRecord.kept_token): both or neither.
  `ALTER TABLE fshare_users ADD COLUMN IF NOT EXISTS kept_jti text,
     ADD COLUMN IF NOT EXISTS kept_gen bigint;`,
  // A handover whose ending of the share's unfinished uploads is still to come (handover.ts).
  `ALTER TABLE fshare_shares ADD COLUMN IF NOT EXISTS pending_handover text;`,
];

/** A unique violation of a user name, exact or differing only in case. */
const nameTaken = (err: unknown) =>
  isViolation(err, '23505', 'fshare_users_username_key') ||
  isViolation(err, '23505', 'fshare_users_username_lower');

const RATE_LIMIT_TABLE = 'fshare_rate_limits';
/** Shares per query when eachShare pages through them. */
export const EACH_SHARE_PAGE = 200;
/** Rate-limit rows are swept this often, once they expired an hour ago. */
const SWEEP_MS = 5 * 60_000;

export interface PostgresStoreOptions {
  log?: (line: string) => void;
  /** Connections for queries; default 10. */
  poolSize?: number;
  /** Connections that hold share locks (one per lock taken outside any other); default 10. */
  lockPoolSize?: number;
  /**
   * Who opens it, when that must be known to the others: a server ('serve') holds the database
   * shared for its whole life, a copy ('copy') alone (OCCUPIED_LOCK). Unset: neither (`admin
   * passwd`, which may run beside servers).
   */
  occupy?: 'serve' | 'copy';
}

/** A signed 64-bit advisory-lock key for a string: the first 8 bytes of its sha256. */
function lockKey(name: string): string {
  return createHash('sha256').update(name).digest().readBigInt64BE(0).toString();
}

const MIGRATION_LOCK = lockKey('fshare:migrations');
const REVOCATION_LOCK = lockKey('fshare:revocations');
/** Held by every change that could take ADMIN from the last user who has it. */
const ADMIN_LOCK = lockKey('fshare:administrators');
/** Held while the settings are read and written back with a change. */
const SETTINGS_LOCK = lockKey('fshare:settings');
/**
 * Held shared by every running server, on a connection of its own for its whole life, and alone
 * by `fshare admin import`/`export` for the whole copy: a copy never reads or fills a database
 * that servers are changing meanwhile (it would miss what they do), and no server starts on a
 * database being copied. Found from outside: an export run beside a server copied a moving
 * database without a word; the data directory has its lock (dirlock.ts), PostgreSQL had none.
 */
const OCCUPIED_LOCK = lockKey('fshare:occupied');

/** The database is held by the other side: servers for a copy, a copy for a server. */
export class StoreOccupiedError extends Error {
  override readonly name = 'StoreOccupiedError';
}

/** bigint columns as numbers (every count and size here is far below 2^53). */
const numberTypes = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
    oid === types.builtins.INT8 && format !== 'binary'
      ? (value: string) => Number(value)
      : types.getTypeParser(oid, format)) as typeof types.getTypeParser,
};

/** "host:port" of a connection URL, for messages (never the password). */
function describeServer(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    return 'the server the URL names';
  }
  const host =
    parsed.searchParams.get('host') ||
    decodeURIComponent(parsed.hostname) ||
    process.env.PGHOST ||
    'localhost';
  const port = parsed.searchParams.get('port') || parsed.port || process.env.PGPORT || '5432';
  return `${host}:${port}`;
}

function isViolation(err: unknown, code: '23505' | '23503', constraint?: string): boolean {
  return (
    err instanceof DatabaseError &&
    err.code === code &&
    (constraint === undefined || err.constraint === constraint)
  );
}

/** An error's message; a failed connection to every address of a name has none of its own. */
function reason(err: unknown): string {
  if (err instanceof AggregateError && !err.message)
    return [...new Set(err.errors.map((e: unknown) => reason(e)))].join('; ');
  if (err instanceof Error) return err.message || (err as NodeJS.ErrnoException).code || err.name;
  return String(err);
}

const closedError = () => new Error('the metadata store is closed');

// Rows as the queries below select them, and the records they make.

interface UserRow {
  id: string;
  username: string;
  permissions: string[];
  register_date: string;
  password_hash: string;
  token_gen: number;
  quota: number | null;
  legacy_tokens: boolean | null;
  kept_jti: string | null;
  kept_gen: number | null;
}

const USER_COLUMNS =
  'id, username, permissions, register_date, password_hash, token_gen, quota, legacy_tokens, kept_jti, kept_gen';

function userOf(row: UserRow): UserRecord {
  const user: UserRecord = {
    id: row.id,
    username: row.username,
    permissions: row.permissions as Permission[],
    register_date: row.register_date,
    password_hash: row.password_hash,
    token_gen: row.token_gen,
    quota: row.quota,
  };
  if (row.legacy_tokens !== null) user.legacy_tokens = row.legacy_tokens;
  if (row.kept_jti !== null && row.kept_gen !== null)
    user.kept_token = { jti: row.kept_jti, gen: Number(row.kept_gen) };
  return user;
}

interface ShareRow {
  seq: number;
  share_id: string;
  file_name: Buffer;
  owner_id: string | null;
  initialized: boolean;
  locked: boolean;
  create_date: string;
  size: number | null;
  sha256: string | null;
  sha256_absent: boolean;
  expires: string | null;
  expires_absent: boolean;
  blob: string | null;
  pending_handover: string | null;
  owner_name: string | null;
}

/** A share with `owner_name`: its owner's current name, or whose it was (state.ts ownerName). */
const SHARE_SELECT = `
  SELECT s.seq, s.share_id, s.file_name, s.owner_id, s.initialized, s.locked, s.create_date, s.size,
         s.sha256, s.sha256_absent, s.expires, s.expires_absent, s.blob, s.pending_handover,
         CASE WHEN s.owner_id IS NULL THEN NULL
              ELSE coalesce(u.username, coalesce(f.username, 'unknown') || ' (deleted)')
         END AS owner_name
    FROM fshare_shares s
    LEFT JOIN fshare_users u ON u.id = s.owner_id
    LEFT JOIN fshare_former_users f ON f.id = s.owner_id`;

function shareOf(row: ShareRow): ShareRecord {
  const share: Omit<ShareRecord, 'owner_name'> = {
    share_id: row.share_id,
    file_name: row.file_name.toString('utf8'),
    owner_id: row.owner_id,
    initialized: row.initialized,
    locked: row.locked,
    create_date: row.create_date,
    size: row.size,
  };
  if (!row.sha256_absent) share.sha256 = row.sha256;
  if (!row.expires_absent) share.expires = row.expires;
  if (row.blob !== null) share.blob = row.blob;
  if (row.pending_handover !== null) share.pending_handover = row.pending_handover;
  return { ...share, owner_name: row.owner_name };
}

/** When a share expires, as lowdb's state computes it (a share with a falsy expiry never does). */
function expiryMs(expires: string | null | undefined): number | null {
  if (!expires) return null;
  const at = Date.parse(expires);
  return Number.isNaN(at) ? null : at;
}

const LINK_COLUMNS =
  'id, share_id, token_sha256, created_by, create_date, expires, max_downloads, downloads, password_hash';

function linkOf(row: LinkRecord): LinkRecord {
  return {
    id: row.id,
    share_id: row.share_id,
    token_sha256: row.token_sha256,
    created_by: row.created_by,
    create_date: row.create_date,
    expires: row.expires,
    max_downloads: row.max_downloads,
    downloads: row.downloads,
    password_hash: row.password_hash,
  };
}

/** `column = $n` assignments for an UPDATE, numbering parameters after those in `values`. */
class Assignments {
  readonly sets: string[] = [];
  constructor(readonly values: unknown[]) {}

  /** Adds a parameter; returns its placeholder. */
  param(value: unknown): string {
    this.values.push(value);
    return `$${this.values.length}`;
  }

  set(column: string, value: unknown): void {
    this.sets.push(`${column} = ${this.param(value)}`);
  }
}

/**
 * rate-limiter-flexible's PostgreSQL limiter with its keys hashed: callers join the parts of a
 * key with U+0000, which text cannot hold, and a key may be longer than the table's 255.
 */
class SharedLimiter extends limiterClass('RateLimiterPostgres') {
  override getKey(key: string | number): string {
    return super.getKey(createHash('sha256').update(String(key)).digest('base64url'));
  }
}

/** A query failed for its connection (lost, cut, terminated): it may have run all the same. */
function connectionFailed(err: unknown): boolean {
  return (
    err instanceof LockLostError ||
    !(err instanceof DatabaseError) ||
    /^(08|57P)/.test(err.code ?? '')
  );
}

/**
 * The locks one task holds on one lock connection. Locks taken inside the task (nested, other
 * keys) join its connection, so nesting never needs a second connection from the lock pool;
 * the connection goes back to the pool when the last of them is released. The task's own
 * queries run on this connection too (PostgresStore.query): that is what fences them.
 */
class LockSession {
  private holders = 1;
  private lost: Error | undefined;
  private readonly onError = (err: Error) => {
    this.lost ??= err;
    this.log(
      `metadata: lost the PostgreSQL connection holding share locks (${err.message}); ` +
        `its locks were released with it`,
    );
  };

  constructor(
    private readonly client: PoolClient,
    private readonly log: (line: string) => void,
  ) {
    client.on('error', this.onError);
  }

  /** Joins this session for a nested lock; false once it has been given back. */
  join(): boolean {
    if (this.holders === 0) return false;
    this.holders += 1;
    return true;
  }

  /** Whether the task is still running: its queries go to this connection. */
  get active(): boolean {
    return this.holders > 0;
  }

  /** The PostgreSQL backend (its process id) at the other end of this connection. */
  get backend(): number | undefined {
    return (this.client as { processID?: number | null }).processID ?? undefined;
  }

  async lock(key: string): Promise<void> {
    await this.query('SELECT pg_advisory_lock($1::bigint)', [key]);
  }

  async unlock(key: string): Promise<void> {
    // A connection that failed has released its locks; it is destroyed in leave().
    await this.query('SELECT pg_advisory_unlock($1::bigint)', [key]).catch(() => undefined);
  }

  leave(): void {
    this.holders -= 1;
    if (this.holders > 0) return;
    this.client.off('error', this.onError);
    this.client.release(this.lost);
  }

  /**
   * A query on the lock's connection. Once that connection has failed, PostgreSQL has released
   * its locks and no query runs on it again: LockLostError. Any other error is the statement's.
   */
  async query<R extends QueryResultRow>(text: string, values?: unknown[]): Promise<R[]> {
    if (this.lost) throw new LockLostError();
    try {
      return (await this.client.query<R>(text, values)).rows;
    } catch (err) {
      // The connection's own failure: not from the server (pg's "Connection terminated",
      // "not queryable"), or the server's about the connection (08xxx, 57P01 terminated).
      if (this.lost || !(err instanceof DatabaseError) || /^(08|57P)/.test(err.code ?? '')) {
        this.lost ??= err as Error;
        throw new LockLostError();
      }
      throw err;
    }
  }
}

/**
 * Metadata in PostgreSQL, shared by any number of fshare servers: each rule the embedded store
 * keeps by applying one change at a time is kept here by a constraint, a single statement or a
 * transaction, so servers on one database behave as one server. A change resolves after its
 * commit (durable, with PostgreSQL's default synchronous_commit) and a change that rejects was
 * rolled back. Records are built fresh from rows: a caller can never change the store through one.
 */
export class PostgresStore implements MetadataStore {
  private closed = false;
  /** Tasks on one key that need a lock connection, one at a time. */
  private readonly connecting = new KeyedMutex();
  /** The keys locked in this process, whether on a connection of their own or nested. */
  private readonly held = new KeyedMutex();
  private readonly sessions = new AsyncLocalStorage<LockSession>();
  private readonly sweeper: NodeJS.Timeout;
  /** The connection holding OCCUPIED_LOCK (options.occupy), while it is held. */
  private occupant: Client | null = null;
  private reoccupy: NodeJS.Timeout | undefined;

  private constructor(
    private readonly pool: Pool,
    /** Only for share locks: a lock holder waiting for a query connection never starves it. */
    private readonly lockPool: Pool,
    private readonly log: (line: string) => void,
  ) {
    const lost = (err: Error) =>
      log(`metadata: an idle PostgreSQL connection failed (${err.message}); it was closed`);
    pool.on('error', lost);
    lockPool.on('error', lost);
    this.sweeper = setInterval(() => void this.sweepRateLimits(), SWEEP_MS).unref();
  }

  /** Connects, brings the schema up to date and returns the store. */
  static async open(url: string, options: PostgresStoreOptions = {}): Promise<PostgresStore> {
    const log = options.log ?? ((line: string) => process.stderr.write(`${line}\n`));
    const where = describeServer(url);
    const config: ClientConfig = {
      connectionString: url,
      application_name: 'fshare',
      keepAlive: true,
      types: numberTypes,
    };
    const client = new Client({ ...config, connectionTimeoutMillis: 15_000 });
    // An error event while connecting also rejects connect(); without a listener it would throw.
    client.on('error', () => undefined);
    try {
      await client.connect();
    } catch (err) {
      await client.end().catch(() => undefined);
      throw new Error(`cannot connect to PostgreSQL at ${where}: ${reason(err)}`);
    }
    try {
      await requireSessions(client, config);
      await migrate(client, log);
    } catch (err) {
      // PostgreSQL 15 and later let only the database's owner create tables in `public`:
      // "permission denied for schema public" alone does not say what to grant.
      const denied = (err as { code?: string }).code === '42501';
      throw new Error(
        `PostgreSQL at ${where}: ${reason(err)}` +
          (denied
            ? ` (fshare makes its tables at the first start: make ${client.user ?? 'its user'} ` +
              `the database's owner, or GRANT CREATE ON SCHEMA public TO ${client.user ?? 'it'})`
            : ''),
      );
    } finally {
      await client.end().catch(() => undefined);
    }
    const poolSize = options.poolSize ?? 10;
    const pool = new Pool({ ...config, max: poolSize });
    const lockPool = new Pool({
      ...config,
      application_name: 'fshare-locks',
      max: options.lockPoolSize ?? 10,
    });
    const store = new PostgresStore(pool, lockPool, log);
    if (options.occupy)
      await store.occupy(config, options.occupy, where).catch(async (err: unknown) => {
        await store.close();
        throw err;
      });
    return store;
  }

  /**
   * Takes OCCUPIED_LOCK on a connection of its own, held until close(): shared for a server,
   * alone for a copy. StoreOccupiedError when the other side holds it. A server whose connection
   * fails (PostgreSQL restarted) takes it again, every few seconds until it has it.
   */
  private async occupy(config: ClientConfig, mode: 'serve' | 'copy', where: string) {
    const client = new Client({
      ...config,
      application_name: mode === 'copy' ? 'fshare-copy' : 'fshare-serve',
      connectionTimeoutMillis: 15_000,
    });
    client.on('error', () => undefined); // ended below, or by 'end' when lost
    try {
      await client.connect();
    } catch (err) {
      await client.end().catch(() => undefined);
      throw new Error(`cannot connect to PostgreSQL at ${where}: ${reason(err)}`);
    }
    const take = mode === 'copy' ? 'pg_try_advisory_lock' : 'pg_try_advisory_lock_shared';
    let taken = false;
    try {
      const { rows } = await client.query<{ taken: boolean }>(
        `SELECT ${take}($1::bigint) AS taken`,
        [OCCUPIED_LOCK],
      );
      taken = rows[0]!.taken;
      if (!taken) throw new StoreOccupiedError(await this.occupiedText(client, mode));
    } finally {
      if (!taken) await client.end().catch(() => undefined);
    }
    if (this.closed) {
      await client.end().catch(() => undefined);
      return;
    }
    this.occupant = client;
    client.once('end', () => {
      if (this.occupant !== client || this.closed) return;
      this.occupant = null;
      this.log(
        `metadata: lost the PostgreSQL connection that shows this ${mode === 'copy' ? 'copy' : 'server'} is running; taking it again`,
      );
      this.occupyAgain(config, mode, where);
    });
  }

  private occupyAgain(config: ClientConfig, mode: 'serve' | 'copy', where: string): void {
    this.reoccupy = setTimeout(() => {
      if (this.closed) return;
      this.occupy(config, mode, where).catch((err: unknown) => {
        if (err instanceof StoreOccupiedError) this.log(`metadata: ${err.message}`);
        this.occupyAgain(config, mode, where);
      });
    }, 5_000);
    this.reoccupy.unref();
  }

  /** Who holds OCCUPIED_LOCK against `mode`, as one sentence with what to do. */
  private async occupiedText(client: Client, mode: 'serve' | 'copy'): Promise<string> {
    // An advisory lock on a bigint key shows in pg_locks as its two halves (objsubid 1).
    const key = BigInt.asUintN(64, BigInt(OCCUPIED_LOCK));
    const { rows } = await client
      .query<{ pid: number; addr: string | null; since: Date | null }>(
        `SELECT l.pid, host(a.client_addr) AS addr, a.backend_start AS since
           FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
          WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
            AND l.classid = $1 AND l.objid = $2
          ORDER BY l.pid`,
        [Number(key >> 32n), Number(key & 0xffffffffn)],
      )
      .catch(() => ({ rows: [] }));
    const holders = rows
      .map(
        (r) =>
          `backend ${r.pid}${r.addr ? ` from ${r.addr}` : ''}${r.since ? ` since ${r.since.toISOString()}` : ''}`,
      )
      .join(', ');
    const seen = holders ? ` (${holders})` : '';
    if (mode === 'copy')
      return (
        `the PostgreSQL database is in use by ${rows.length || 'some'} running fshare serve${rows.length === 1 ? '' : 's'}${seen}: ` +
        `stop them before copying it (a copy of a database in use would miss what they change meanwhile); ` +
        `a server that is gone without closing its connection is ended with SELECT pg_terminate_backend(<backend>)`
      );
    return (
      `the PostgreSQL database is being copied by fshare admin import or export${seen}: ` +
      `no server starts on it until the copy is done`
    );
  }

  /**
   * The JWT signing secret every server on this database shares: the first server to ask makes
   * it, and every later (or simultaneous) one reads the same.
   */
  async sharedSecret(): Promise<string> {
    this.live();
    await this.pool.query(
      `INSERT INTO fshare_secrets (name, value) VALUES ('jwt', $1) ON CONFLICT (name) DO NOTHING`,
      [randomBytes(48).toString('base64url')],
    );
    const { rows } = await this.pool.query<{ value: string }>(
      `SELECT value FROM fshare_secrets WHERE name = 'jwt'`,
    );
    return rows[0]!.value;
  }

  /**
   * The store's identity, made by the first server to ask (in the secrets table, which every
   * schema version has), the same for every server on this database.
   */
  async identity(): Promise<StoreIdentity> {
    this.live();
    const made = await this.pool.query(
      `INSERT INTO fshare_secrets (name, value) VALUES ('store_id', $1) ON CONFLICT (name) DO NOTHING`,
      [randomUUID()],
    );
    const { rows } = await this.pool.query<{ value: string }>(
      `SELECT value FROM fshare_secrets WHERE name = 'store_id'`,
    );
    return { id: rows[0]!.value, made: made.rowCount === 1 };
  }

  async unfinishedCopy(): Promise<CopyMark | null> {
    this.live();
    const { rows } = await this.pool.query<{ value: string }>(
      `SELECT value FROM fshare_secrets WHERE name = 'copy_unfinished'`,
    );
    return rows[0] ? (JSON.parse(rows[0].value) as CopyMark) : null;
  }

  async markCopy(mark: CopyMark | null): Promise<void> {
    this.live();
    if (mark)
      await this.pool.query(
        `INSERT INTO fshare_secrets (name, value) VALUES ('copy_unfinished', $1)
           ON CONFLICT (name) DO UPDATE SET value = excluded.value`,
        [JSON.stringify(mark)],
      );
    else await this.pool.query(`DELETE FROM fshare_secrets WHERE name = 'copy_unfinished'`);
  }

  async clearUnfinishedCopy(): Promise<void> {
    await this.transaction(async (client) => {
      const marked = await client.query(
        `SELECT 1 FROM fshare_secrets WHERE name = 'copy_unfinished' FOR UPDATE`,
      );
      if (marked.rowCount === 0) throw new Error('no copy to start over here');
      for (const table of [
        'fshare_links',
        'fshare_shares',
        'fshare_users',
        'fshare_former_users',
        'fshare_revoked',
      ])
        await client.query(`DELETE FROM ${table}`);
    });
  }

  /** A limiter whose counts every server on this database shares. */
  limiter(keyPrefix: string, points: number, durationSeconds: number): RateLimiterAbstract {
    this.live();
    return new SharedLimiter({
      storeClient: this.pool,
      storeType: 'pool',
      tableName: RATE_LIMIT_TABLE,
      tableCreated: true, // by the migrations
      clearExpiredByTimeout: false, // swept once per store instead (sweepRateLimits)
      keyPrefix,
      points,
      duration: durationSeconds,
    });
  }

  private async sweepRateLimits(): Promise<void> {
    if (this.closed) return;
    await this.pool
      .query(`DELETE FROM ${RATE_LIMIT_TABLE} WHERE expire < $1`, [Date.now() - 3_600_000])
      .catch(() => undefined); // the next sweep tries again
  }

  // Reads

  async getUser(name: string) {
    return this.oneUser('username', name);
  }

  async getUserById(id: string) {
    return this.oneUser('id', id);
  }

  private async oneUser(column: 'id' | 'username', value: string) {
    const rows = await this.byKey<UserRow>(
      value,
      `SELECT ${USER_COLUMNS} FROM fshare_users WHERE ${column} = $1`,
    );
    return rows[0] && userOf(rows[0]);
  }

  async userCount() {
    const rows = await this.query<{ n: number }>('SELECT count(*) AS n FROM fshare_users');
    return rows[0]!.n;
  }

  async listUsers(offset: number, limit: number) {
    const rows = await this.query<UserRow>(
      `SELECT ${USER_COLUMNS} FROM fshare_users ORDER BY seq OFFSET $1 LIMIT $2`,
      [offset, limit],
    );
    return rows.map(userOf);
  }

  async usageOf(userId: string) {
    const rows = await this.byKey<{ used: number }>(
      userId,
      'SELECT coalesce(sum(size), 0)::bigint AS used FROM fshare_shares WHERE owner_id = $1',
    );
    return rows[0]?.used ?? 0;
  }

  async getShare(id: string) {
    const rows = await this.byKey<ShareRow>(
      id.toLowerCase(),
      `${SHARE_SELECT} WHERE s.share_id = $1`,
    );
    return rows[0] && shareOf(rows[0]);
  }

  async shareCount() {
    const rows = await this.query<{ n: number }>('SELECT count(*) AS n FROM fshare_shares');
    return rows[0]!.n;
  }

  async listShares(offset: number, limit: number) {
    const rows = await this.query<ShareRow>(`${SHARE_SELECT} ORDER BY s.seq OFFSET $1 LIMIT $2`, [
      offset,
      limit,
    ]);
    return rows.map(shareOf);
  }

  /**
   * The shares that existed when the iteration began, a page at a time (keyset pagination on
   * the insertion order, so shares added or deleted meanwhile shift nothing).
   */
  async *eachShare() {
    const { last } = (
      await this.query<{ last: number | null }>('SELECT max(seq) AS last FROM fshare_shares')
    )[0]!;
    if (last === null) return;
    let after = 0;
    for (;;) {
      const rows = await this.query<ShareRow>(
        `${SHARE_SELECT} WHERE s.seq > $1 AND s.seq <= $2 ORDER BY s.seq LIMIT $3`,
        [after, last, EACH_SHARE_PAGE],
      );
      for (const row of rows) yield shareOf(row);
      if (rows.length < EACH_SHARE_PAGE) return;
      after = rows[rows.length - 1]!.seq;
    }
  }

  async getSettings(): Promise<Settings> {
    const rows = await this.query<{ settings: Settings }>(
      'SELECT settings FROM fshare_settings WHERE id',
    );
    return rows[0]?.settings ?? { default_permissions: [] };
  }

  async isRevoked(jti: string) {
    const rows = await this.byKey(jti, 'SELECT 1 FROM fshare_revoked WHERE jti = $1');
    return rows.length > 0;
  }

  async getLink(id: string) {
    const rows = await this.byKey<LinkRecord>(
      id,
      `SELECT ${LINK_COLUMNS} FROM fshare_links WHERE id = $1`,
    );
    return rows[0] && linkOf(rows[0]);
  }

  async getLinkByTokenHash(tokenSha256: string) {
    const rows = await this.byKey<LinkRecord>(
      tokenSha256,
      `SELECT ${LINK_COLUMNS} FROM fshare_links WHERE token_sha256 = $1`,
    );
    return rows[0] && linkOf(rows[0]);
  }

  async listLinks(shareId?: string) {
    const rows =
      shareId === undefined
        ? await this.query<LinkRecord>(`SELECT ${LINK_COLUMNS} FROM fshare_links ORDER BY seq`)
        : await this.byKey<LinkRecord>(
            shareId,
            `SELECT ${LINK_COLUMNS} FROM fshare_links WHERE share_id = $1 ORDER BY seq`,
          );
    return rows.map(linkOf);
  }

  async listOwnedLinks(ownerId: string) {
    const rows = await this.byKey<LinkRecord>(
      ownerId,
      `SELECT ${LINK_COLUMNS} FROM fshare_links
        WHERE share_id IN (SELECT share_id FROM fshare_shares WHERE owner_id = $1) ORDER BY seq`,
    );
    return rows.map(linkOf);
  }

  async expiredShares(now: number) {
    const rows = await this.query<ShareRow>(
      `${SHARE_SELECT} WHERE s.expires_ms <= $1 ORDER BY s.seq`,
      [now],
    );
    return rows.map(shareOf);
  }

  async nextExpiry() {
    const rows = await this.query<{ next: number | null }>(
      'SELECT min(expires_ms) AS next FROM fshare_shares',
    );
    return rows[0]!.next;
  }

  // Changes: one statement, or one transaction; PostgreSQL's constraints and row locks keep
  // the rules between servers.

  async addUser(user: UserRecord, options?: { copied?: boolean }) {
    try {
      await this.transaction(async (client) => {
        if (!options?.copied) await refuseCaseTwin(client, user.username, user.id);
        else if (await hasCaseTwin(client, user.username, user.id))
          // A pair the source kept (made before the rule): kept here too, so the index that
          // would refuse it goes, and refuseCaseTwin guards every later name, as on a database
          // that held such a pair when the index came.
          await client.query('DROP INDEX IF EXISTS fshare_users_username_lower');
        await client.query(
          `INSERT INTO fshare_users (${USER_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)`,
          [
            user.id,
            user.username,
            [...user.permissions],
            user.register_date,
            user.password_hash,
            user.token_gen,
            user.quota ?? null,
            user.legacy_tokens ?? null,
            user.kept_token?.jti ?? null,
            user.kept_token?.gen ?? null,
          ],
        );
      });
    } catch (err) {
      if (nameTaken(err)) throw new DuplicateUserError();
      if (isViolation(err, '23505', 'fshare_users_pkey')) {
        // The embedded store checks the name first.
        if (await this.getUser(user.username)) throw new DuplicateUserError();
        throw new Error('user id already in use');
      }
      throw err;
    }
  }

  async updateUser(id: string, changes: UserChanges, expect?: UserState) {
    const a = new Assignments([id]);
    // With `expect`, the row must still be as read (If-Match), checked by the write itself.
    const where = expect
      ? `id = $1 AND username = ${a.param(expect.username)} AND permissions = ${a.param([...expect.permissions])}::text[] AND quota IS NOT DISTINCT FROM ${a.param(expect.quota ?? null)}::bigint`
      : 'id = $1';
    const missing = (rows: unknown[]) =>
      expect && rows.length > 0 ? new ChangedMeanwhileError() : new MissingRecordError('user');
    if (changes.permissions !== undefined) a.set('permissions', [...changes.permissions]);
    if (changes.password_hash !== undefined) a.set('password_hash', changes.password_hash);
    // The generation that end_tokens replaces is read where it is written: two at once both count.
    if (changes.end_tokens && changes.token_gen === undefined)
      a.sets.push('token_gen = token_gen + 1');
    else if (changes.token_gen !== undefined)
      a.set('token_gen', changes.token_gen + (changes.end_tokens ? 1 : 0));
    if (changes.end_tokens && changes.keep_token) {
      // Kept only if it still speaks for the user in the row being replaced (auth.ts): a token
      // ended by a change written first stays ended.
      const jti = a.param(changes.keep_token.jti);
      const gen = a.param(changes.keep_token.gen);
      const speaks = `(token_gen = ${gen}::bigint OR (kept_jti = ${jti}::text AND kept_gen = ${gen}::bigint))`;
      a.sets.push(`kept_jti = CASE WHEN ${speaks} THEN ${jti}::text END`);
      a.sets.push(`kept_gen = CASE WHEN ${speaks} THEN ${gen}::bigint END`);
    } else if (changes.end_tokens || changes.kept_token !== undefined) {
      a.set('kept_jti', changes.kept_token?.jti ?? null);
      a.set('kept_gen', changes.kept_token?.gen ?? null);
    }
    if (changes.quota !== undefined) a.set('quota', changes.quota);
    // Right-hand sides see the row before the update: "username = new" means not renamed.
    const legacy = changes.legacy_tokens === false ? 'false' : 'legacy_tokens';
    if (changes.username !== undefined) {
      const name = a.param(changes.username);
      a.sets.push(`username = ${name}`);
      // Tokens of fshare 0.1 name their user; after a rename that name may be another's.
      a.sets.push(`legacy_tokens = CASE WHEN username = ${name} THEN ${legacy} ELSE NULL END`);
    } else if (changes.legacy_tokens !== undefined) {
      a.sets.push(`legacy_tokens = ${legacy}`);
    }
    try {
      const demoting = changes.permissions !== undefined && !changes.permissions.includes('ADMIN');
      if (demoting || changes.username !== undefined) {
        if (id.includes('\0')) throw new MissingRecordError('user'); // see byKey
        return await this.transaction(async (client) => {
          if (changes.username !== undefined) await refuseCaseTwin(client, changes.username, id);
          if (demoting) await keepAnAdmin(client, id);
          const { rows } = await client.query<{ token_gen: number }>(
            `UPDATE fshare_users SET ${a.sets.join(', ')} WHERE ${where} RETURNING token_gen`,
            a.values,
          );
          if (rows.length === 0)
            throw missing(
              (await client.query('SELECT 1 FROM fshare_users WHERE id = $1', [id])).rows,
            );
          return rows[0]!.token_gen;
        });
      }
      const rows = await this.byKey<{ token_gen: number }>(
        id,
        a.sets.length === 0
          ? `SELECT token_gen FROM fshare_users WHERE ${where}`
          : `UPDATE fshare_users SET ${a.sets.join(', ')} WHERE ${where} RETURNING token_gen`,
        a.values,
      );
      if (rows.length === 0)
        throw missing(await this.byKey(id, 'SELECT 1 FROM fshare_users WHERE id = $1'));
      return rows[0]!.token_gen;
    } catch (err) {
      if (nameTaken(err)) throw new DuplicateUserError();
      throw err;
    }
  }

  /** Removes a user, remembers their name for their shares and removes the links they made. */
  async deleteUser(id: string) {
    if (id.includes('\0')) throw new MissingRecordError('user'); // see byKey
    await this.transaction(async (client) => {
      await keepAnAdmin(client, id);
      const { rows } = await client.query<{ username: string }>(
        'DELETE FROM fshare_users WHERE id = $1 RETURNING username',
        [id],
      );
      if (rows.length === 0) throw new MissingRecordError('user');
      await client.query(
        `INSERT INTO fshare_former_users (id, username) VALUES ($1, $2)
           ON CONFLICT (id) DO UPDATE SET username = excluded.username`,
        [id, rows[0]!.username],
      );
      // The links a user made end with the user, as their tokens do.
      await client.query('DELETE FROM fshare_links WHERE created_by = $1', [id]);
    });
  }

  async addShare(share: NewShare) {
    try {
      await this.query(
        `INSERT INTO fshare_shares (share_id, file_name, owner_id, initialized, locked,
           create_date, size, sha256, sha256_absent, expires, expires_absent, expires_ms, blob,
           pending_handover)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)`,
        [
          share.share_id,
          Buffer.from(share.file_name, 'utf8'),
          share.owner_id,
          share.initialized,
          share.locked,
          share.create_date,
          share.size ?? null,
          share.sha256 ?? null,
          share.sha256 === undefined,
          share.expires ?? null,
          share.expires === undefined,
          expiryMs(share.expires),
          share.blob ?? null,
          share.pending_handover ?? null,
        ],
      );
    } catch (err) {
      if (isViolation(err, '23505', 'fshare_shares_pkey'))
        throw new Error('share id already in use');
      throw err;
    }
  }

  async updateShare(id: string, changes: ShareChanges) {
    const a = new Assignments([id]);
    if (changes.file_name !== undefined) a.set('file_name', Buffer.from(changes.file_name, 'utf8'));
    for (const column of ['owner_id', 'initialized', 'locked', 'size', 'pending_handover'] as const)
      if (changes[column] !== undefined) a.set(column, changes[column]);
    if (changes.sha256 !== undefined) {
      a.set('sha256', changes.sha256);
      a.sets.push('sha256_absent = false');
    }
    if (changes.expires !== undefined) {
      a.set('expires', changes.expires);
      a.set('expires_ms', expiryMs(changes.expires));
      a.sets.push('expires_absent = false');
    }
    if (changes.blob !== undefined) a.set('blob', changes.blob);
    try {
      await this.updateOne('fshare_shares', 'share_id', a, 'share');
    } catch (err) {
      if (changes.blob === undefined || !connectionFailed(err)) throw err;
      // The connection failed under the UPDATE that names new content: PostgreSQL may have
      // committed it, and the storage removes content whose publishing failed. Asked on the
      // pool (outside the task's lost lock connection): a share naming the blob, a new name,
      // was given it by this UPDATE, which did commit. A statement cut off on its way may still
      // reach its backend after that look (the server's side of the connection gone,
      // PostgreSQL's not yet): the backend is ended first, so nothing sent on it runs later.
      const backend = this.sessions.getStore()?.backend;
      const share = await this.sessions
        .exit(async () => {
          if (backend !== undefined) await this.endBackend(backend);
          return this.getShare(id);
        })
        .catch((): never => {
          throw new OutcomeUnknownError();
        });
      if (share?.blob !== changes.blob) throw err;
    }
  }

  /**
   * Ends a backend of ours and waits (5 s at most) until it is gone; throws if it is still
   * there. One that has ended already is gone.
   */
  private async endBackend(pid: number): Promise<void> {
    const [row] = await this.query<{ gone: boolean }>(
      `SELECT pg_terminate_backend($1, 5000)
           OR NOT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1) AS gone`,
      [pid],
    );
    if (!row?.gone) throw new Error(`PostgreSQL backend ${pid} did not end`);
  }

  /** Removes a share; its links go with it (the foreign key cascades, in the same statement). */
  async deleteShare(id: string) {
    const rows = await this.byKey(id, 'DELETE FROM fshare_shares WHERE share_id = $1 RETURNING 1');
    if (rows.length === 0) throw new MissingRecordError('share');
  }

  async setSettings(settings: Settings) {
    await this.query(
      `INSERT INTO fshare_settings (id, settings) VALUES (true, $1)
         ON CONFLICT (id) DO UPDATE SET settings = excluded.settings`,
      [JSON.stringify(settings)],
    );
  }

  /** Reads and writes the settings under one lock, so a change made meanwhile is kept. */
  async updateSettings(changes: Partial<Settings>) {
    await this.transaction(async (client) => {
      await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [SETTINGS_LOCK]);
      const { rows } = await client.query<{ settings: Settings }>(
        'SELECT settings FROM fshare_settings WHERE id',
      );
      const settings = { ...(rows[0]?.settings ?? { default_permissions: [] }), ...changes };
      await client.query(
        `INSERT INTO fshare_settings (id, settings) VALUES (true, $1)
           ON CONFLICT (id) DO UPDATE SET settings = excluded.settings`,
        [JSON.stringify(settings)],
      );
    });
  }

  /** Records a revocation and forgets those whose tokens expired; one revocation at a time. */
  async revoke(jti: string, exp: number) {
    const now = Math.floor(Date.now() / 1000);
    await this.transaction(async (client) => {
      // Serialised, as in the embedded store: two revocations never delete rows crosswise.
      await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [REVOCATION_LOCK]);
      await client.query('DELETE FROM fshare_revoked WHERE exp < $1', [now]);
      await client.query(
        `INSERT INTO fshare_revoked (jti, exp) VALUES ($1, $2)
           ON CONFLICT (jti) DO UPDATE SET exp = excluded.exp`,
        [jti, exp],
      );
    });
  }

  async addLink(link: LinkRecord) {
    try {
      // The foreign key refuses a share deleted after the check (another server's delete). The
      // maker's row is locked (FOR KEY SHARE) until the link is in: a deletion of the maker
      // (another server's) waits for it and then removes it with the maker's other links, or
      // came first and the link is refused.
      const rows = await this.query(
        `INSERT INTO fshare_links (${LINK_COLUMNS})
           SELECT $1::text, $2::text, $3::text, $4::text, $5::text, $6::text, $7::bigint,
                  $8::bigint, $9::text
            WHERE EXISTS (SELECT 1 FROM fshare_shares WHERE share_id = $2)
              AND ($4::text IS NULL
                   OR EXISTS (SELECT 1 FROM fshare_users WHERE id = $4 FOR KEY SHARE))
         RETURNING 1`,
        [
          link.id,
          link.share_id,
          link.token_sha256,
          link.created_by,
          link.create_date,
          link.expires,
          link.max_downloads,
          link.downloads,
          link.password_hash,
        ],
      );
      if (rows.length === 0) {
        const maker =
          link.created_by === null
            ? []
            : await this.byKey(link.created_by, 'SELECT 1 FROM fshare_users WHERE id = $1');
        throw new MissingRecordError(
          link.created_by !== null && maker.length === 0 ? 'user' : 'share',
        );
      }
    } catch (err) {
      if (isViolation(err, '23503')) throw new MissingRecordError('share');
      if (isViolation(err, '23505')) throw new Error('link id already in use');
      throw err;
    }
  }

  async deleteLink(id: string) {
    const rows = await this.byKey(id, 'DELETE FROM fshare_links WHERE id = $1 RETURNING 1');
    if (rows.length === 0) throw new MissingRecordError('link');
  }

  /** One statement: concurrent counts on any server wait for one another's row and recheck. */
  async countDownload(id: string) {
    const counted = await this.byKey(
      id,
      `UPDATE fshare_links SET downloads = downloads + 1
        WHERE id = $1 AND (max_downloads IS NULL OR downloads < max_downloads)
       RETURNING 1`,
    );
    if (counted.length > 0) return;
    const exists = await this.byKey(id, 'SELECT 1 FROM fshare_links WHERE id = $1');
    throw exists.length > 0 ? new LinkUsedUpError() : new MissingRecordError('link');
  }

  /**
   * Runs `task` while no task on any server holds the same key: a PostgreSQL advisory lock on a
   * 64-bit hash of the key (case-insensitive, as share ids are), held on a connection of the lock
   * pool. In this process, tasks on one key first queue on a mutex, so one connection at most
   * waits for each key. A lock taken inside a task uses that task's connection: it never waits
   * for the lock pool, which the tasks holding it may be waiting for.
   */
  async withShareLock<T>(id: string, task: () => Promise<T>): Promise<T> {
    this.live();
    const key = id.toLowerCase();
    const outer = this.sessions.getStore();
    if (outer?.join()) return this.lockedOn(outer, key, task);
    // A task waiting here or for a connection holds nothing a nested lock waits for.
    return this.connecting.run(key, async () =>
      this.lockedOn(new LockSession(await this.lockPool.connect(), this.log), key, task),
    );
  }

  /**
   * PostgreSQL hands out transaction ids in increasing order to every session: one taken on a
   * lock's connection is lower than any taken by a task that locks after the connection ended.
   * Lifted by 2^40 above the numbers an embedded-store server gave copies (counted per upload).
   */
  async fenceToken(): Promise<number> {
    const [row] = await this.query<{ t: string }>(
      `SELECT (txid_current() + ${2 ** 40})::text AS t`,
    );
    return Number(row!.t);
  }

  /** Takes the key's lock on the session (in this process, then in PostgreSQL), runs the task. */
  private async lockedOn<T>(session: LockSession, key: string, task: () => Promise<T>) {
    try {
      return await this.held.run(key, async () => {
        const pgKey = lockKey(key);
        await session.lock(pgKey);
        try {
          return await this.sessions.run(session, task);
        } finally {
          await session.unlock(pgKey);
        }
      });
    } finally {
      session.leave();
    }
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.sweeper);
    clearTimeout(this.reoccupy);
    const occupant = this.occupant;
    this.occupant = null;
    await Promise.all([
      this.pool.end(),
      this.lockPool.end(),
      occupant?.end().catch(() => undefined),
    ]);
  }

  // Plumbing

  private live(): void {
    if (this.closed) throw closedError();
  }

  /**
   * A query; inside a task holding a share lock, on the lock's own connection. That fences the
   * task: PostgreSQL releases a session's advisory lock only when the session ends (we unlock
   * after the task), so a statement that runs on it runs, and commits, while the lock is held;
   * once the connection has dropped (its backend terminated, the network cut, PostgreSQL
   * restarted) and another server may have taken the lock, no statement of the task runs any
   * more: a publish, delete or handover whose lock was lost changes no record (LockLostError).
   * No locked task uses transaction(), which keeps to the pool.
   */
  private async query<R extends QueryResultRow = QueryResultRow>(
    text: string,
    values?: unknown[],
  ): Promise<R[]> {
    this.live();
    const session = this.sessions.getStore();
    if (session?.active) return session.query<R>(text, values);
    return (await this.pool.query<R>(text, values)).rows;
  }

  /**
   * A query whose $1 is `key`. PostgreSQL's text cannot hold U+0000, so nothing stored under a
   * key has one: a key with one (from a request's URL, say) matches nothing and is not sent.
   */
  private async byKey<R extends QueryResultRow = QueryResultRow>(
    key: string,
    text: string,
    values: unknown[] = [key],
  ): Promise<R[]> {
    this.live();
    return key.includes('\0') ? [] : this.query<R>(text, values);
  }

  /** Applies the assignments to the row whose `key` is $1, or rejects if there is none. */
  private async updateOne(
    table: string,
    key: string,
    a: Assignments,
    kind: 'user' | 'share',
  ): Promise<void> {
    const id = a.values[0] as string;
    const rows =
      a.sets.length === 0
        ? await this.byKey(id, `SELECT 1 FROM ${table} WHERE ${key} = $1`)
        : await this.byKey(
            id,
            `UPDATE ${table} SET ${a.sets.join(', ')} WHERE ${key} = $1 RETURNING 1`,
            a.values,
          );
    if (rows.length === 0) throw new MissingRecordError(kind);
  }

  /** Runs `work` in a transaction on one connection: committed if it resolves, else rolled back. */
  private async transaction<T>(work: (client: PoolClient) => Promise<T>): Promise<T> {
    this.live();
    const client = await this.pool.connect();
    let broken: Error | undefined;
    const onError = (err: Error) => (broken ??= err);
    client.on('error', onError);
    try {
      await client.query('BEGIN');
      const result = await work(client);
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch((rollbackErr: Error) => (broken ??= rollbackErr));
      throw err;
    } finally {
      client.off('error', onError);
      client.release(broken);
    }
  }
}

/**
 * In a transaction: refuses (DuplicateUserError) `name` for user `id` when another user's name
 * differs from it only in case. The unique index on lower(username) refuses such a name too, but
 * a database that held such a pair when the index came has none (the migration keeps the pair);
 * found from outside: there every case twin ("ERIN" beside "erin", "Admin") was taken. The lock,
 * per lowered name and held to the end of the transaction, orders two servers making such names
 * at once.
 */
async function refuseCaseTwin(client: PoolClient, name: string, id: string): Promise<void> {
  await client.query(
    "SELECT pg_advisory_xact_lock(hashtext('fshare_users'), hashtext(lower($1)))",
    [name],
  );
  // The user's own name, unchanged (a PUT names it; a pair made before the rule has a twin):
  // no rename, nothing to refuse, as in the embedded store.
  const { rows } = await client.query(
    'SELECT 1 FROM fshare_users WHERE id = $1 AND username = $2',
    [id, name],
  );
  if (rows.length > 0) return;
  if (await hasCaseTwin(client, name, id)) throw new DuplicateUserError();
}

/** Whether a user other than `id` has `name` in some case. */
async function hasCaseTwin(client: PoolClient, name: string, id: string): Promise<boolean> {
  const { rows } = await client.query(
    'SELECT 1 FROM fshare_users WHERE lower(username) = lower($1) AND id <> $2 LIMIT 1',
    [name, id],
  );
  return rows.length > 0;
}

/**
 * In a transaction: refuses (LastAdminError) a change that would take ADMIN from user `id` when
 * no other user has it. The lock, held to the end of the transaction, orders such changes across
 * servers, so two of them racing cannot each leave the other's administrator as the last one.
 */
async function keepAnAdmin(client: PoolClient, id: string): Promise<void> {
  await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [ADMIN_LOCK]);
  const { rows } = await client.query<{ last: boolean | null }>(
    `SELECT bool_or(id = $1) AND NOT bool_or(id <> $1) AS last
       FROM fshare_users WHERE 'ADMIN' = ANY(permissions)`,
    [id],
  );
  if (rows[0]?.last) throw new LastAdminError();
}

/**
 * Applies the migrations this database lacks, each in its own transaction. Every transaction
 * first takes one advisory lock, so servers starting together apply each migration once.
 */
async function migrate(client: Client, log: (line: string) => void): Promise<void> {
  const inTransaction = async <T>(work: () => Promise<T>): Promise<T> => {
    await client.query('BEGIN');
    try {
      await client.query('SELECT pg_advisory_xact_lock($1::bigint)', [MIGRATION_LOCK]);
      const result = await work();
      await client.query('COMMIT');
      return result;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    }
  };
  const applied = async () =>
    (await client.query<{ version: number }>('SELECT version FROM fshare_migrations')).rows.map(
      (r) => r.version,
    );
  const done = await inTransaction(async () => {
    await client.query(
      `CREATE TABLE IF NOT EXISTS fshare_migrations (
         version integer PRIMARY KEY,
         applied_at timestamptz NOT NULL DEFAULT now()
       )`,
    );
    return applied();
  });
  const newest = Math.max(0, ...done);
  if (newest > MIGRATIONS.length)
    throw new Error(
      `the database has schema version ${newest}, newer than this fshare knows ` +
        `(${MIGRATIONS.length}): upgrade fshare`,
    );
  for (let version = 1; version <= MIGRATIONS.length; version++) {
    if (done.includes(version)) continue;
    await inTransaction(async () => {
      // Another server may have applied it while this one waited for the lock.
      if ((await applied()).includes(version)) return;
      await client.query(MIGRATIONS[version - 1]!);
      await client.query('INSERT INTO fshare_migrations (version) VALUES ($1)', [version]);
      log(`metadata: applied PostgreSQL schema migration ${version}`);
    });
  }
}
