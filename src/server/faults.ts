/**
 * Fault injection for the crash tests: `FSHARE_FAULT=<point>[:<n>]` kills the process with
 * SIGKILL the n-th time (default the first) execution reaches `point`, after running the
 * optional `partial` step (a half-done write, say). Unset, every call is a no-op.
 *
 * Points: journal.mid-write, journal.before-fsync, compact.after-rename, chunk.mid-body,
 * chunk.before-record, chunk.after-record, complete.after-link, complete.after-publish,
 * complete.after-tombstone, link.after-count (a share-link download counted durably, before any
 * header of its answer); with S3 storage, s3.before-publish (content assembled under a new name
 * and its publishing record written) and s3.after-publish (recorded in the metadata, before the
 * upload's tombstone and clean-up).
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
