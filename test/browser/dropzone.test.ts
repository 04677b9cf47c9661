// A real third-party client of the chunk protocol: Dropzone.js (the library whose dz* fields the
// protocol carries), in Debian's headless Chromium, uploading to a server running in this
// process from a page of another origin (CORS, the Authorization preflight). Dropzone is given
// only what docs/API.md tells a page author: the URL, the token, paramName "upload", chunking.
import { createHash } from 'node:crypto';
import { createRequire } from 'node:module';
import type { Browser, Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { content, createShare, getShare } from '../helpers/http.js';
import { launchChromium } from '../helpers/browser.js';
import { ADMIN, login, startServer, storedUploads, type TestServer } from '../helpers/server.js';

const DROPZONE = createRequire(import.meta.url).resolve('dropzone/dist/min/dropzone.min.js');

let srv: TestServer;
let admin: string;
let browser: Browser | undefined;

beforeAll(async () => {
  srv = await startServer();
  admin = await login(srv.url, ADMIN.username, ADMIN.password);
});

afterAll(async () => {
  await browser?.close();
  await srv?.close();
});

/** The bytes the page makes for `seed`: the same generator on both sides, no transfer needed. */
function bytesOf(seed: number, size: number): Buffer {
  const out = Buffer.alloc(size);
  let x = seed >>> 0;
  for (let i = 0; i < size; i++) {
    x = (Math.imul(x, 1103515245) + 12345) >>> 0;
    out[i] = x >>> 24;
  }
  return out;
}

interface Outcome {
  ok: boolean;
  message?: string;
  status?: number;
}

/** A page holding Dropzone; every content request it makes is counted. */
async function dropzonePage(): Promise<{ page: Page; chunks: string[] }> {
  browser ??= await launchChromium();
  const page = await browser.newPage();
  const chunks: string[] = [];
  page.on('request', (r) => {
    if (/\/content$/.test(r.url())) chunks.push(r.method());
  });
  await page.setContent('<!doctype html><form id="dz" class="dropzone"></form>');
  await page.addScriptTag({ path: DROPZONE });
  return { page, chunks };
}

/** Has Dropzone upload `size` bytes of `seed` to `url`, as a page author would configure it. */
function dropzoneUpload(
  page: Page,
  options: { url: string; token: string; size: number; seed: number; method?: string },
): Promise<Outcome> {
  return page.evaluate(
    ({ url, token, size, seed, method }) => {
      const bytes = new Uint8Array(size);
      let x = seed >>> 0;
      for (let i = 0; i < size; i++) {
        x = (Math.imul(x, 1103515245) + 12345) >>> 0;
        bytes[i] = x >>> 24;
      }
      const w = globalThis as unknown as {
        Dropzone: {
          autoDiscover: boolean;
          new (
            el: string,
            o: object,
          ): {
            on(e: string, f: (...a: unknown[]) => void): void;
            addFile(f: File): void;
          };
        };
      };
      w.Dropzone.autoDiscover = false;
      return new Promise<Outcome>((resolve) => {
        const dz = new w.Dropzone('#dz', {
          url,
          method: method ?? 'post',
          headers: { Authorization: `Bearer ${token}` },
          paramName: 'upload',
          chunking: true,
          forceChunking: true,
          parallelChunkUploads: true,
          chunkSize: 1024 * 1024,
          maxFilesize: 1024,
        });
        dz.on('success', () => resolve({ ok: true }));
        dz.on('error', (_f, message, xhr) =>
          resolve({
            ok: false,
            message: typeof message === 'string' ? message : JSON.stringify(message),
            status: (xhr as { status?: number } | undefined)?.status,
          }),
        );
        dz.addFile(new File([bytes], 'dz.bin'));
      });
    },
    { ...options, method: options.method ?? 'post' },
  );
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');

describe('Dropzone.js uploads to fshare serve', () => {
  it('a file of 4 chunks sent in parallel arrives whole; a re-upload with PUT replaces it', async () => {
    const id = await createShare(srv.url, admin, 'dz.bin');
    const url = `${srv.url}/files/${id}/content`;
    const { page, chunks } = await dropzonePage();
    const size = 3 * 1024 * 1024 + 12_345;
    const first = await dropzoneUpload(page, { url, token: admin, size, seed: 1 });
    expect(first).toEqual({ ok: true });
    expect(chunks).toEqual(['POST', 'POST', 'POST', 'POST']);
    const data = bytesOf(1, size);
    expect((await content(srv.url, admin, id)).equals(data)).toBe(true);
    expect(await getShare(srv.url, admin, id)).toMatchObject({
      size,
      sha256: sha256(data),
      initialized: true,
    });
    expect(await storedUploads(srv, id)).toEqual([]);

    // A smaller file, one chunk (forceChunking still sends the dz fields), as a replace.
    const { page: again, chunks: putChunks } = await dropzonePage();
    const second = await dropzoneUpload(again, {
      url,
      token: admin,
      size: 5000,
      seed: 2,
      method: 'put',
    });
    expect(second).toEqual({ ok: true });
    expect(putChunks).toEqual(['PUT']);
    expect((await content(srv.url, admin, id)).equals(bytesOf(2, 5000))).toBe(true);
  });

  it('a refusal reaches the page as the JSON message, and the share is untouched', async () => {
    const id = await createShare(srv.url, admin, 'refused.bin');
    const { page } = await dropzonePage();
    // A token that is not one: every chunk is refused with 401.
    const outcome = await dropzoneUpload(page, {
      url: `${srv.url}/files/${id}/content`,
      token: 'not-a-token',
      size: 2 * 1024 * 1024,
      seed: 3,
    });
    expect(outcome.ok).toBe(false);
    expect(outcome.status).toBe(401);
    expect(outcome.message).toContain('The token is invalid, expired or revoked');
    expect(await getShare(srv.url, admin, id)).toMatchObject({ initialized: false });
    expect(await storedUploads(srv, id)).toEqual([]);
  });
});
