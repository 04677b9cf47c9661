import type { StoreIdentity } from '../store/index.js';

/**
 * Which metadata store a content storage belongs to.
 *
 * A start removes the stored content that no share names: what a crash left between storing
 * content and recording it, or between removing a record and its content. Against a store that
 * lost its records (db.json emptied or deleted, a new database) or against another deployment's
 * store, that is every file. So the storage records the id of its store (`content-owner`), and a
 * start that would remove content stops instead when its store is not the recorded one.
 */
export interface Owner {
  identity: StoreIdentity;
  /** How many shares the store holds. */
  shares: number;
  /** The store, for messages: a db.json path, or the database. */
  name: string;
  /**
   * No server can be storing content here meanwhile (a copy into a store that holds no share,
   * or holds part of a copy, on which no server starts): what no share names goes whatever its
   * age, with no grace for another server's publish in progress.
   */
  alone?: boolean;
}

/** Where a storage keeps its mark, and how it names itself in messages. */
export interface OwnerMark {
  read(): Promise<string | null>;
  write(id: string): Promise<void>;
  /** The content, for messages: a directory or an S3 prefix. */
  content: string;
  /** The mark, for messages. */
  mark: string;
  /** How to start afresh without that content. */
  afresh: string;
  /**
   * What a start does with `files` that no share names, as a verb phrase ("remove those
   * files"): a data directory sets them aside, S3 removes them.
   */
  unnamed(files: string): string;
}

/** A UUID as fshare makes them: share ids (randomUUID, or an Idempotency-Key's) and store ids. */
const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const CONTENT_NAME = new RegExp(`^${UUID}(\\.[0-9a-f-]{1,64})?$`);
const UPLOAD_NAME = new RegExp(`^${UUID}\\.[0-9a-f]{40}$`);
const ID = new RegExp(`^${UUID}$`);

/**
 * Whether a name in the content storage is one fshare gives content: `<share id>` (fshare 0.1)
 * or `<share id>.<hex or uuid>`. Anything else there (a `lost+found` of a volume mounted on
 * content/, a file an operator put there) is not fshare's to remove, nor to count.
 */
export function isContentName(name: string): boolean {
  return CONTENT_NAME.test(name);
}

/**
 * Whether `<share id>.<upload key>` (a folder in uploads/, or the two parts of an S3 upload's
 * prefix joined by a dot) names an upload as fshare names them: the key is 40 hex digits of the
 * sha256 of its dzuuid.
 */
export function isUploadName(name: string): boolean {
  return UPLOAD_NAME.test(name);
}

/** A start refused, so that content it cannot account for is kept. */
export class ForeignContentError extends Error {
  override readonly name = 'ForeignContentError';
  constructor(
    message: string,
    /** The content, as OwnerMark names it, and how many of its files no share names. */
    readonly content: string,
    readonly unnamed: number,
  ) {
    super(message);
  }
}

/**
 * Whether the content that no share names (`unnamed` items of any age) may be removed now: true,
 * or false to keep it this time (the store's id is not durable yet). Throws ForeignContentError
 * when the content may belong to records this store does not have. Records the owner when the
 * storage holds nothing at stake, or adopts content stored before marks existed.
 */
export async function mayRemoveUnnamed(
  mark: OwnerMark,
  owner: Owner | undefined,
  unnamed: number,
): Promise<boolean> {
  if (!owner) return true;
  const { id, made } = owner.identity;
  if (id === null) return false;
  // A mark that is not an id (damaged) names no store: as if there were none.
  const text = await mark.read();
  const recorded = text !== null && ID.test(text) ? text : null;
  if (recorded === id) return true;
  // A mark that cannot be written (a full disk: a server still starts there, for downloads and
  // removals) keeps the content as it is; the next start writes it.
  const marked = () =>
    mark.write(id).then(
      () => true,
      () => false,
    );
  if (unnamed === 0) {
    await marked();
    return true;
  }
  const files = `${unnamed} stored file${unnamed === 1 ? '' : 's'}`;
  if (owner.shares === 0)
    throw new ForeignContentError(
      `${mark.content} holds ${files} that no share names, and ${owner.name} holds no share ` +
        `at all: its records are gone (emptied, deleted or replaced), or it is not the store ` +
        `that content belongs to. Starting would ${mark.unnamed('those files')}. Restore the metadata ` +
        `from a backup, or point fshare at the store they belong to; to start afresh without ` +
        `them, ${mark.afresh}.`,
      mark.content,
      unnamed,
    );
  // Content stored before marks existed, or a store restored from before store ids.
  if (recorded === null || made) return marked();
  throw new ForeignContentError(
    `${mark.content} belongs to another metadata store (${mark.mark} names ${recorded}; ` +
      `${owner.name} is ${id}) and holds ${files} that no share of this one names. Starting ` +
      `would ${mark.unnamed('them')}. Point fshare at the store they belong to; to give the content ` +
      `to this store anyway, remove ${mark.mark} (the next start would then ` +
      `${mark.unnamed('its files that no share names')}).`,
    mark.content,
    unnamed,
  );
}
