// A start removes the stored content that no share names (what a crash left between storing
// content and recording it). Property guarded here: a start never removes content because its
// metadata store lost its records, or is another deployment's store; it stops with one message
// instead, and the content is served again once the right store is back.
import { randomBytes } from 'node:crypto';
import { cp, mkdir, mkdtemp, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DeleteObjectCommand, GetObjectCommand, PutObjectCommand } from '@aws-sdk/client-s3';
import { afterAll, describe, expect, inject, it } from 'vitest';
import type { ServerOptions } from '../../src/server/options.js';
import { content, createShareWithContent } from '../helpers/http.js';
import { createDatabase } from '../helpers/postgres.js';
import { contentKeys, s3Client } from '../helpers/s3.js';
import { ADMIN, BACKEND, login, startServer, type TestServer } from '../helpers/server.js';

const embedded = BACKEND === 'embedded';
const roots: string[] = [];
afterAll(async () => {
  for (const root of roots) await rm(root, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'fshare-owner-'));
  roots.push(root);
  return join(root, 'data');
}

const s3 = (srv: TestServer) => ({
  client: s3Client(srv.s3Endpoint!),
  bucket: srv.storage!.slice('s3://'.length),
});

/** The names of the stored content objects (files in content/, or keys under content/). */
async function stored(srv: TestServer): Promise<string[]> {
  if (embedded) return (await readdir(join(srv.dataDir, 'content'))).sort();
  return contentKeys(srv.s3Endpoint!, srv.storage!);
}

/** The content's mark: the id of the store it belongs to. */
async function mark(srv: TestServer): Promise<string | null> {
  if (embedded) return readFile(join(srv.dataDir, 'content-owner'), 'utf8').catch(() => null);
  const { client, bucket } = s3(srv);
  try {
    const object = await client.send(
      new GetObjectCommand({ Bucket: bucket, Key: 'content-owner' }),
    );
    return await object.Body!.transformToString();
  } catch {
    return null;
  } finally {
    client.destroy();
  }
}

/** The options that start a server on `srv`'s store and storage again. */
const sameBackends = (srv: TestServer): Partial<ServerOptions> => ({
  dataDir: srv.dataDir,
  database: srv.database,
  storage: srv.storage,
  s3Endpoint: srv.s3Endpoint,
  s3ForcePathStyle: embedded ? undefined : true,
});

/** A server with two shares of content, stopped; their ids and bytes. */
async function withContent() {
  const srv = await startServer({ dataDir: await dataDir() });
  const token = await login(srv.url, ADMIN.username, ADMIN.password);
  const shares: { id: string; data: Buffer }[] = [];
  for (const name of ['a.bin', 'b.bin']) {
    const data = randomBytes(100_000);
    shares.push({ id: await createShareWithContent(srv.url, token, name, data), data });
  }
  await srv.close(false);
  return { srv, shares, before: await stored(srv) };
}

/** Starts on the original store again: every share serves its bytes. */
async function servesAgain(srv: TestServer, shares: { id: string; data: Buffer }[]) {
  const again = await startServer(sameBackends(srv));
  try {
    const token = await login(again.url, ADMIN.username, ADMIN.password);
    for (const { id, data } of shares)
      expect((await content(again.url, token, id)).equals(data)).toBe(true);
  } finally {
    await again.close(false);
  }
}

describe('a start keeps content its store cannot account for', () => {
  it('a store that lost its records stops the start; the content stays and is served again', async () => {
    const { srv, shares, before } = await withContent();
    expect(before).toHaveLength(2);
    const aside = `${srv.dataDir}-aside`;
    let lost: Partial<ServerOptions>;
    if (embedded) {
      // db.json and its journal gone: the embedded store starts as a new one.
      await cp(srv.dataDir, aside, { recursive: true });
      await rm(join(srv.dataDir, 'db.json'));
      await rm(join(srv.dataDir, 'db.journal'));
      lost = sameBackends(srv);
    } else {
      // A new, empty database (a mistyped --database) on the same bucket.
      lost = { ...sameBackends(srv), database: await createDatabase(inject('pgAdminUrl')) };
    }
    await expect(startServer(lost)).rejects.toThrow(
      /holds 2 stored files that no share names, and .* holds no share at all/,
    );
    // It says what a start does with them: a data directory sets them aside, S3 removes them.
    await expect(startServer(lost)).rejects.toThrow(
      embedded
        ? /Starting would move those files to \S+\/orphans\/ \(kept 30 days\)\./
        : /Starting would remove those files\./,
    );
    // A second try stops the same way (the first wrote a new, empty store).
    await expect(startServer(lost)).rejects.toThrow(/holds 2 stored files/);
    expect(await stored(srv)).toEqual(before);
    if (embedded)
      for (const f of ['db.json', 'db.journal'])
        await writeFile(join(srv.dataDir, f), await readFile(join(aside, f)));
    await servesAgain(srv, shares);
    expect(await stored(srv)).toEqual(before);
  });

  it("another deployment's store stops the start on this storage; the content stays", async () => {
    const { srv, shares, before } = await withContent();
    // Another server, its own store, one share of its own.
    const other = await startServer({ dataDir: await dataDir() });
    const token = await login(other.url, ADMIN.username, ADMIN.password);
    await createShareWithContent(other.url, token, 'other.bin', randomBytes(10));
    await other.close(false);
    const aside = `${srv.dataDir}-aside`;
    let wrong: Partial<ServerOptions>;
    if (embedded) {
      // Its metadata files copied over this data directory's.
      await cp(srv.dataDir, aside, { recursive: true });
      for (const f of ['db.json', 'db.journal'])
        await writeFile(join(srv.dataDir, f), await readFile(join(other.dataDir, f)));
      wrong = sameBackends(srv);
    } else {
      // Its database, with this server's bucket.
      wrong = { ...sameBackends(srv), database: other.database };
    }
    await expect(startServer(wrong)).rejects.toThrow(
      /belongs to another metadata store .* holds 2 stored files that no share of this one names/,
    );
    await expect(startServer(wrong)).rejects.toThrow(
      embedded
        ? /would move them to \S+\/orphans\/ \(kept 30 days\)\..* \(the next start would then move its files that no share names to /
        : /would remove them\..* \(the next start would then remove its files that no share names\)/,
    );
    expect(await stored(srv)).toEqual(before);
    if (embedded)
      for (const f of ['db.json', 'db.journal'])
        await writeFile(join(srv.dataDir, f), await readFile(join(aside, f)));
    await servesAgain(srv, shares);
  });

  // A damaged mark names no store, as no mark does.
  it.each([
    ['stored before the mark existed', null],
    ['whose mark is damaged', 'not\u0000an id\n'],
  ])('content %s is adopted by a store that holds shares', async (_, damaged) => {
    const { srv, shares, before } = await withContent();
    expect(await mark(srv)).not.toBeNull();
    // As a data directory or bucket of an fshare before content-owner: no mark, and a leftover
    // of a crash (content no share names, an hour old on S3, where younger content is kept).
    const stray = `${shares[0]!.id}.0123456789abcdef`;
    if (embedded) {
      if (damaged === null) await rm(join(srv.dataDir, 'content-owner'));
      else await writeFile(join(srv.dataDir, 'content-owner'), damaged);
      await writeFile(join(srv.dataDir, 'content', stray), 'left by a crash');
    } else {
      const { client, bucket } = s3(srv);
      try {
        await client.send(
          damaged === null
            ? new DeleteObjectCommand({ Bucket: bucket, Key: 'content-owner' })
            : new PutObjectCommand({ Bucket: bucket, Key: 'content-owner', Body: damaged }),
        );
        await client.send(
          new PutObjectCommand({
            Bucket: bucket,
            Key: `content/${stray}`,
            Body: 'left by a crash',
          }),
        );
      } finally {
        client.destroy();
      }
    }
    const again = await startServer(sameBackends(srv));
    await again.close(false);
    // The start went on and marked the content as this store's; the leftover is removed (on S3
    // it is kept until it is an hour old, s3-storage.test.ts).
    expect(await mark(srv)).toMatch(/^[0-9a-f-]{36}\n$/);
    expect(await stored(srv)).toEqual(embedded ? before : [...before, stray].sort());
    await servesAgain(srv, shares);
  });
});

// Property guarded: a start removes only what fshare itself stored as content. A directory in
// content/ (the lost+found of a volume mounted there) stopped the start with EISDIR, and any other
// file there, fshare's or not, was removed as content no share names.
describe('names fshare never gives content', () => {
  it('are neither removed nor counted, and a directory among them does not stop the start', async () => {
    const { srv, shares, before } = await withContent();
    const stray = `${shares[0]!.id}.0123456789abcdef`;
    const foreign = ['README.txt', 'notes', `${shares[0]!.id}.bak~`];
    if (embedded) {
      await mkdir(join(srv.dataDir, 'content', 'lost+found'));
      for (const name of [...foreign, stray])
        await writeFile(join(srv.dataDir, 'content', name), 'not a share');
    } else {
      const { client, bucket } = s3(srv);
      try {
        for (const name of [...foreign, stray])
          await client.send(
            new PutObjectCommand({ Bucket: bucket, Key: `content/${name}`, Body: 'not a share' }),
          );
      } finally {
        client.destroy();
      }
    }
    const again = await startServer(sameBackends(srv));
    await again.close(false);
    const kept = [...before, ...foreign, ...(embedded ? ['lost+found'] : [stray])].sort();
    expect(await stored(srv)).toEqual(kept);
    await servesAgain(srv, shares);
  });

  // The data directory's other folders: incoming/ held a directory (the temp files of a start
  // with --storage s3://…, on the same data directory) and the start stopped with EISDIR; a file
  // in uploads/ stopped it with ENOTDIR; a symbolic link there was read as an upload's folder,
  // and a target holding a file named "done" lost every other file.
  if (embedded)
    it('a directory in incoming/, a file or a link in uploads/: the start goes on, none is touched', async () => {
      const { srv, shares } = await withContent();
      const outside = join(srv.dataDir, '..', 'outside');
      await mkdir(outside);
      for (const name of ['done', 'precious.txt']) await writeFile(join(outside, name), 'mine');
      await mkdir(join(srv.dataDir, 'incoming', 's3-host-123'), { recursive: true });
      await writeFile(join(srv.dataDir, 'incoming', 's3-host-123', 'c.0123'), 'x');
      await writeFile(join(srv.dataDir, 'uploads', '.DS_Store'), 'x');
      await symlink(outside, join(srv.dataDir, 'uploads', `${shares[0]!.id}.${'a'.repeat(40)}`));
      await servesAgain(srv, shares);
      expect((await readdir(outside)).sort()).toEqual(['done', 'precious.txt']);
      expect(await readdir(join(srv.dataDir, 'incoming', 's3-host-123'))).toEqual(['c.0123']);
      expect((await readdir(join(srv.dataDir, 'uploads'))).sort()).toContain('.DS_Store');
    });
});

describe('a new store on storage that holds only names fshare never gives content', () => {
  it('starts, and keeps them', async () => {
    const { srv } = await withContent();
    const foreign = ['README.txt', 'notes'];
    let fresh: Partial<ServerOptions>;
    if (embedded) {
      await rm(join(srv.dataDir, 'content'), { recursive: true });
      await mkdir(join(srv.dataDir, 'content', 'lost+found'), { recursive: true });
      for (const name of foreign) await writeFile(join(srv.dataDir, 'content', name), 'x');
      for (const f of ['db.json', 'db.journal']) await rm(join(srv.dataDir, f));
      fresh = sameBackends(srv);
    } else {
      const { client, bucket } = s3(srv);
      try {
        for (const name of await stored(srv))
          await client.send(new DeleteObjectCommand({ Bucket: bucket, Key: `content/${name}` }));
        for (const name of foreign)
          await client.send(
            new PutObjectCommand({ Bucket: bucket, Key: `content/${name}`, Body: 'x' }),
          );
      } finally {
        client.destroy();
      }
      fresh = { ...sameBackends(srv), database: await createDatabase(inject('pgAdminUrl')) };
    }
    const started = await startServer(fresh);
    await started.close(false);
    expect(await stored(srv)).toEqual([...foreign, ...(embedded ? ['lost+found'] : [])].sort());
  });
});
