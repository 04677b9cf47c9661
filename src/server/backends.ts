import { join } from 'node:path';
import type { HashWorker } from '../shared/hasher.js';
import type { Limits } from './limits.js';
import type { ServerOptions } from './options.js';
import { FileStorage } from './storage/files.js';
import type { ContentStorage } from './storage/index.js';
import { blobOf, type MetadataStore } from './store/index.js';
import { LowdbStore } from './store/lowdb.js';
import type { PostgresStore } from './store/postgres.js';
import { makeDirs } from '../shared/mkdirs.js';

/**
 * Where a server keeps its data: metadata in lowdb (the data directory) or PostgreSQL, content
 * in files (the data directory) or S3. Each is chosen on its own; routes see only the
 * MetadataStore and ContentStorage interfaces. The PostgreSQL and S3 modules are loaded only
 * when asked for, so the embedded server never loads their drivers.
 */

/**
 * The metadata store the options name: lowdb in the data directory, or PostgreSQL. `occupy`:
 * who opens a PostgreSQL store, held against the other (a server against a copy, a copy against
 * servers; PostgresStore.open). The data directory's lock does the same for lowdb.
 */
export async function openStore(
  options: ServerOptions,
  dataDir: string,
  log: (line: string) => void,
  occupy?: 'serve' | 'copy',
): Promise<{ store: MetadataStore; shared?: PostgresStore }> {
  if (!options.database)
    return { store: await LowdbStore.open(dataDir, { repair: options.repair, log }) };
  // Loaded only when asked for: the embedded server never loads the driver.
  const { PostgresStore } = await import('./store/postgres.js');
  const store = await PostgresStore.open(options.database, { log, occupy });
  return { store, shared: store };
}

/** The metadata store the options name, for messages. */
export function storeName(options: Pick<ServerOptions, 'database'>, dataDir: string): string {
  return options.database ? 'the PostgreSQL database' : join(dataDir, 'db.json');
}

/** The content storage the options name: files in the data directory, or an S3 bucket. */
export async function openStorage(
  options: ServerOptions,
  dataDir: string,
  store: MetadataStore,
  hasher: HashWorker,
  limits: Pick<Limits, 'minFreeBytes' | 'removedContentKeepMs'>,
  log: (line: string) => void,
): Promise<ContentStorage> {
  if (!options.storage)
    return new FileStorage(dataDir, { hasher, minFreeBytes: limits.minFreeBytes, log });
  const { S3Storage } = await import('./storage/s3.js');
  const tempDir = join(dataDir, 'incoming');
  await makeDirs(tempDir);
  return S3Storage.open({
    url: options.storage,
    endpoint: options.s3Endpoint,
    forcePathStyle: options.s3ForcePathStyle,
    tempDir,
    hasher,
    minFreeBytes: limits.minFreeBytes,
    // Across servers when the store is shared: PostgreSQL's advisory locks.
    lock: (key, task) => store.withShareLock(key, task),
    // Inside a locked task, PostgreSQL's queries run on the lock's own connection, and fail
    // (LockLostError) once it has dropped with the lock: reading the share's record asks there.
    checkLock: async (shareId) => void (await store.getShare(shareId)),
    fence: store.fenceToken?.bind(store),
    published: async (shareId, blob) => {
      const share = await store.getShare(shareId);
      return !!share && share.initialized && blobOf(share) === blob;
    },
    removedContentKeepMs: limits.removedContentKeepMs,
    log,
  });
}
