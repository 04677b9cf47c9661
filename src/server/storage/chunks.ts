import { ChunkRefusedError, type ChunkFields, type Layout } from './index.js';

/**
 * The fields every chunk of one upload must agree on, whatever stores it: the same total, the
 * same placed layout, and an offset where that layout puts the chunk. Refused as 'invalid'.
 */
export function checkChunkFields(
  meta: { total: number; layout: Layout | null },
  fields: ChunkFields,
): void {
  if (fields.total !== meta.total)
    throw new ChunkRefusedError(
      'invalid',
      `dztotalchunks is ${fields.total} but earlier chunks of this upload said ${meta.total}`,
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
