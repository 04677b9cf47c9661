import { randomInt } from 'node:crypto';
import { Client, type ClientConfig, type QueryConfig } from 'pg';

/** Statements each connection sends while the lock is held: a pooler shows itself in the first. */
const ROUNDS = 3;
/** A probe statement that gets no answer in this time fails the start (a pool with no room). */
const PROBE_TIMEOUT_MS = 60_000;

/** Why a start is refused (after "PostgreSQL at HOST:PORT: "), and the way out. */
const SESSIONS_NOT_KEPT =
  'its connections do not keep a session of their own (a connection pooler in transaction or ' +
  'statement mode, such as pgbouncer with pool_mode = transaction): fshare holds its share ' +
  'locks in sessions, so every server could take the same lock; use session pooling ' +
  '(pgbouncer: pool_mode = session) or connect to PostgreSQL directly';

/**
 * Refuses a database whose connections do not each keep one session: share locks are session
 * advisory locks, held on a connection for a task's length, and the task's statements run on that
 * connection (store/postgres.ts, LockSession). Behind a pooler in transaction or statement mode,
 * each statement goes to whichever backend is free: a lock stays on a backend other clients use
 * (their statements then hold it too), its task's statements and its unlock run elsewhere.
 *
 * `held` (connected) takes an advisory lock on a fresh key; then, in turns, a second connection
 * and `held` each ask, in a statement of their own, whether the session they reach holds that
 * lock and which backend it is. With a session per connection the answers never change: `held`'s
 * session holds the lock, the other's does not, each on its own backend. A pooler that hands the
 * freed backend to the next statement (pgbouncer's default) gives the second connection the
 * lock's session at once; one that hands out backends in turn moves `held` off its session.
 * Nothing is left behind: no statement but the lock's own takes a lock, and the key is unlocked
 * only where it is known to be held (a refused start leaves at most that one fresh key held on a
 * pooled backend, which no one else uses).
 */
export async function requireSessions(held: Client, config: ClientConfig): Promise<void> {
  // Two int4 halves: pg_locks shows them as classid and objid (objsubid 2), no sign to convert.
  const key = [randomInt(2 ** 31 - 1), randomInt(2 ** 31 - 1)];
  const probe = async (client: Client) =>
    (
      await client.query<{ pid: number; held: boolean }>({
        text: `SELECT pg_backend_pid() AS pid, EXISTS (
                 SELECT 1 FROM pg_locks
                  WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
                    AND classid = $1::int4::oid AND objid = $2::int4::oid AND objsubid = 2
               ) AS held`,
        values: key,
        // pg reads it from a query's config too; QueryConfig's type does not list it.
        query_timeout: PROBE_TIMEOUT_MS,
      } as QueryConfig)
    ).rows[0]!;
  const other = new Client({ ...config, connectionTimeoutMillis: PROBE_TIMEOUT_MS });
  other.on('error', () => undefined);
  try {
    await other.connect();
    await held.query('SELECT pg_advisory_lock($1::int4, $2::int4)', key);
    const first = await probe(held);
    let kept = first.held;
    let otherPid: number | undefined;
    for (let round = 0; kept && round < ROUNDS; round++) {
      const seen = await probe(other);
      otherPid ??= seen.pid;
      const again = await probe(held);
      kept =
        !seen.held &&
        seen.pid === otherPid &&
        seen.pid !== first.pid &&
        again.held &&
        again.pid === first.pid;
    }
    if (!kept) throw new Error(SESSIONS_NOT_KEPT);
    await held.query('SELECT pg_advisory_unlock($1::int4, $2::int4)', key);
  } catch (err) {
    // pg's own words for a probe left waiting (a pooler whose pool is used up, say).
    if (err instanceof Error && /^(Query read timeout|timeout expired)$/.test(err.message))
      throw new Error(
        `no answer within ${PROBE_TIMEOUT_MS / 1000} s to a second connection while checking ` +
          `that connections keep their sessions (each fshare server needs up to 20 at once: ` +
          `a pooler's pool too small?)`,
      );
    throw err;
  } finally {
    await other.end().catch(() => undefined);
  }
}
