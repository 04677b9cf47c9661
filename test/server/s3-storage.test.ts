// S3Storage against a real s3rver: two instances on one bucket stand in for two servers (one
// shared lock, as PostgreSQL's advisory locks would be). Properties guarded: the content made
// from chunks committed through either instance, in any order, re-sent or racing, is whole and
// has the right sha256; multipart uploads obey S3's part rules (which s3rver does not enforce);
// refused, digest-failed, unpublished, swept and removed uploads leave nothing behind and refuse
// their late chunks; the upload state is the same seen from either instance.
import { createHash, randomBytes, randomUUID } from 'node:crypto';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import {
  CreateMultipartUploadCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
} from '@aws-sdk/client-s3';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { KeyedMutex } from '../../src/server/mutex.js';
import {
  ChunkRefusedError,
  type ChunkFields,
  type NewContent,
} from '../../src/server/storage/index.js';
import { MAX_PART, MAX_PARTS, MIN_PART, planParts } from '../../src/server/storage/s3-parts.js';
import { parseS3Url, S3Storage } from '../../src/server/storage/s3.js';
import { HashWorker } from '../../src/shared/hasher.js';
import { createBucket, S3_TEST_ENV, startS3, type S3Server } from '../helpers/s3.js';

Object.assign(process.env, S3_TEST_ENV);

const MiB = 1024 * 1024;
const sha = (data: Buffer) => createHash('sha256').update(data).digest('hex');

/** UploadPart requests s3rver saw: their S3 UploadId, part number and Content-Length. */
interface PartSeen {
  uploadId: string;
  part: number;
  length: number;
}

let s3: S3Server;
let bucketUrl: string;
let raw: S3Client;
const parts: PartSeen[] = [];
const hasher = new HashWorker();
const cleanup: (() => Promise<void>)[] = [];
/** How far the storages' clock is ahead of the real one (S3's clock cannot be moved). */
let timeShift = 0;

beforeAll(async () => {
  s3 = await startS3({
    onRequest(req) {
      const url = new URL(req.url ?? '/', 'http://x');
      const part = url.searchParams.get('partNumber');
      if (req.method === 'PUT' && part !== null)
        parts.push({
          uploadId: url.searchParams.get('uploadId') ?? '',
          part: Number(part),
          length: Number(req.headers['content-length']),
        });
    },
  });
  bucketUrl = await createBucket(s3.endpoint);
  raw = new S3Client({ endpoint: s3.endpoint, forcePathStyle: true });
});

afterEach(async () => {
  timeShift = 0;
  for (const done of cleanup.splice(0).reverse()) await done();
});

afterAll(async () => {
  raw?.destroy();
  await hasher.close();
  await s3?.stop();
});

/** Two storages on one bucket and a fresh prefix, sharing one lock: two servers. */
async function twoServers(): Promise<{ a: S3Storage; b: S3Storage; prefix: string }> {
  const prefix = `t-${randomBytes(4).toString('hex')}/`;
  const mutex = new KeyedMutex();
  const open = async () => {
    const tempDir = await mkdtemp(join(tmpdir(), 'fshare-s3-temp-'));
    const storage = await S3Storage.open({
      url: `${bucketUrl}/${prefix}`,
      endpoint: s3.endpoint,
      forcePathStyle: true,
      tempDir,
      hasher,
      minFreeBytes: 0,
      lock: (key, task) => mutex.run(key, task),
      clock: () => Date.now() + timeShift,
      log: (line) => {
        throw new Error(`unexpected log line: ${line}`);
      },
    });
    cleanup.push(async () => {
      await storage.close();
      await rm(tempDir, { recursive: true, force: true });
    });
    return storage;
  };
  return { a: await open(), b: await open(), prefix };
}

/** Every key under a prefix of the test bucket (all pages). */
async function keys(prefix: string): Promise<string[]> {
  const Bucket = parseS3Url(bucketUrl).bucket;
  const out: string[] = [];
  let token: string | undefined;
  do {
    const page = await raw.send(
      new ListObjectsV2Command({ Bucket, Prefix: prefix, ContinuationToken: token }),
    );
    for (const o of page.Contents ?? []) out.push(o.Key!);
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token);
  return out;
}

type Publish = (content: NewContent) => Promise<string | undefined>;

/** Records what is published; `replaces` is returned as the content it replaced. */
function publisher(replaces?: string): { publish: Publish; published: NewContent[] } {
  const published: NewContent[] = [];
  return {
    published,
    publish: async (content) => {
      published.push(content);
      return replaces;
    },
  };
}

/** Receives and commits one chunk, as the route does. */
async function send(
  storage: S3Storage,
  shareId: string,
  fields: ChunkFields,
  data: Buffer,
  publish: Publish,
  maxBytes = Number.MAX_SAFE_INTEGER,
): Promise<'stored' | 'complete'> {
  const received = await storage.receive(shareId, fields, Readable.from([data]), maxBytes);
  try {
    return await storage.commit(shareId, fields, received, publish);
  } finally {
    await storage.discard(received);
  }
}

async function refusal(promise: Promise<unknown>): Promise<string> {
  const err = await promise.then(
    () => null,
    (e: unknown) => e,
  );
  expect(err).toBeInstanceOf(ChunkRefusedError);
  return (err as ChunkRefusedError).reason;
}

async function read(storage: S3Storage, blob: string, start?: number, end?: number) {
  const reader = await storage.open(blob);
  expect(reader).not.toBeNull();
  const out: Buffer[] = [];
  for await (const data of reader!.stream(start ?? 0, end ?? reader!.size - 1))
    out.push(data as Buffer);
  return Buffer.concat(out);
}

function split(data: Buffer, size: number): Buffer[] {
  const out: Buffer[] = [];
  for (let at = 0; at < data.length; at += size) out.push(data.subarray(at, at + size));
  return out.length ? out : [Buffer.alloc(0)];
}

function expectPartRules(seen: PartSeen[]): void {
  const byUpload = new Map<string, PartSeen[]>();
  for (const p of seen) byUpload.set(p.uploadId, [...(byUpload.get(p.uploadId) ?? []), p]);
  for (const list of byUpload.values()) {
    list.sort((x, y) => x.part - y.part);
    expect(list.length).toBeLessThanOrEqual(MAX_PARTS);
    list.forEach((p, i) => {
      expect(p.part).toBe(i + 1);
      expect(p.length).toBeLessThanOrEqual(MAX_PART);
      if (i < list.length - 1) expect(p.length).toBeGreaterThanOrEqual(MIN_PART);
    });
  }
}

describe('planParts', () => {
  const sizes = [
    0,
    1,
    MIN_PART - 1,
    MIN_PART,
    MIN_PART + 1,
    8 * MiB - 1,
    8 * MiB,
    8 * MiB + 1,
    12 * MiB,
    10_000 * 8 * MiB,
    10_000 * 8 * MiB + 1,
    80 * 1024 ** 3,
    1024 ** 4 + 12345,
    5 * 1024 ** 4 - 1,
    5 * 1024 ** 4,
  ];

  it.each(sizes)('cuts %i bytes into parts S3 accepts', (total) => {
    const plan = planParts(total);
    expect(plan.length).toBeGreaterThanOrEqual(1);
    expect(plan.length).toBeLessThanOrEqual(MAX_PARTS);
    expect(plan[0]!.start).toBe(0);
    expect(plan.at(-1)!.end).toBe(total);
    plan.forEach((p, i) => {
      const length = p.end - p.start;
      expect(length).toBeLessThanOrEqual(MAX_PART);
      if (i > 0) expect(p.start).toBe(plan[i - 1]!.end);
      if (i < plan.length - 1) {
        expect(length).toBeGreaterThanOrEqual(MIN_PART);
        expect(length).toBe(plan[0]!.end - plan[0]!.start);
      }
    });
  });

  it('uses 8 MiB parts, larger ones only past 10,000 of them', () => {
    expect(planParts(12 * MiB).map((p) => p.end - p.start)).toEqual([8 * MiB, 4 * MiB]);
    expect(planParts(80 * 1024 ** 3)[0]!.end).toBe(9 * MiB);
    expect(planParts(5 * 1024 ** 4)[0]!.end).toBe(525 * MiB);
  });

  it('refuses what S3 cannot hold', () => {
    expect(() => planParts(5 * 1024 ** 4 + 1)).toThrow(/5 TiB/);
    expect(() => planParts(-1)).toThrow(RangeError);
    expect(() => planParts(1.5)).toThrow(RangeError);
  });
});

describe('parseS3Url', () => {
  it('splits the bucket from the prefix', () => {
    expect(parseS3Url('s3://my-bucket')).toEqual({ bucket: 'my-bucket', prefix: '' });
    expect(parseS3Url('s3://my-bucket/')).toEqual({ bucket: 'my-bucket', prefix: '' });
    expect(parseS3Url('s3://b.x1/a/b/')).toEqual({ bucket: 'b.x1', prefix: 'a/b/' });
    expect(parseS3Url('s3://b.x1/a/b')).toEqual({ bucket: 'b.x1', prefix: 'a/b/' });
  });

  it.each([
    'https://bucket/x',
    's3://',
    's3://ab',
    's3://Bucket',
    's3://bucket_1',
    's3://bucket/a//b',
    's3://bucket/a/../b',
    's3://bucket/a?b',
  ])('refuses %s with a clear message', (url) => {
    expect(() => parseS3Url(url)).toThrow(/s3:\/\/BUCKET|bucket name|key prefix/);
  });
});

describe('S3Storage', () => {
  it('assembles chunks committed alternately through two servers, in parts S3 accepts', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const data = randomBytes(12 * MiB + 12_345);
    const chunks = split(data, 64 * 1024);
    const uploadId = randomUUID();
    const { publish, published } = publisher();
    const before = parts.length;
    let last: string | undefined;
    for (const [index, chunk] of chunks.entries()) {
      const fields: ChunkFields = {
        uploadId,
        index,
        total: chunks.length,
        offset: index * 64 * 1024,
        sha256: sha(data),
      };
      last = await send(index % 2 ? b : a, shareId, fields, chunk, publish);
      if (index < chunks.length - 1) expect(last).toBe('stored');
    }
    expect(last).toBe('complete');
    expect(published).toHaveLength(1);
    expect(published[0]).toMatchObject({ size: data.length, sha256: sha(data) });
    expect((await read(b, published[0]!.blob)).equals(data)).toBe(true);

    const sent = parts.slice(before);
    expect(sent.map((p) => p.length)).toEqual([8 * MiB, 4 * MiB + 12_345]);
    expectPartRules(sent);
    // Only the new content and the upload's tombstone are left.
    expect(await keys(`${prefix}content/`)).toEqual([`${prefix}content/${published[0]!.blob}`]);
    expect(await keys(`${prefix}uploads/`)).toEqual([]);
    expect(await keys(`${prefix}finished/`)).toHaveLength(1);
    expect(await a.uploadStatus(shareId, uploadId)).toBe('finished');
  });

  it('cuts one big chunk into parts, and joins a staged chunk with the local one in a part', async () => {
    const { a, b } = await twoServers();
    const shareId = randomUUID();
    const { publish, published } = publisher();
    const before = parts.length;

    const whole = randomBytes(20 * MiB + 1);
    const one = { uploadId: randomUUID(), index: 0, total: 1 };
    expect(await send(a, shareId, one, whole, publish)).toBe('complete');
    expect((await read(b, published[0]!.blob)).equals(whole)).toBe(true);
    expect(published[0]!.sha256).toBe(sha(whole));

    const two = [randomBytes(17 * MiB), randomBytes(MiB + 7)];
    const uploadId = randomUUID();
    expect(await send(a, shareId, { uploadId, index: 0, total: 2 }, two[0]!, publish)).toBe(
      'stored',
    );
    expect(await send(b, shareId, { uploadId, index: 1, total: 2 }, two[1]!, publish)).toBe(
      'complete',
    );
    const joined = Buffer.concat(two);
    expect((await read(a, published[1]!.blob)).equals(joined)).toBe(true);
    expect(published[1]!.sha256).toBe(sha(joined));

    const sent = parts.slice(before);
    expect(sent.map((p) => p.length)).toEqual([
      8 * MiB,
      8 * MiB,
      4 * MiB + 1,
      8 * MiB,
      8 * MiB,
      2 * MiB + 7,
    ]);
    expectPartRules(sent);
  });

  it('takes chunks out of order and re-sent, placed or joined, through either server', async () => {
    const { a, b } = await twoServers();
    const shareId = randomUUID();
    const { publish, published } = publisher();

    // Joined: chunk 2 re-sent with other bytes (the later copy is the one kept).
    const data = randomBytes(100_000);
    const chunks = split(data, 30_000);
    const uploadId = randomUUID();
    const total = chunks.length;
    await send(b, shareId, { uploadId, index: 3, total }, chunks[3]!, publish);
    await send(a, shareId, { uploadId, index: 2, total }, randomBytes(30_000), publish);
    await send(b, shareId, { uploadId, index: 0, total }, chunks[0]!, publish);
    await send(b, shareId, { uploadId, index: 2, total }, chunks[2]!, publish);
    await send(a, shareId, { uploadId, index: 0, total }, chunks[0]!, publish);
    expect(await b.uploadStatus(shareId, uploadId)).toEqual({
      total,
      received: [0, 2, 3],
      bytes: 30_000 * 2 + 10_000,
    });
    expect(await a.isUnfinished(shareId, uploadId)).toBe(true);
    expect(await send(a, shareId, { uploadId, index: 1, total }, chunks[1]!, publish)).toBe(
      'complete',
    );
    expect((await read(b, published[0]!.blob)).equals(data)).toBe(true);
    expect(published[0]!.sha256).toBe(sha(data));
    expect(await b.isUnfinished(shareId, uploadId)).toBe(false);

    // Placed (dzchunksize and dztotalfilesize): a chunk of the wrong length is refused.
    const placedId = randomUUID();
    const layout = { chunkSize: 30_000, fileSize: data.length };
    const placed = (index: number): ChunkFields => ({
      uploadId: placedId,
      index,
      total,
      layout,
      offset: index * 30_000,
    });
    expect(await refusal(send(a, shareId, placed(1), randomBytes(29_999), publish))).toBe(
      'invalid',
    );
    for (const index of [3, 1, 0, 1])
      expect(await send(index % 2 ? a : b, shareId, placed(index), chunks[index]!, publish)).toBe(
        'stored',
      );
    expect(await send(a, shareId, placed(2), chunks[2]!, publish)).toBe('complete');
    expect((await read(a, published[1]!.blob)).equals(data)).toBe(true);
  });

  it('refuses chunks that disagree with the upload, whichever server stored the others', async () => {
    const { a, b } = await twoServers();
    const shareId = randomUUID();
    const uploadId = randomUUID();
    const { publish } = publisher();
    const digest = sha(randomBytes(8));
    await send(
      a,
      shareId,
      { uploadId, index: 0, total: 3, offset: 0, sha256: digest },
      randomBytes(10),
      publish,
    );
    expect(
      await refusal(send(b, shareId, { uploadId, index: 1, total: 4 }, randomBytes(10), publish)),
    ).toBe('invalid');
    expect(
      await refusal(
        send(
          b,
          shareId,
          { uploadId, index: 1, total: 3, sha256: sha(Buffer.alloc(1)) },
          randomBytes(10),
          publish,
        ),
      ),
    ).toBe('invalid');
    expect(
      await refusal(
        send(b, shareId, { uploadId, index: 1, total: 3, offset: 11 }, randomBytes(10), publish),
      ),
    ).toBe('invalid');
    await send(b, shareId, { uploadId, index: 2, total: 3, offset: 20 }, randomBytes(10), publish);
    // Chunk 1 would end at byte 25, where chunk 2 starts at 20.
    expect(
      await refusal(send(a, shareId, { uploadId, index: 1, total: 3 }, randomBytes(15), publish)),
    ).toBe('invalid');
    expect(await a.uploadStatus(shareId, uploadId)).toEqual({
      total: 3,
      received: [0, 2],
      bytes: 20,
    });
    // A first chunk that is refused leaves no upload behind.
    const other = randomUUID();
    const layout = { chunkSize: 10, fileSize: 25 };
    expect(
      await refusal(
        send(a, shareId, { uploadId: other, index: 0, total: 3, layout }, randomBytes(9), publish),
      ),
    ).toBe('invalid');
    expect(await b.uploadStatus(shareId, other)).toBeNull();
  });

  it('completes exactly once when the last two chunks race through both servers', async () => {
    const { a, b } = await twoServers();
    const shareId = randomUUID();
    for (let round = 0; round < 4; round++) {
      const data = randomBytes(6 * MiB + 1 + round);
      const chunks = split(data, 2 * MiB);
      const uploadId = randomUUID();
      const total = chunks.length;
      const { publish, published } = publisher();
      await send(a, shareId, { uploadId, index: 0, total }, chunks[0]!, publish);
      await send(b, shareId, { uploadId, index: 1, total }, chunks[1]!, publish);
      const outcomes = await Promise.all([
        send(a, shareId, { uploadId, index: 2, total }, chunks[2]!, publish),
        send(b, shareId, { uploadId, index: 3, total }, chunks[3]!, publish),
      ]);
      expect(outcomes.sort()).toEqual(['complete', 'stored']);
      expect(published).toHaveLength(1);
      expect((await read(a, published[0]!.blob)).equals(data)).toBe(true);
      expect(published[0]!.sha256).toBe(sha(data));
    }
  });

  it('refuses a digest mismatch, keeps nothing of it, and refuses its late chunks', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const uploadId = randomUUID();
    const { publish, published } = publisher();
    const wrong = sha(Buffer.from('something else'));
    for (const size of [100, 6 * MiB]) {
      const id = `${uploadId}-${size}`;
      await send(
        a,
        shareId,
        { uploadId: id, index: 0, total: 3, sha256: wrong },
        randomBytes(size),
        publish,
      );
      await send(b, shareId, { uploadId: id, index: 1, total: 3 }, randomBytes(size), publish);
      expect(
        await refusal(
          send(a, shareId, { uploadId: id, index: 2, total: 3 }, randomBytes(size), publish),
        ),
      ).toBe('digest');
      expect(await b.uploadStatus(shareId, id)).toBe('finished');
      expect(
        await refusal(
          send(b, shareId, { uploadId: id, index: 1, total: 3 }, randomBytes(size), publish),
        ),
      ).toBe('finished');
    }
    expect(published).toHaveLength(0);
    expect(await keys(`${prefix}content/`)).toEqual([]);
    expect(await keys(`${prefix}uploads/`)).toEqual([]);
    expect(await keys(`${prefix}finished/`)).toHaveLength(2);
  });

  it('drops the new content when publish throws, and the upload can complete later', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const uploadId = randomUUID();
    const data = randomBytes(7 * MiB);
    const chunks = split(data, 4 * MiB);
    const failing: Publish = async () => {
      throw new Error('the share was locked meanwhile');
    };
    await send(a, shareId, { uploadId, index: 0, total: 2 }, chunks[0]!, failing);
    await expect(
      send(b, shareId, { uploadId, index: 1, total: 2 }, chunks[1]!, failing),
    ).rejects.toThrow(/locked meanwhile/);
    expect(await keys(`${prefix}content/`)).toEqual([]);
    expect(await a.uploadStatus(shareId, uploadId)).toMatchObject({ total: 2, received: [0] });

    const old = publisher();
    await send(
      a,
      shareId,
      { uploadId: randomUUID(), index: 0, total: 1 },
      randomBytes(5),
      old.publish,
    );
    const oldBlob = old.published[0]!.blob;
    const { publish, published } = publisher(oldBlob);
    expect(await send(a, shareId, { uploadId, index: 1, total: 2 }, chunks[1]!, publish)).toBe(
      'complete',
    );
    expect((await read(b, published[0]!.blob)).equals(data)).toBe(true);
    // The content it replaced is gone.
    expect(await a.open(oldBlob)).toBeNull();
    expect(await keys(`${prefix}content/`)).toEqual([`${prefix}content/${published[0]!.blob}`]);
  });

  it('refuses late chunks of completed and removed uploads', async () => {
    const { a, b } = await twoServers();
    const shareId = randomUUID();
    const { publish } = publisher();
    const done = randomUUID();
    await send(a, shareId, { uploadId: done, index: 0, total: 2 }, randomBytes(10), publish);
    await send(b, shareId, { uploadId: done, index: 1, total: 2 }, randomBytes(10), publish);
    expect(
      await refusal(
        send(a, shareId, { uploadId: done, index: 1, total: 2 }, randomBytes(10), publish),
      ),
    ).toBe('finished');

    const open1 = randomUUID();
    const open2 = randomUUID();
    await send(a, shareId, { uploadId: open1, index: 0, total: 2 }, randomBytes(10), publish);
    await send(b, shareId, { uploadId: open2, index: 1, total: 3 }, randomBytes(20), publish);
    const elsewhere = randomUUID();
    await send(b, elsewhere, { uploadId: open1, index: 0, total: 2 }, randomBytes(30), publish);
    expect(await a.unfinished()).toEqual(
      new Map([
        [shareId, { uploads: 2, bytes: 30 }],
        [elsewhere, { uploads: 1, bytes: 30 }],
      ]),
    );
    await b.removeUploads(shareId);
    expect(await a.unfinished()).toEqual(new Map([[elsewhere, { uploads: 1, bytes: 30 }]]));
    expect(await a.uploadStatus(shareId, open1)).toBe('finished');
    expect(await a.isUnfinished(shareId, open2)).toBe(false);
    expect(
      await refusal(
        send(a, shareId, { uploadId: open1, index: 1, total: 2 }, randomBytes(10), publish),
      ),
    ).toBe('finished');
    expect(await a.isUnfinished(elsewhere, open1)).toBe(true);
  });

  it('reads exact byte ranges, and null for content that is not there', async () => {
    const { a, b } = await twoServers();
    const shareId = randomUUID();
    const { publish, published } = publisher();
    const data = randomBytes(9 * MiB + 3);
    const chunks = split(data, 3 * MiB);
    const uploadId = randomUUID();
    for (const [index, chunk] of chunks.entries())
      await send(
        index % 2 ? a : b,
        shareId,
        { uploadId, index, total: chunks.length },
        chunk,
        publish,
      );
    const blob = published[0]!.blob;
    const reader = await b.open(blob);
    expect(reader).toMatchObject({ size: data.length });
    expect(Math.abs(reader!.mtimeMs - Date.now())).toBeLessThan(60_000);
    await reader!.close();
    const last = data.length - 1;
    for (const [start, end] of [
      [0, 0],
      [last, last],
      [last - 1, last],
      [8 * MiB - 1, 8 * MiB],
      [12_345, 5 * MiB],
      [0, last],
    ] as const)
      expect((await read(a, blob, start, end)).equals(data.subarray(start, end + 1))).toBe(true);
    expect(await a.digest(blob)).toBe(sha(data));

    // A reader closed while its stream is open ends that stream (with an error).
    const open = await a.open(blob);
    const stream = open!.stream(0, last);
    const ended = new Promise((resolve) => {
      stream.on('error', resolve);
      stream.on('close', () => resolve('closed'));
    });
    await new Promise((resolve) => stream.once('readable', resolve));
    expect(stream.read()).not.toBeNull();
    await open!.close();
    expect(await ended).toBeInstanceOf(Error);

    expect(await a.open(`${shareId}.${randomUUID()}`)).toBeNull();
    const empty = randomUUID();
    await send(a, shareId, { uploadId: empty, index: 0, total: 1 }, Buffer.alloc(0), publish);
    expect(published[1]).toMatchObject({ size: 0, sha256: sha(Buffer.alloc(0)) });
    expect((await b.open(published[1]!.blob))?.size).toBe(0);
    expect(await b.digest(published[1]!.blob)).toBe(sha(Buffer.alloc(0)));
  });

  it('lists every stored chunk past the first page of a listing', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const uploadId = randomUUID();
    const total = 1_100;
    const { publish } = publisher();
    // The first chunk through the storage; the rest written as it stages them, to be quick.
    await send(a, shareId, { uploadId, index: 0, total }, Buffer.from('x'), publish);
    const dir = (await keys(`${prefix}uploads/${shareId}/`))[0]!.replace(/[^/]*$/, '');
    const Bucket = parseS3Url(bucketUrl).bucket;
    for (let start = 1; start < total - 1; start += 50)
      await Promise.all(
        Array.from({ length: Math.min(50, total - 1 - start) }, (_, i) =>
          raw.send(
            new PutObjectCommand({
              Bucket,
              Key: `${dir}${start + i}`,
              Body: 'x',
              Metadata: { total: String(total) },
            }),
          ),
        ),
      );
    const status = await b.uploadStatus(shareId, uploadId);
    expect(status).toMatchObject({ total, bytes: total - 1 });
    expect((status as { received: number[] }).received).toEqual(
      Array.from({ length: total - 1 }, (_, i) => i),
    );
    expect(await b.isUnfinished(shareId, uploadId)).toBe(true);
    expect(await a.unfinished()).toEqual(new Map([[shareId, { uploads: 1, bytes: total - 1 }]]));
    const { publish: last, published } = publisher();
    expect(
      await send(b, shareId, { uploadId, index: total - 1, total }, Buffer.from('y'), last),
    ).toBe('complete');
    expect((await read(a, published[0]!.blob)).toString()).toBe(`${'x'.repeat(total - 1)}y`);
    expect(await keys(`${prefix}uploads/`)).toEqual([]);
  });

  it('completes an upload an earlier server began (keys without tokens), a copy sent again replacing its chunk', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const uploadId = randomUUID();
    const data = randomBytes(30);
    const [c0, c1, c2] = split(data, 10);
    // What a server before copies had tokens left: `meta`, and one key per index.
    const key = createHash('sha256').update(uploadId).digest('hex').slice(0, 40);
    const dir = `${prefix}uploads/${shareId}/${key}/`;
    const Bucket = parseS3Url(bucketUrl).bucket;
    const meta = { v: 1, total: 3, layout: null, sha256: sha(data), created: Date.now() };
    const put = (name: string, Body: string | Buffer) =>
      raw.send(
        new PutObjectCommand({ Bucket, Key: `${dir}${name}`, Body, Metadata: { total: '3' } }),
      );
    await Promise.all([
      put('meta', JSON.stringify(meta)),
      put('0', c0!),
      put('1', randomBytes(10)),
    ]);
    expect(await b.uploadStatus(shareId, uploadId)).toEqual({
      total: 3,
      received: [0, 1],
      bytes: 20,
    });
    expect(await a.isUnfinished(shareId, uploadId)).toBe(true);

    const { publish, published } = publisher();
    // Chunk 1 sent again: its copy, with a token, counts, and the one it replaced goes.
    expect(await send(a, shareId, { uploadId, index: 1, total: 3 }, c1!, publish)).toBe('stored');
    expect(await keys(`${dir}1`)).toEqual([expect.stringMatching(/\/1\.\d+$/)]);
    // The old meta's dzsha256 holds.
    const other = 'f'.repeat(64);
    expect(
      await refusal(
        send(b, shareId, { uploadId, index: 2, total: 3, sha256: other }, c2!, publish),
      ),
    ).toBe('invalid');
    expect(await send(b, shareId, { uploadId, index: 2, total: 3 }, c2!, publish)).toBe('complete');
    expect(published[0]).toMatchObject({ size: 30, sha256: sha(data) });
    expect((await read(a, published[0]!.blob)).equals(data)).toBe(true);
    expect(await keys(`${prefix}uploads/`)).toEqual([]);
  });

  // A tombstone whose PUT landed after its lock was lost, and after a later lock holder staged a
  // chunk (higher token), must not end the upload (lost-lock-objects.test.ts shows it end to end).
  it('an upload is finished only by a tombstone no copy outranks; one without a token (earlier servers) outranks all', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const [c0, c1, c2] = split(randomBytes(30), 10);
    const { publish } = publisher();
    const Bucket = parseS3Url(bucketUrl).bucket;
    const tombstoneOf = (uploadId: string) =>
      `${prefix}finished/${shareId}/${createHash('sha256').update(uploadId).digest('hex').slice(0, 40)}`;
    const put = (Key: string) => raw.send(new PutObjectCommand({ Bucket, Key, Body: '' }));
    const uploadId = randomUUID();
    const tombstone = tombstoneOf(uploadId);
    const fields = (index: number) => ({ uploadId, index, total: 3 });
    expect(await send(a, shareId, fields(0), c0!, publish)).toBe('stored');

    // Outranked by chunk 0's copy: the upload goes on, and the sweep of old tombstones only
    // removes it.
    await put(`${tombstone}.0`);
    expect(await b.uploadStatus(shareId, uploadId)).toEqual({ total: 3, received: [0], bytes: 10 });
    expect(await b.isUnfinished(shareId, uploadId)).toBe(true);
    timeShift = 49 * 3600 * 1000;
    await b.sweep(100 * 3600 * 1000);
    timeShift = 0;
    expect(await keys(`${prefix}finished/`)).toEqual([]);
    expect(await a.uploadStatus(shareId, uploadId)).toMatchObject({ received: [0] });

    // The next copy staged removes an outranked tombstone.
    await put(`${tombstone}.0`);
    expect(await send(b, shareId, fields(1), c1!, publish)).toBe('stored');
    expect(await keys(`${prefix}finished/`)).toEqual([]);

    // One above every copy's token ends it.
    await put(`${tombstone}.999`);
    expect(await a.uploadStatus(shareId, uploadId)).toBe('finished');
    expect(await a.isUnfinished(shareId, uploadId)).toBe(false);
    expect(await refusal(send(b, shareId, fields(2), c2!, publish))).toBe('finished');

    // So does one without a token, whatever the copies' tokens.
    const older = randomUUID();
    expect(await send(a, shareId, { ...fields(0), uploadId: older }, c0!, publish)).toBe('stored');
    await put(tombstoneOf(older));
    expect(await b.uploadStatus(shareId, older)).toBe('finished');
    expect(await b.isUnfinished(shareId, older)).toBe(false);
    expect(await refusal(send(a, shareId, { ...fields(1), uploadId: older }, c1!, publish))).toBe(
      'finished',
    );
  });

  it('sweeps idle uploads and old tombstones, and aborts what a cut assembly left', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const idle = randomUUID();
    const { publish } = publisher();
    await send(a, shareId, { uploadId: idle, index: 0, total: 2 }, randomBytes(10), publish);
    await b.sweep(60_000);
    expect(await a.isUnfinished(shareId, idle)).toBe(true);

    // An assembly cut short: its multipart upload and marker stay beside the chunks.
    const dir = (await keys(`${prefix}uploads/${shareId}/`))[0]!.replace(/[^/]*$/, '');
    const Bucket = parseS3Url(bucketUrl).bucket;
    const started = await raw.send(
      new CreateMultipartUploadCommand({ Bucket, Key: `${prefix}content/${shareId}.x` }),
    );
    const marker = JSON.stringify({
      key: `${prefix}content/${shareId}.x`,
      uploadId: started.UploadId,
    });
    await raw.send(new PutObjectCommand({ Bucket, Key: `${dir}multipart`, Body: marker }));

    await new Promise((resolve) => setTimeout(resolve, 20));
    await b.sweep(1);
    expect(await a.uploadStatus(shareId, idle)).toBe('finished');
    expect(await keys(dir)).toEqual([]);
    const tombstones = await keys(`${prefix}finished/`);
    expect(tombstones).toHaveLength(1);
    expect(
      await refusal(
        send(a, shareId, { uploadId: idle, index: 1, total: 2 }, randomBytes(10), publish),
      ),
    ).toBe('finished');

    // A crash between the tombstone and the removal of the chunks: the next sweep clears them.
    await raw.send(
      new PutObjectCommand({ Bucket, Key: `${dir}1`, Body: 'x', Metadata: { total: '2' } }),
    );
    expect(await a.uploadStatus(shareId, idle)).toBe('finished');
    await new Promise((resolve) => setTimeout(resolve, 20));
    await b.sweep(1);
    expect(await keys(dir)).toEqual([]);

    // The tombstone goes once it is older than the keep period.
    await b.sweep(60_000);
    expect(await keys(`${prefix}finished/`)).toEqual(tombstones);
    timeShift = 49 * 3600 * 1000;
    await b.sweep(60_000);
    expect(await keys(prefix)).toEqual([]);
    expect(await a.uploadStatus(shareId, idle)).toBeNull();
  });

  // Property guarded: a start (which sweeps) goes on whatever else the bucket holds, and leaves
  // alone what fshare never names. A key such as uploads/a b/c/d stopped the start with "Not a
  // valid share id"; so did one under finished/ once two days old.
  it('the sweep leaves keys fshare never names under uploads/ and finished/ alone, however old', async () => {
    const { b, prefix } = await twoServers();
    const Bucket = parseS3Url(bucketUrl).bucket;
    const foreign = [
      `${prefix}uploads/a b/c/d`,
      `${prefix}uploads/notes/readme/x`,
      `${prefix}uploads/README`,
      `${prefix}finished/x y/zz`,
      `${prefix}finished/${randomUUID()}/not-a-key`,
    ].sort();
    for (const Key of foreign) await raw.send(new PutObjectCommand({ Bucket, Key, Body: 'x' }));
    timeShift = 49 * 3600 * 1000;
    await b.sweep(60_000);
    await b.init(() => false);
    expect((await keys(prefix)).sort()).toEqual(foreign);
  });

  it('leaves young unreferenced content alone at start-up, and removes it once old', async () => {
    const { a, b, prefix } = await twoServers();
    const shareId = randomUUID();
    const { publish, published } = publisher();
    for (let i = 0; i < 2; i++)
      await send(
        a,
        shareId,
        { uploadId: randomUUID(), index: 0, total: 1 },
        randomBytes(10),
        publish,
      );
    const [kept, orphan] = published.map((p) => p.blob) as [string, string];
    await b.init((blob) => blob === kept);
    expect((await keys(`${prefix}content/`)).sort()).toEqual(
      [`${prefix}content/${kept}`, `${prefix}content/${orphan}`].sort(),
    );
    timeShift = 2 * 3600 * 1000;
    await b.init((blob) => blob === kept);
    expect(await keys(`${prefix}content/`)).toEqual([`${prefix}content/${kept}`]);
  });

  it('keeps no more than maxBytes of a chunk, and stages nothing of an overflowing one', async () => {
    const { a, prefix } = await twoServers();
    const shareId = randomUUID();
    const uploadId = randomUUID();
    const { publish } = publisher();
    const fields = { uploadId, index: 0, total: 2 };
    const body = Readable.from([randomBytes(6), randomBytes(6)]);
    const received = await a.receive(shareId, fields, body, 10);
    expect(received.overflow).toBe(true);
    expect(received.bytes).toBeLessThanOrEqual(10);
    expect(await refusal(a.commit(shareId, fields, received, publish))).toBe('invalid');
    expect(await a.uploadStatus(shareId, uploadId)).toBeNull();
    expect(await keys(prefix)).toEqual([]);
  });

  it('removes its temp files, and those of processes gone, at start-up', async () => {
    const tempRoot = await mkdtemp(join(tmpdir(), 'fshare-s3-root-'));
    cleanup.push(() => rm(tempRoot, { recursive: true, force: true }));
    const host = hostname().replace(/[^A-Za-z0-9.-]/g, '_');
    const dead = join(tempRoot, `s3-${host}-999999999`);
    const unrelated = join(tempRoot, 'keep-me');
    await mkdir(dead);
    await writeFile(join(dead, 'c.1'), 'x');
    await writeFile(unrelated, 'x');
    const storage = await S3Storage.open({
      url: bucketUrl,
      endpoint: s3.endpoint,
      forcePathStyle: true,
      tempDir: tempRoot,
      hasher,
      minFreeBytes: 0,
      lock: (_key, task) => task(),
    });
    cleanup.push(() => storage.close());
    // Start-up empties its own directory too: nothing is in flight yet (this file stands for
    // what a crash of an earlier process with the same pid left).
    const received = await storage.receive(
      randomUUID(),
      null,
      Readable.from([Buffer.from('abc')]),
      100,
    );
    expect(received.bytes).toBe(3);
    await storage.init(() => true);
    expect((await readdir(tempRoot)).sort()).toEqual(['keep-me', `s3-${host}-${process.pid}`]);
    expect(await readdir(join(tempRoot, `s3-${host}-${process.pid}`))).toEqual([]);
    await expect(storage.reserve(Number.MAX_SAFE_INTEGER)).rejects.toThrow(/free space/);
    (await storage.reserve(1))();
  });

  it('says clearly when the bucket is missing or the credentials are wrong', async () => {
    const base = {
      endpoint: s3.endpoint,
      forcePathStyle: true,
      tempDir: tmpdir(),
      hasher,
      minFreeBytes: 0,
      lock: <T>(_key: string, task: () => Promise<T>) => task(),
    };
    await expect(S3Storage.open({ ...base, url: 's3://no-such-bucket-here' })).rejects.toThrow(
      /bucket "no-such-bucket-here" does not exist/,
    );
    // s3rver checks the access key id only (not a v4 signature).
    process.env.AWS_ACCESS_KEY_ID = 'NOT-AN-ACCESS-KEY';
    process.env.AWS_SECRET_ACCESS_KEY = 'not-the-secret-1234';
    try {
      const err = await S3Storage.open({ ...base, url: bucketUrl }).catch((e: Error) => e);
      expect(err).toBeInstanceOf(Error);
      expect((err as Error).message).toMatch(/denied/);
      expect((err as Error).message).not.toMatch(/NOT-AN-ACCESS-KEY|not-the-secret-1234/);
    } finally {
      Object.assign(process.env, S3_TEST_ENV);
    }
    const closed = await S3Storage.open({
      ...base,
      url: bucketUrl,
      endpoint: 'http://127.0.0.1:1',
    }).catch((e: Error) => e);
    expect((closed as Error).message).toMatch(
      /cannot reach http:\/\/127\.0\.0\.1:1 \(ECONNREFUSED\)/,
    );
  });
});
