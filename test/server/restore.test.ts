// Restoring the embedded store's metadata (db.json and its journal) from a backup, on the same
// data directory: what the start does with the content the restored records do not name.
import { randomBytes } from 'node:crypto';
import {
  cp,
  link,
  mkdir,
  mkdtemp,
  readdir,
  readFile,
  rm,
  symlink,
  utimes,
  writeFile,
} from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { content, createShareWithContent, get, upload } from '../helpers/http.js';
import { ADMIN, login, startServer } from '../helpers/server.js';

const roots: string[] = [];
afterAll(async () => {
  for (const root of roots) await rm(root, { recursive: true, force: true });
});

async function dataDir(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'fshare-restore-'));
  roots.push(root);
  return join(root, 'data');
}

// Found from outside: an older db.json restored from a backup (the store the same, some of its
// records older) made the next start remove, without a word, the content of every share uploaded
// since. Property: a start never silently removes content that could be a share's; what no share
// names is moved to orphans/ and said in the log (a completion a crash cut short, whose upload
// keeps the bytes, is still removed: crash-points.test.ts).
describe('an older db.json restored from a backup', () => {
  it('the content of shares it does not have is moved to orphans/ and said, not removed', async () => {
    const dir = await dataDir();
    let srv = await startServer({ dataDir: dir });
    let token = await login(srv.url, ADMIN.username, ADMIN.password);
    const kept = randomBytes(50_000);
    const keptId = await createShareWithContent(srv.url, token, 'kept.bin', kept);
    const backup = `${dir}-backup`;
    await mkdir(backup);
    await srv.close(false);
    for (const f of ['db.json', 'db.journal']) await cp(join(dir, f), join(backup, f));
    srv = await startServer({ dataDir: dir });
    token = await login(srv.url, ADMIN.username, ADMIN.password);
    const later = randomBytes(70_000);
    const laterId = await createShareWithContent(srv.url, token, 'later.bin', later);
    const [laterBlob] = (await readdir(join(dir, 'content'))).filter((n) => n.startsWith(laterId));
    expect(laterBlob).toBeDefined();
    // An operator's snapshot of the data directory made of hard links (`cp -al`): a second link
    // is no sign of a completion cut short, whose link a start removes (it removed this one).
    await link(join(dir, 'content', laterBlob!), `${dir}-snapshot-of-later`);
    await srv.close(false);

    for (const f of ['db.json', 'db.journal']) await cp(join(backup, f), join(dir, f));
    const notices: string[] = [];
    srv = await startServer({ dataDir: dir, notice: (line) => notices.push(line) });
    try {
      token = await login(srv.url, ADMIN.username, ADMIN.password);
      expect((await content(srv.url, token, keptId)).equals(kept)).toBe(true);
      const stamps = await readdir(join(dir, 'orphans'));
      expect(stamps).toHaveLength(1);
      const aside = join(dir, 'orphans', stamps[0]!);
      expect(await readdir(aside)).toEqual([laterBlob]);
      expect((await readFile(join(aside, laterBlob!))).equals(later)).toBe(true);
      expect(notices.filter((l) => /orphans/.test(l))).toEqual([
        `moved 1 stored file that no share names to ${aside}: what a crash left, or the content of shares the metadata does not have (an older db.json restored?); kept 30 days (docs/CLI.md, fshare serve, "Content that no share names")`,
      ]);
    } finally {
      await srv.close(false);
    }
    // The next start has nothing more to move, and keeps what was moved.
    notices.length = 0;
    srv = await startServer({ dataDir: dir, notice: (line) => notices.push(line) });
    await srv.close(false);
    expect(notices.filter((l) => /orphans/.test(l))).toEqual([]);
    expect(await readdir(join(dir, 'orphans'))).toHaveLength(1);
  });

  // Found from outside: removing/ made a link to content/ had every live share's content read
  // as marks of content let go, and removed. Marks are read only from a directory of its own.
  it('a removing/ that is a link to content/ removes nothing that a share names', async () => {
    const dir = await dataDir();
    let srv = await startServer({ dataDir: dir });
    let token = await login(srv.url, ADMIN.username, ADMIN.password);
    const data = randomBytes(20_000);
    const id = await createShareWithContent(srv.url, token, 'live.bin', data);
    await srv.close(false);
    await rm(join(dir, 'removing'), { recursive: true, force: true });
    await symlink('content', join(dir, 'removing'));
    srv = await startServer({ dataDir: dir });
    try {
      token = await login(srv.url, ADMIN.username, ADMIN.password);
      expect((await content(srv.url, token, id)).equals(data)).toBe(true);
    } finally {
      await srv.close(false);
    }
  });

  // A share replaced after the backup: its restored record names the bytes the replacement
  // removed. Found from outside: it answered "The content storage is not answering right now;
  // try again" (503), which no retry mends. The new bytes are set aside.
  it('a share replaced since: its download says the content is missing; the new bytes are set aside', async () => {
    const dir = await dataDir();
    let srv = await startServer({ dataDir: dir });
    let token = await login(srv.url, ADMIN.username, ADMIN.password);
    const id = await createShareWithContent(srv.url, token, 'r.bin', randomBytes(10_000));
    await srv.close(false);
    const backup = `${dir}-backup`;
    await mkdir(backup);
    for (const f of ['db.json', 'db.journal']) await cp(join(dir, f), join(backup, f));
    srv = await startServer({ dataDir: dir });
    token = await login(srv.url, ADMIN.username, ADMIN.password);
    const fresh = randomBytes(12_000);
    await upload(srv.url, token, id, fresh, 1, 'PUT');
    await srv.close(false);
    for (const f of ['db.json', 'db.journal']) await cp(join(backup, f), join(dir, f));
    srv = await startServer({ dataDir: dir, notice: () => undefined });
    try {
      token = await login(srv.url, ADMIN.username, ADMIN.password);
      const res = await get(srv.url, `/files/${id}/content`, { token });
      expect(res.status).toBe(503);
      expect(res.body.message).toMatch(
        /^The stored content of this share is missing .*restore it from a backup$/,
      );
      expect(res.headers['retry-after']).toBeUndefined();
      const [stamp] = await readdir(join(dir, 'orphans'));
      const [file] = await readdir(join(dir, 'orphans', stamp!));
      expect((await readFile(join(dir, 'orphans', stamp!, file!))).equals(fresh)).toBe(true);
    } finally {
      await srv.close(false);
    }
  });

  it('a start removes what it set aside once it is 30 days old, and keeps the rest', async () => {
    const dir = await dataDir();
    const srv = await startServer({ dataDir: dir });
    await srv.close(false);
    const old = join(dir, 'orphans', '2026-01-01T00-00-00-000Z');
    const recent = join(dir, 'orphans', '2026-11-01T00-00-00-000Z');
    for (const folder of [old, recent]) {
      await mkdir(folder, { recursive: true });
      await writeFile(join(folder, 'x'), 'bytes');
    }
    const days = (n: number) => new Date(Date.now() - n * 24 * 3600 * 1000);
    await utimes(old, days(31), days(31));
    await utimes(recent, days(29), days(29));
    const again = await startServer({ dataDir: dir });
    await again.close(false);
    expect(await readdir(join(dir, 'orphans'))).toEqual(['2026-11-01T00-00-00-000Z']);
  });
});
