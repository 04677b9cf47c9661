// Metadata durability: changes are acknowledged only once appended and fsynced to db.journal; a
// start replays the journal over db.json and ignores a line cut short by a crash.
import { appendFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, expect, it } from 'vitest';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';
import { createShare, get, getShare } from '../helpers/http.js';

const servers: TestServer[] = [];
afterAll(async () => {
  for (const s of servers) await s.close().catch(() => undefined);
});

it('acknowledged changes are in the journal at once, and a torn last line is ignored on start', async () => {
  const first = await startServer();
  servers.push(first);
  const token = await login(first.url, ADMIN.username, ADMIN.password);
  const id = await createShare(first.url, token, 'journalled.txt');

  // Acknowledged means durable: the share is in the journal before the server stops.
  const journal = join(first.dataDir, 'db.journal');
  expect(await readFile(journal, 'utf8')).toContain(id);

  // Simulate a crash after the stop: a half-written entry at the journal's end.
  await first.server.close();
  expect(await readFile(join(first.dataDir, 'db.json'), 'utf8')).toContain(id);
  await appendFile(journal, '{"seq": 999999, "op": "deleteSha');

  const second = await startServer({ dataDir: first.dataDir });
  servers.push(second);
  expect(await getShare(second.url, token, id)).toMatchObject({ file_name: 'journalled.txt' });
  const list = await get(second.url, '/files', { token });
  expect((list.body as { data: { share_id: string }[] }).data.map((s) => s.share_id)).toEqual([id]);
  // The start folded everything into db.json and began an empty journal.
  expect(await readFile(journal, 'utf8')).toBe('');
});
