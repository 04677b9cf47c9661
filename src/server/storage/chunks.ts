import { ChunkRefusedError, type ChunkFields, type Layout } from './index.js';

/**
 * The fields every chunk of one upload must agree on, whatever stores it: the same total, the
 * same placed layout, and an offset where that layout puts the chunk. Refused as 'invalid'.
 */
export function checkChunkFields(
  meta: { total: number; layout: Layout | null; size?: number; chunkSize?: number },
  fields: ChunkFields,
): void {
  if (fields.total !== meta.total)
    throw new ChunkRefusedError(
      'invalid',
      `dztotalchunks is ${fields.total} but earlier chunks of this upload said ${meta.total}`,
    );
  // A dztotalfilesize sent without dzchunksize still says what the whole upload holds.
  const declared = meta.layout?.fileSize ?? meta.size;
  if (fields.fileSize !== undefined && declared !== undefined && fields.fileSize !== declared)
    throw new ChunkRefusedError(
      'invalid',
      `dztotalfilesize is ${fields.fileSize} but earlier chunks of this upload said ${declared}`,
    );
  const chunkSize = meta.layout?.chunkSize ?? meta.chunkSize;
  if (fields.chunkSize !== undefined && chunkSize !== undefined && fields.chunkSize !== chunkSize)
    throw new ChunkRefusedError(
      'invalid',
      `dzchunksize is ${fields.chunkSize} but earlier chunks of this upload said ${chunkSize}`,
    );
  if (meta.layout && fields.layout) {
    if (
      fields.layout.chunkSize !== meta.layout.chunkSize ||
      fields.layout.fileSize !== meta.layout.fileSize
    )
      throw new ChunkRefusedError(
        'invalid',
        'dzchunksize and dztotalfilesize differ from those earlier chunks of this upload sent',
      );
  }
  if (meta.layout && fields.offset !== undefined) {
    const expected = fields.index * meta.layout.chunkSize;
    if (fields.offset !== expected)
      throw new ChunkRefusedError(
        'invalid',
        `Chunk ${fields.index} starts at byte ${expected}, not ${fields.offset} (dzchunkbyteoffset)`,
      );
  }
}

/**
 * Joined mode (no layout): where a chunk starts, checked against its declared dzchunkbyteoffset.
 * `sizeOf(i)` is the size of committed chunk i, undefined when it is not there. Returns the start
 * when it is known (declared, or every chunk before is in), else undefined.
 */
export function joinedStart(
  fields: ChunkFields,
  sizeOf: (index: number) => number | undefined,
): number | undefined {
  const { index } = fields;
  let before = 0;
  for (let i = 0; i < index; i++) {
    const size = sizeOf(i);
    if (size === undefined) {
      before = -1;
      break;
    }
    before += size;
  }
  if (fields.offset !== undefined && before >= 0 && fields.offset !== before)
    throw new ChunkRefusedError(
      'invalid',
      index === 0
        ? `Chunk 0 starts at byte ${fields.offset}, but the file starts at byte 0`
        : `Chunk ${index} starts at byte ${fields.offset}, but ${index === 1 ? 'chunk 0 ends' : `chunks 0-${index - 1} end`} at byte ${before}`,
    );
  return fields.offset ?? (before >= 0 ? before : undefined);
}

/** Joined mode: a chunk of `bytes` from `start` must end where the next chunk declared it starts. */
export function checkJoinedEnd(
  index: number,
  start: number,
  bytes: number,
  nextOffset: number | undefined,
): void {
  if (nextOffset !== undefined && start + bytes !== nextOffset)
    throw new ChunkRefusedError(
      'invalid',
      `Chunk ${index} ends at byte ${start + bytes}, but chunk ${index + 1} starts at byte ${nextOffset}`,
    );
}

/**
 * Joined mode: a chunk's length against the sizes it or an earlier chunk of its upload declared
 * (dzchunksize, dztotalfilesize: `declared`), with `others` the bytes of the upload's other
 * committed chunks. Found from outside: these fields sent without the rest of the layout were
 * ignored, and an upload declared as 500 bytes published 200.
 */
export function checkDeclaredLength(
  fields: ChunkFields,
  bytes: number,
  others: number,
  declared: { size?: number; chunkSize?: number },
): void {
  const { index, total } = fields;
  const chunkSize = fields.chunkSize ?? declared.chunkSize;
  const last = index === total - 1;
  if (chunkSize !== undefined && (last ? bytes > chunkSize : bytes !== chunkSize))
    throw new ChunkRefusedError(
      'invalid',
      last
        ? `The last chunk has ${bytes} bytes, more than dzchunksize (${chunkSize})`
        : `Chunk ${index} has ${bytes} bytes, but dzchunksize says every chunk but the last has ${chunkSize}`,
    );
  const size = fields.fileSize ?? declared.size;
  if (size !== undefined && others + bytes > size)
    throw new ChunkRefusedError(
      'invalid',
      `The chunks of this upload would hold ${others + bytes} bytes, more than dztotalfilesize (${size})`,
    );
}

/**
 * Completion in joined mode: the whole upload against the size it declared. Like a dzsha256
 * that does not match, the upload can never complete: the storage discards it first.
 */
export function declaredSizeError(size: number, declared: number | undefined): Error | null {
  if (declared === undefined || size === declared) return null;
  return new ChunkRefusedError(
    'digest',
    `The uploaded chunks hold ${size} bytes, not the ${declared} that dztotalfilesize announced; the upload was discarded`,
  );
}
