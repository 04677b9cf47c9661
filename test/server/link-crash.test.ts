// Share-link download counts under SIGKILL (issue 13: "the count is atomic under concurrency and
// durable across restarts"), through the real binary and its FSHARE_FAULT hook.
import { createHash, randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { createShareWithContent, request } from '../helpers/http.js';
import { kill9, serve, stop, type Running, serveRoot } from '../helpers/serve.js';
import { ADMIN, login } from '../helpers/server.js';

const DATA = randomBytes(300_000);
const SHA = createHash('sha256').update(DATA).digest('hex');

const dirIn = serveRoot('link-crash');

let n = 0;
/** A data directory with one share and one link (max downloads `max`); the server is stopped. */
async function prepare(max: number) {
  const dir = dirIn(`d${n++}`);
  const first = await serve(dir);
  const token = await login(first.url, ADMIN.username, ADMIN.password);
  const id = await createShareWithContent(first.url, token, 'counted.bin', DATA);
  const made = await request(first.url, 'POST', `/files/${id}/links`, {
    token,
    json: { max_downloads: max },
  });
  expect(made.status).toBe(201);
  const path = new URL(made.body.url as string).pathname;
  await stop(first);
  return { dir, token, linkId: made.body.id as string, path };
}

const download = (url: string, path: string) => request(url, 'GET', `${path}?download`);

async function linkState(running: Running, token: string, linkId: string) {
  const res = await request(running.url, 'GET', `/links/${linkId}`, { token });
  expect(res.status).toBe(200);
  return res.body as { downloads: number; state: string };
}

describe('share-link download counts survive SIGKILL', () => {
  it('a count is durable before the first header: killed right after counting, the restarted server still has it', async () => {
    const { dir, token, linkId, path } = await prepare(2);
    const armed = await serve(dir, { FSHARE_FAULT: 'link.after-count' });
    const cut = await download(armed.url, path).catch((err: Error) => err);
    // The process died before answering: the client got no bytes at all.
    expect(cut).toBeInstanceOf(Error);
    expect(await armed.exited).toMatchObject({ signal: 'SIGKILL' });

    const again = await serve(dir);
    expect(await linkState(again, token, linkId)).toMatchObject({ downloads: 1 });
    const ok = await download(again.url, path);
    expect(ok.status).toBe(200);
    expect(createHash('sha256').update(ok.buf).digest('hex')).toBe(SHA);
    expect((await download(again.url, path)).status).toBe(410);
    await stop(again);
  }, 60_000);

  it('a count torn by a crash mid-write never happened: the restarted server gives the full allowance', async () => {
    const { dir, token, linkId, path } = await prepare(1);
    // The count is the first change this server writes: the crash tears its journal line.
    const armed = await serve(dir, { FSHARE_FAULT: 'journal.mid-write' });
    const cut = await download(armed.url, path).catch((err: Error) => err);
    expect(cut).toBeInstanceOf(Error);
    expect(await armed.exited).toMatchObject({ signal: 'SIGKILL' });

    const again = await serve(dir);
    expect(await linkState(again, token, linkId)).toMatchObject({
      downloads: 0,
      state: 'active',
    });
    const ok = await download(again.url, path);
    expect(ok.status).toBe(200);
    expect(ok.buf.equals(DATA)).toBe(true);
    expect((await download(again.url, path)).status).toBe(410);
    await stop(again);
  }, 60_000);

  it('of 30 simultaneous downloads of a 5-download link, exactly 5 get the bytes, and a SIGKILL then keeps the count at 5', async () => {
    const { dir, token, linkId, path } = await prepare(5);
    const running = await serve(dir);
    const answers = await Promise.all(
      Array.from({ length: 30 }, (_, i) =>
        request(running.url, 'GET', `${path}?download`, {
          // Different client addresses: no request is a resume of another's download.
          localAddress: `127.0.0.${2 + i}`,
        }),
      ),
    );
    const served = answers.filter((a) => a.status === 200);
    expect(served).toHaveLength(5);
    for (const a of served) expect(a.buf.equals(DATA)).toBe(true);
    expect(answers.filter((a) => a.status === 410)).toHaveLength(25);
    await kill9(running);

    const again = await serve(dir);
    expect(await linkState(again, token, linkId)).toMatchObject({
      downloads: 5,
      state: 'used-up',
    });
    expect((await download(again.url, path)).status).toBe(410);
    await stop(again);
  }, 60_000);
});
