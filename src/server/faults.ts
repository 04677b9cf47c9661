/**
 * Fault injection for the crash tests: `FSHARE_FAULT=<point>[:<n>]` kills the process with
 * SIGKILL the n-th time (default the first) execution reaches `point`, after running the
 * optional `partial` step (a half-done write, say). Unset, every call is a no-op.
 *
 * Points: journal.mid-write, journal.before-fsync, compact.after-rename, delete.after-record (a
 * share's removal recorded, before its bytes and uploads go), chunk.mid-body,
 * chunk.before-record, chunk.after-record, complete.after-link, complete.after-publish,
 * complete.after-tombstone, link.after-count (a share-link download counted durably, before any
 * header of its answer), handover.after-record (a share's new owner recorded with its mark,
 * before the old owner's unfinished uploads are ended: handover.ts); with S3 storage,
 * s3.before-publish (content assembled under a new name and its publishing record written) and
 * s3.after-publish (recorded in the metadata, before the upload's tombstone and clean-up);
 * start.probe-linked (the start's probe of hard links made and linked into content/, before
 * both are removed: storage/files.ts, checkOneFileSystem).
 */
const spec = /^([a-z0-9.-]+)(?::(\d+))?$/.exec(process.env.FSHARE_FAULT ?? '');
const armed = spec?.[1];
let remaining = spec ? Number(spec[2] ?? 1) : 0;

export async function fault(point: string, partial?: () => Promise<unknown>): Promise<void> {
  if (point !== armed || --remaining > 0) return;
  if (partial) await partial().catch(() => undefined);
  process.kill(process.pid, 'SIGKILL');
  // SIGKILL is not delivered synchronously on every platform: never run past the point.
  await new Promise(() => undefined);
}

/**
 * Points where a test holds a task to act meanwhile (end a database connection, send a rival
 * request): `holdAt(point, hold)` runs `hold` the next time execution reaches `point`, which goes
 * on once it resolves; it returns a function that takes the hold back. In a server process,
 * `FSHARE_PAUSE=<point>` holds there once, says `fault: paused at <point>` on stderr and goes on
 * at SIGUSR2. Without a hold, every call is a no-op.
 *
 * Points: publish.before-record (new content checked under its share's lock, before the share's
 * record names it); digest.start (a start's walk over the shares for content without a sha256,
 * before its first query: index.ts, digestOldContent), digest.share (that walk, at a share to
 * hash); link.before-count (a share-link download about to be counted, its first
 * bytes in hand); with S3 storage, s3.before-stage (a chunk checked under its upload's lock,
 * before it is staged), s3.before-put and s3.after-put (its copies' token taken: before the PUTs
 * of the chunk's copy and meta's, and after they landed, before the lock is asked for again),
 * s3.before-publish (new content assembled and its publishing record written, before the
 * share's lock is taken to publish it), s3.before-end (an upload to be ended, found idle by
 * the sweep or removed, under its lock, before its tombstone is written), s3.before-tombstone-put
 * and s3.after-tombstone-put (an upload's tombstone's token taken: before its PUT, and after it
 * landed, before the lock is asked for again).
 */
const holds = new Map<string, () => Promise<void>>();

export function holdAt(point: string, hold: () => Promise<void>): () => void {
  holds.set(point, hold);
  return () => {
    if (holds.get(point) === hold) holds.delete(point);
  };
}

export async function pausePoint(point: string): Promise<void> {
  const hold = holds.get(point);
  if (!hold) return;
  holds.delete(point);
  await hold();
}

const pauseAt = process.env.FSHARE_PAUSE;
if (pauseAt)
  holdAt(
    pauseAt,
    () =>
      new Promise((resume) => {
        process.once('SIGUSR2', () => resume());
        process.stderr.write(`fault: paused at ${pauseAt}\n`);
      }),
  );
