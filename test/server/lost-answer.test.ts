// A publish whose answer from PostgreSQL was lost. The promise: content a share names is never
// removed, whatever the database answered. Found broken: with the connection holding the share's
// lock cut after PostgreSQL had committed the UPDATE that names the new content, but before its
// answer reached the server (a network cut, a pooler, a terminated backend at that moment), the
// server took the publish for failed and removed the new content: the upload answered 503 and
// GET /files/<id> named a sha256 and size whose content was gone (GET of it: 500). Only
// PostgreSQL has a connection whose answer can be lost.
import { randomBytes, randomUUID } from 'node:crypto';
import { createServer as createTcpServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { holdAt } from '../../src/server/faults.js';
import type { FshareServer } from '../../src/server/index.js';
import {
  content,
  createShare,
  createShareWithContent,
  expectFail,
  expectStatus,
  getShare,
  sendChunk,
  sha256hex,
  type Res,
} from '../helpers/http.js';
import { ADMIN, login, startServer, startSibling, type TestServer } from '../helpers/server.js';

/**
 * A TCP proxy in front of PostgreSQL. `cutNext(text)` arms it: the next statement sent with
 * `text` in it is forwarded, PostgreSQL's whole answer to it (up to ReadyForQuery, so it has
 * committed) is read and dropped, and the connection is cut on both sides; with `everything`,
 * every other connection is cut with it and new ones are refused until `restore()`.
 */
async function startCuttingProxy(database: string) {
  const target = new URL(database);
  let armed: { text: string; done: () => void; everything: boolean } | undefined;
  let holding: { text: string; done: (release: () => Promise<boolean>) => void } | undefined;
  let refusing = false;
  const sockets = new Set<Socket>();
  const server: Server = createTcpServer((client) => {
    if (refusing) return void client.destroy();
    const upstream = connect(Number(target.port), target.hostname);
    sockets.add(client).add(upstream);
    let cutting: { done: () => void; everything: boolean } | undefined;
    let answer = Buffer.alloc(0);
    let held: Buffer | undefined;
    const cut = () => {
      client.destroy();
      if (!held) upstream.destroy();
    };
    client.on('data', (data: Buffer) => {
      if (held) return;
      if (holding && data.includes(holding.text)) {
        // Held on its way: the server's side is cut, PostgreSQL's kept open, the statement sent
        // on when released (if PostgreSQL still listens then).
        const { done } = holding;
        holding = undefined;
        held = data;
        client.destroy();
        done(() => {
          if (upstream.destroyed || upstream.readableEnded) return Promise.resolve(false);
          return new Promise<boolean>((ran) => {
            upstream.once('data', () => ran(true));
            upstream.once('close', () => ran(false));
            upstream.write(held!);
          });
        });
        return;
      }
      if (armed && data.includes(armed.text)) {
        cutting = armed;
        armed = undefined;
      }
      upstream.write(data);
    });
    upstream.on('data', (data: Buffer) => {
      if (!cutting) return void client.write(data);
      answer = Buffer.concat([answer, data]);
      // ReadyForQuery ('Z', length 5, status): PostgreSQL has answered the whole statement.
      const z = answer.length - 6;
      if (z >= 0 && answer[z] === 0x5a && answer.readInt32BE(z + 1) === 5) {
        if (cutting.everything) {
          refusing = true;
          for (const s of sockets) s.destroy();
        }
        cut();
        cutting.done();
      }
    });
    for (const s of [client, upstream]) {
      s.on('error', cut);
      s.on('close', () => {
        sockets.delete(s);
        cut();
      });
    }
  });
  await new Promise<void>((listening) => server.listen(0, '127.0.0.1', listening));
  const { port } = server.address() as { port: number };
  const url = new URL(database);
  url.host = `127.0.0.1:${port}`;
  return {
    url: url.toString(),
    cutNext(text: string, everything = false): Promise<void> {
      return new Promise((done) => (armed = { text, done, everything }));
    },
    /**
     * Holds the next statement with `text` in it before PostgreSQL has it, and cuts the
     * server's side. Resolves with `release`, which sends it on and resolves whether PostgreSQL
     * ran it (answered) or had closed the connection by then.
     */
    holdNext(text: string): Promise<() => Promise<boolean>> {
      return new Promise((done) => (holding = { text, done }));
    },
    restore() {
      refusing = false;
    },
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((closed) => server.close(closed));
    },
  };
}

describe('a publish whose answer from PostgreSQL was lost', () => {
  let own: TestServer;
  let proxy: Awaited<ReturnType<typeof startCuttingProxy>>;
  let other: FshareServer;
  let otherUrl: string;
  let t: string;
  beforeAll(async () => {
    own = await startServer();
    proxy = await startCuttingProxy(own.database!);
    // A server on the same database (through the proxy) and bucket.
    ({ server: other, url: otherUrl } = await startSibling(own, 'lost-answer', proxy.url));
    t = await login(otherUrl, ADMIN.username, ADMIN.password);
  }, 120_000);
  afterAll(async () => {
    await other?.close();
    await proxy?.close();
    await own?.close();
  });

  /**
   * Sends `upload`; where it publishes, under the share's lock, the connection that runs the
   * UPDATE naming the new content is cut once PostgreSQL has committed it and answered.
   */
  async function loseTheAnswer(upload: () => Promise<Res>, everything = false) {
    let cut: Promise<void> | undefined;
    const cancel = holdAt('publish.before-record', async () => {
      cut = proxy.cutNext('UPDATE fshare_shares', everything);
    });
    try {
      const res = await upload();
      expect(cut, 'the upload reached the point where it publishes').toBeDefined();
      await cut;
      return res;
    } finally {
      cancel();
    }
  }

  it('content a share names is never removed, even when the database answer to the publish was lost: the upload is answered 201 and its content downloads', async () => {
    const id = await createShare(otherUrl, t, 'lost-answer.bin');
    const data = randomBytes(5000);
    const dzuuid = randomUUID();
    const first = { dzuuid, index: 0, total: 2, data: data.subarray(0, 3000) };
    expectStatus(await sendChunk(otherUrl, t, id, first), 200);
    const res = await loseTheAnswer(() =>
      sendChunk(otherUrl, t, id, { dzuuid, index: 1, total: 2, data: data.subarray(3000) }),
    );
    // The content was published: the truthful answer is success.
    expectStatus(res, 201);
    expect(await getShare(own.direct, t, id)).toMatchObject({
      initialized: true,
      size: 5000,
      sha256: sha256hex(data),
    });
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
    expect((await content(otherUrl, t, id)).equals(data)).toBe(true);
  });

  it('content a share names is never removed, even when the database answer to the publish was lost: a one-chunk replace, which holds the uploads lock of its user on that connection too, is answered 201 and its content downloads', async () => {
    const id = await createShareWithContent(otherUrl, t, 'replaced.bin', randomBytes(1000));
    const data = randomBytes(3000);
    const res = await loseTheAnswer(() =>
      sendChunk(otherUrl, t, id, { dzuuid: randomUUID(), index: 0, total: 1, data }, 'PUT'),
    );
    // Nothing is read on the cut connection once the content is published.
    expectStatus(res, 201);
    expect(await getShare(own.direct, t, id)).toMatchObject({
      size: 3000,
      sha256: sha256hex(data),
    });
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
  });

  // A statement cut off on its way (the server's side of the connection gone, PostgreSQL's still
  // open) could reach PostgreSQL after the server had looked, found the share not naming the new
  // content, and removed it: the share would then name content that is gone. The backend is now
  // ended before the server looks, so nothing sent on it runs later.
  it('content a share names is never removed, even when the publish was cut off on its way and PostgreSQL could still receive it: the backend is ended before the server looks', async () => {
    const id = await createShare(otherUrl, t, 'in-transit.bin');
    const data = randomBytes(5000);
    const dzuuid = randomUUID();
    const first = { dzuuid, index: 0, total: 2, data: data.subarray(0, 3000) };
    expectStatus(await sendChunk(otherUrl, t, id, first), 200);
    let held: Promise<() => Promise<boolean>> | undefined;
    const cancel = holdAt('publish.before-record', async () => {
      held = proxy.holdNext('UPDATE fshare_shares');
    });
    let res: Res;
    try {
      res = await sendChunk(otherUrl, t, id, {
        dzuuid,
        index: 1,
        total: 2,
        data: data.subarray(3000),
      });
    } finally {
      cancel();
    }
    expect(held, 'the upload reached the point where it publishes').toBeDefined();
    // The share did not take the content, so the answer is the lost lock's 503.
    expectFail(res, 503);
    // The UPDATE arrives now: PostgreSQL must not run it.
    const release = await held!;
    expect(await release()).toBe(false);
    expect(await getShare(own.direct, t, id)).toMatchObject({ initialized: false });
    // The upload goes on: the same last chunk sent again completes it.
    expectStatus(
      await sendChunk(otherUrl, t, id, { dzuuid, index: 1, total: 2, data: data.subarray(3000) }),
      201,
    );
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
  });

  it('content a share names is never removed, even when the database answer to the publish was lost: with the database unreachable, the content stays and the answer says the outcome is unknown', async () => {
    const id = await createShare(otherUrl, t, 'unknown.bin');
    const data = randomBytes(4000);
    const dzuuid = randomUUID();
    expectStatus(
      await sendChunk(otherUrl, t, id, {
        dzuuid,
        index: 0,
        total: 2,
        data: data.subarray(0, 1000),
      }),
      200,
    );
    let res: Res;
    try {
      res = await loseTheAnswer(
        () => sendChunk(otherUrl, t, id, { dzuuid, index: 1, total: 2, data: data.subarray(1000) }),
        true,
      );
    } finally {
      proxy.restore();
    }
    expectFail(res, 503);
    expect(res.body).toMatchObject({
      message: expect.stringMatching(/whether it was made is unknown/),
    });
    // PostgreSQL had committed the UPDATE: the share names the new content, which is there.
    expect(await getShare(own.direct, t, id)).toMatchObject({
      size: 4000,
      sha256: sha256hex(data),
    });
    expect((await content(own.direct, t, id)).equals(data)).toBe(true);
  });
});
