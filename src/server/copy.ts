import { randomUUID } from 'node:crypto';
import { Readable } from 'node:stream';
import { HashWorker } from '../shared/hasher.js';
import { openStorage, openStore, storeName } from './backends.js';
import { prepareDataDir } from './datadir.js';
import type { ServerOptions } from './options.js';
import {
  ChunkRefusedError,
  type ChunkFields,
  type ContentStorage,
  type NewContent,
} from './storage/index.js';
import { ForeignContentError } from './storage/owner.js';
import { systemErrorText } from '../shared/syserr.js';
import {
  blobOf,
  unfinishedCopyText,
  type CopyMark,
  type MetadataStore,
  type ShareRecord,
} from './store/index.js';

/** Where a server's data is: the data directory, and PostgreSQL and S3 when given. */
export type Backend = Pick<
  ServerOptions,
  'dataDir' | 'database' | 'storage' | 's3Endpoint' | 's3ForcePathStyle'
>;

export interface CopyReport {
  users: number;
  shares: number;
  links: number;
  /** Bytes of content copied (and read back and checked). */
  bytes: number;
}

/** The copy cannot be made, or went wrong; the message names what and why. */
export class CopyError extends Error {}

interface Opened {
  store: MetadataStore;
  storage: ContentStorage;
  hasher: HashWorker;
}

async function open(backend: Backend, log: (line: string) => void): Promise<Opened> {
  await prepareDataDir(backend.dataDir);
  const options: ServerOptions = { ...backend };
  const { store } = await openStore(options, backend.dataDir, log, 'copy');
  const hasher = new HashWorker();
  try {
    // No reserve: a copy is run by an administrator, with the servers stopped.
    const storage = await openStorage(
      options,
      backend.dataDir,
      store,
      hasher,
      { minFreeBytes: 0, removedContentKeepMs: 0 },
      log,
    );
    return { store, storage, hasher };
  } catch (err) {
    await hasher.close();
    await store.close();
    throw err;
  }
}

async function close(o: Opened | undefined): Promise<void> {
  if (!o) return;
  await o.storage.close();
  await o.hasher.close();
  await o.store.close();
}

/**
 * Copies one share's content into `to`, verified: the target storage computes the sha256 as the
 * bytes arrive and refuses them unless it is the source's (the chunk protocol's dzsha256).
 */
async function copyContent(from: Opened, to: Opened, share: ShareRecord): Promise<NewContent> {
  const reader = await from.storage.open(blobOf(share));
  if (!reader) throw new CopyError(`The content of share ${share.share_id} is missing`);
  const body = reader.size === 0 ? Readable.from([]) : reader.stream(0, reader.size - 1);
  if (reader.size === 0) await reader.close();
  const fields: ChunkFields = {
    uploadId: `copy-${randomUUID()}`,
    index: 0,
    total: 1,
    ...(share.sha256 ? { sha256: share.sha256 } : {}),
  };
  const received = await to.storage.receive(share.share_id, fields, body, Number.MAX_SAFE_INTEGER);
  let content: NewContent | undefined;
  try {
    await to.storage.commit(share.share_id, fields, received, async (c) => {
      content = c;
      return undefined;
    });
  } catch (err) {
    // The target hashed the bytes read from the source: they are not what the source recorded.
    if (err instanceof ChunkRefusedError && err.reason === 'digest')
      throw new CopyError(
        `The content of share ${share.share_id} (${share.file_name}) did not copy whole: the source reads back with another sha256 than the ${share.sha256} it recorded, so it is damaged there; restore it from a backup, or delete the share on the source`,
      );
    throw new CopyError(
      `The content of share ${share.share_id} (${share.file_name}) did not copy whole: ${(err as Error).message}`,
    );
  } finally {
    await to.storage.discard(received);
  }
  if (!content) throw new CopyError(`The content of share ${share.share_id} was not stored`);
  return content;
}

/**
 * Copies a server's whole data (settings, users, shares with their content, links) from one
 * backend to another, e.g. from a data directory to PostgreSQL and S3 (`fshare admin import`)
 * and back (`fshare admin export`). Every share's content is checked by sha256 twice: as it is
 * written, and read back from the target at the end. The target must be empty; the source's
 * content is only read. Every user's token generation is advanced, so tokens issued before the copy
 * (and any revoked among them) are not accepted by the target: users sign in again.
 */
export async function copyServerData(
  source: Backend,
  target: Backend,
  progress: (line: string) => void = () => undefined,
  label: Pick<CopyMark, 'by' | 'from'> = {
    by: 'a copy',
    from: storeName(source, source.dataDir),
  },
): Promise<CopyReport> {
  let from: Opened | undefined;
  let to: Opened | undefined;
  const report: CopyReport = { users: 0, shares: 0, links: 0, bytes: 0 };
  const targetName = storeName(target, target.dataDir);
  // Set once the target may hold part of this copy: from then on, a failure leaves it marked.
  let marked = false;
  try {
    from = await open(source, progress);
    // Part of a copy is no server's data: copied on, it would pass for the whole.
    const sourceMark = await from.store.unfinishedCopy();
    if (sourceMark)
      throw new CopyError(
        `${unfinishedCopyText(storeName(source, source.dataDir), sourceMark)}: run that command again to finish it before copying from it`,
      );
    to = await open(target, progress);
    const leftover = await to.store.unfinishedCopy();
    if (leftover) {
      // What a copy that failed or was killed wrote: this copy starts it over.
      marked = true;
      progress(
        `${unfinishedCopyText(targetName, leftover)}: removing it and starting the copy over`,
      );
      await to.store.clearUnfinishedCopy();
    } else if ((await to.store.userCount()) > 0 || (await to.store.shareCount()) > 0)
      throw new CopyError(
        'The target already holds users or shares; copy into a new database, bucket prefix or directory',
      );
    // Content already there belongs to no share of the new store: the copy stops, keeping it.
    await to.storage
      .init(() => false, {
        identity: await to.store.identity(),
        shares: 0,
        name: storeName(target, target.dataDir),
        // No server runs on a store without shares (its start makes a user) or on part of a
        // copy: what an unfinished copy stored goes now, not an hour later.
        alone: true,
      })
      .catch((err: unknown) => {
        if (!(err instanceof ForeignContentError)) throw err;
        throw new CopyError(
          `${err.content} already holds ${err.unnamed} stored file${err.unnamed === 1 ? '' : 's'}, which the copy would remove; copy into a new bucket prefix or directory`,
        );
      });

    // Before anything is copied: until the mark ends, with the last step, no server starts on
    // the target (a copy cut short would pass for the whole).
    await to.store.markCopy({ ...label, started: new Date().toISOString() });
    marked = true;

    await to.store.setSettings(await from.store.getSettings());
    const page = 500;
    for (let offset = 0; ; offset += page) {
      const users = await from.store.listUsers(offset, page);
      for (const user of users) {
        // A new generation (and no token kept from the old one): no token of the source works.
        await to.store.addUser(
          { ...user, token_gen: user.token_gen + 1, kept_token: null },
          // Names that differ only in case stay as the source kept them.
          { copied: true },
        );
        report.users++;
      }
      if (users.length < page) break;
    }

    const copied: { id: string; sha256: string }[] = [];
    for await (const share of from.store.eachShare()) {
      // Unfinished uploads are not copied: a handover's pending end of them has nothing to end.
      const { owner_name: _name, pending_handover: _pending, ...record } = share;
      if (share.initialized) {
        const content = await copyContent(from, to, share);
        if (share.sha256 && content.sha256 !== share.sha256)
          throw new CopyError(`The content of share ${share.share_id} changed while it was copied`);
        await to.store.addShare({
          ...record,
          blob: content.blob,
          size: content.size,
          sha256: content.sha256,
        });
        copied.push({ id: share.share_id, sha256: content.sha256 });
        report.bytes += content.size;
      } else {
        const { blob: _blob, ...empty } = record;
        await to.store.addShare(empty);
      }
      report.shares++;
      if (report.shares % 100 === 0) progress(`${report.shares} shares copied`);
    }

    for (const link of await from.store.listLinks()) {
      if (!(await to.store.getShare(link.share_id))) continue;
      await to.store.addLink(link);
      report.links++;
    }

    // Read back from the target: what a server on it will serve.
    progress('Reading the copied content back to check it');
    for (const { id, sha256 } of copied) {
      const share = await to.store.getShare(id);
      const actual = share ? await to.storage.digest(blobOf(share)) : '';
      if (actual !== sha256)
        throw new CopyError(`Share ${id}: the copy reads back with another sha256 than the source`);
    }
    await to.store.markCopy(null);
    return report;
  } catch (err) {
    if (!marked) throw err;
    const why = systemErrorText(err) ?? (err instanceof Error ? err.message : String(err));
    throw new CopyError(
      `${why.replace(/[.\s]+$/, '')}; the copy did not finish, and ${targetName} is marked so: no server starts on it until the same command, run again, has copied everything over`,
      { cause: err },
    );
  } finally {
    await close(to).catch(() => undefined);
    await close(from).catch(() => undefined);
  }
}
