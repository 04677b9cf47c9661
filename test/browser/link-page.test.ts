// Share links in a real browser (docs/API.md "Share links"): Debian's headless Chromium, driven by
// playwright-core, opens the pages of a server running in this process. The pages must work with
// JavaScript off, so every browser context here has it off, except the one that watches the
// console for CSP violations (page.evaluate works either way: it does not go through the page).
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import {
  type Browser,
  type BrowserContext,
  type BrowserContextOptions,
  type Page,
  type Response,
} from 'playwright-core';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { Link } from '../../src/shared/types.js';
import {
  createShareWithContent,
  expectStatus,
  get,
  post,
  sha256hex,
  upload,
} from '../helpers/http.js';
import { launchChromium } from '../helpers/browser.js';
import { ADMIN, login, startServer, type TestServer } from '../helpers/server.js';

const NAME = 'rapport été 2026.bin';
/** A few hundred KiB of random bytes: 300 KiB and 123 bytes. */
const DATA = randomBytes(300 * 1024 + 123);
/** What page.ts's humanSize renders for DATA.length. */
const SIZE_TEXT = '300 KiB (307,323 bytes)';
const PHONE = { width: 390, height: 844 };

let srv: TestServer;
let base: string;
let admin: string;
let shareId: string;
let downloads: string;

beforeAll(async () => {
  srv = await startServer();
  base = srv.url;
  admin = await login(base, ADMIN.username, ADMIN.password);
  shareId = await createShareWithContent(base, admin, NAME, DATA, 3);
  downloads = await mkdtemp(join(tmpdir(), 'fshare-browser-'));
});

let launched: Promise<Browser> | undefined;

/**
 * The browser, launched by the first test that needs it. A missing chromium fails every test
 * with the reason (a throw in beforeAll would only mark them skipped).
 */
function browser(): Promise<Browser> {
  launched ??= launchChromium();
  return launched;
}

const contexts: BrowserContext[] = [];

/** A fresh browser profile: downloads accepted, JavaScript off unless asked for. */
async function newContext(options: BrowserContextOptions = {}): Promise<BrowserContext> {
  const ctx = await (
    await browser()
  ).newContext({ acceptDownloads: true, javaScriptEnabled: false, ...options });
  contexts.push(ctx);
  return ctx;
}

afterEach(async () => {
  await Promise.all(contexts.splice(0).map((ctx) => ctx.close()));
});

afterAll(async () => {
  await launched?.then(
    (b) => b.close(),
    () => undefined,
  );
  await srv?.close();
  if (downloads) await rm(downloads, { recursive: true, force: true });
});

/** Creates a link through the API, as the share's owner. */
async function createLink(
  share: string,
  json: Record<string, unknown> = {},
): Promise<Link & { url: string }> {
  const res = await post(base, `/files/${share}/links`, { token: admin, json });
  expectStatus(res, 201);
  const link = res.body as Link & { url: string };
  expect(link.url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/l\/[A-Za-z0-9_-]{22,}$/);
  return link;
}

async function linkState(id: string): Promise<Link> {
  const res = await get(base, `/links/${id}`, { token: admin });
  expectStatus(res, 200);
  return res.body as Link;
}

/** The link's token, the last part of its URL. */
const tokenOf = (url: string) => new URL(url).pathname.split('/').pop()!;

/** Opens a page and returns the response of its document. */
async function open(page: Page, url: string): Promise<Response> {
  const res = await page.goto(url);
  expect(res, `no response for ${url}`).not.toBeNull();
  return res!;
}

/** The page's <dl> as {Size: …, "SHA-256": …, …}. */
async function details(page: Page): Promise<Record<string, string>> {
  const keys = await page.locator('dl > dt').allTextContents();
  const values = await page.locator('dl > dd').allTextContents();
  expect(values.length).toBe(keys.length);
  return Object.fromEntries(keys.map((k, i) => [k, values[i]!]));
}

/** Clicks the Download button and returns the saved file and the name the browser offered. */
async function download(page: Page): Promise<{ name: string; bytes: Buffer }> {
  const [d] = await Promise.all([page.waitForEvent('download'), page.click('#download')]);
  expect(await d.failure(), 'the download failed').toBeNull();
  const file = join(downloads, randomUUID());
  await d.saveAs(file);
  return { name: d.suggestedFilename(), bytes: await readFile(file) };
}

/** Submits the password form; returns the response of the document shown after it. */
async function submit(page: Page): Promise<Response> {
  const [res] = await Promise.all([
    // The final document: the POST's own answer, or the GET its 303 leads to.
    page.waitForResponse(
      (r) =>
        r.request().isNavigationRequest() &&
        r.request().frame() === page.mainFrame() &&
        (r.status() < 300 || r.status() >= 400),
    ),
    page.waitForEvent('load'),
    page.click('button[type="submit"]'),
  ]);
  return res;
}

describe('a share link in Chromium', () => {
  it('shows the file and downloads exactly its bytes, with JavaScript off', async () => {
    const link = await createLink(shareId);
    const page = await (await newContext()).newPage();
    const res = await open(page, link.url);
    expect(res.status()).toBe(200);
    expect(res.headers()['content-type']).toBe('text/html; charset=utf-8');
    expect(await page.title()).toBe(NAME);
    expect(await page.textContent('#name')).toBe(NAME);
    expect(await details(page)).toEqual({
      Size: SIZE_TEXT,
      'SHA-256': sha256hex(DATA),
      Expires: 'never',
      'Downloads left': 'no limit',
    });
    expect(await page.getAttribute('#download', 'href')).toBe(
      `?download&sha256=${sha256hex(DATA)}`,
    );
    expect(await page.isVisible('#download')).toBe(true);

    const got = await download(page);
    expect(got.bytes.length).toBe(DATA.length);
    expect(sha256hex(got.bytes)).toBe(sha256hex(DATA));
    // Downloading leaves the page where it is; the page view did not count, the download did.
    expect(page.url()).toBe(link.url);
    expect(await page.textContent('#name')).toBe(NAME);
    expect(await linkState(link.id)).toMatchObject({ downloads: 1, state: 'active' });
  });

  // Names whose characters are all in ISO-8859-1 (é, ï) and names beyond it (CJK, emoji):
  // the header has to carry both kinds so that Chromium offers the name unchanged.
  describe('offers the download under the share’s file name', () => {
    const names = [NAME, 'naïve café.pdf', '日本語 rapport.bin', 'emoji 😀 notes.txt'];
    for (const name of names) {
      it(JSON.stringify(name), async () => {
        const bytes = randomBytes(4096);
        const share =
          name === NAME ? shareId : await createShareWithContent(base, admin, name, bytes);
        const link = await createLink(share);
        const page = await (await newContext()).newPage();
        expect((await open(page, link.url)).status()).toBe(200);
        expect(await page.textContent('#name')).toBe(name);
        const got = await download(page);
        expect(sha256hex(got.bytes)).toBe(sha256hex(name === NAME ? DATA : bytes));
        expect(got.name, 'the file name Chromium offers').toBe(name);
      });
    }
  });

  // An RLM in a name (accepted: only controls and bidi embeddings, overrides and isolates are
  // refused) was on the page and in the name Chromium offered, invisible: "invoice\u200Fexe.pdf"
  // read as "invoiceexe.pdf". Invisible format characters are now "_" in both.
  it('shows and offers invisible format characters in a name as "_"', async () => {
    const bytes = randomBytes(2048);
    const share = await createShareWithContent(base, admin, 'invoice\u200Fexe\u200B.pdf', bytes);
    const link = await createLink(share);
    const page = await (await newContext()).newPage();
    expect((await open(page, link.url)).status()).toBe(200);
    expect(await page.textContent('#name')).toBe('invoice_exe_.pdf');
    expect(await page.title()).toBe('invoice_exe_.pdf');
    const got = await download(page);
    expect(sha256hex(got.bytes)).toBe(sha256hex(bytes));
    expect(got.name, 'the file name Chromium offers').toBe('invoice_exe_.pdf');
  });

  it('a link with one download: after it, the page and ?download answer 410', async () => {
    const link = await createLink(shareId, { max_downloads: 1 });
    const page = await (await newContext()).newPage();
    expect((await open(page, link.url)).status()).toBe(200);
    expect((await details(page))['Downloads left']).toBe('1');

    const got = await download(page);
    expect(sha256hex(got.bytes)).toBe(sha256hex(DATA));

    const reloaded = await page.reload();
    expect(reloaded?.status()).toBe(410);
    expect(reloaded?.headers()['content-security-policy']).toContain("default-src 'none'");
    expect(await page.locator('#name').count()).toBe(0);
    expect(await page.locator('#download').count()).toBe(0);
    expect(await page.textContent('#message')).toMatch(/download limit/);

    const direct = await open(page, `${link.url}?download`);
    expect(direct.status()).toBe(410);
    expect(direct.headers()['content-type']).toBe('text/html; charset=utf-8');
    expect(await page.textContent('#message')).toMatch(/download limit/);

    expect(await linkState(link.id)).toMatchObject({
      downloads: 1,
      downloads_left: 0,
      state: 'used-up',
    });
  });

  // The page showed one version's sha256 ("check the download with sha256sum"), but a share
  // replaced before the click was downloaded as its new bytes, under the sha256 the page gave.
  // The button now asks for the content the page showed: the click shows a 412 page saying the
  // file was replaced, nothing is saved and nothing counted; the reloaded page gives the new one.
  it('a share replaced after its page was shown: the click says so instead of saving other bytes', async () => {
    const first = randomBytes(5_000);
    const second = randomBytes(6_000);
    const share = await createShareWithContent(base, admin, 'replaced.bin', first);
    const link = await createLink(share);
    const page = await (await newContext()).newPage();
    expect((await open(page, link.url)).status()).toBe(200);
    expect((await details(page))['SHA-256']).toBe(sha256hex(first));
    await upload(base, admin, share, second, 1, 'PUT');

    let saved = false;
    page.on('download', () => {
      saved = true;
    });
    const [res] = await Promise.all([
      page.waitForResponse((r) => r.request().isNavigationRequest()),
      page.click('#download'),
    ]);
    expect(res.status()).toBe(412);
    await page.waitForSelector('#message');
    expect(await page.textContent('#message')).toMatch(/replaced after its page was shown/);
    expect(saved).toBe(false);
    expect((await linkState(link.id)).downloads).toBe(0);

    expect((await open(page, link.url)).status()).toBe(200);
    expect((await details(page))['SHA-256']).toBe(sha256hex(second));
    const got = await download(page);
    expect(sha256hex(got.bytes)).toBe(sha256hex(second));
    expect((await linkState(link.id)).downloads).toBe(1);
  });

  it('a link past its expiry answers 410 with the expired page', async () => {
    const link = await createLink(shareId, { expires_in: 1 });
    // The server's clock decides: wait until the API says the link has expired.
    await expect
      .poll(async () => (await linkState(link.id)).state, { timeout: 30_000, interval: 100 })
      .toBe('expired');
    const page = await (await newContext()).newPage();
    const res = await open(page, link.url);
    expect(res.status()).toBe(410);
    expect(await page.locator('#name').count()).toBe(0);
    expect(await page.locator('#download').count()).toBe(0);
    expect(await page.textContent('#message')).toMatch(/expired/);

    const direct = await open(page, `${link.url}?download`);
    expect(direct.status()).toBe(410);
    expect(await page.textContent('#message')).toMatch(/expired/);
    expect((await linkState(link.id)).downloads).toBe(0);
  });

  it('a password link: the form, a wrong password, then the page and the download', async () => {
    const password = 'correct horse é 🐎';
    const link = await createLink(shareId, { password });
    const ctx = await newContext();
    const page = await ctx.newPage();

    const first = await open(page, link.url);
    expect(first.status()).toBe(401);
    expect(await page.locator('#name').count()).toBe(0);
    expect(await page.locator('#download').count()).toBe(0);
    expect(await page.locator('form[method="post"] input#password[type="password"]').count()).toBe(
      1,
    );
    expect(await page.locator('#wrong').count()).toBe(0);
    // The page gives nothing away before the password.
    expect(await page.content()).not.toContain(sha256hex(DATA));

    await page.fill('#password', 'not the password');
    const wrong = await submit(page);
    expect(wrong.status()).toBe(401);
    expect(wrong.request().method()).toBe('POST');
    expect(await page.isVisible('#wrong')).toBe(true);
    expect(await page.locator('#name').count()).toBe(0);

    await page.fill('#password', password);
    const right = await submit(page);
    // Post/redirect/get: the page itself, at the link's URL, unlocked by a cookie.
    expect(right.status()).toBe(200);
    expect(right.request().method()).toBe('GET');
    expect(page.url()).toBe(link.url);
    expect(await page.textContent('#name')).toBe(NAME);
    expect((await details(page))['SHA-256']).toBe(sha256hex(DATA));
    const cookie = (await ctx.cookies()).find((c) => c.name === `fshare_link_${link.id}`);
    expect(cookie).toMatchObject({
      path: `/l/${tokenOf(link.url)}`,
      httpOnly: true,
      sameSite: 'Strict',
    });

    const got = await download(page);
    expect(got.bytes.length).toBe(DATA.length);
    expect(sha256hex(got.bytes)).toBe(sha256hex(DATA));
    expect((await linkState(link.id)).downloads).toBe(1);

    // Another browser, without the cookie, still gets the form.
    const other = await (await newContext()).newPage();
    expect((await open(other, link.url)).status()).toBe(401);
    expect(await other.locator('#password').count()).toBe(1);
  });

  // A used-up password link showed its password form, and the password, once typed, led to the
  // 410 page: the browser now shows that page at once, and no form to type a password into.
  it('a used-up password link shows its 410 page, not the password form', async () => {
    const link = await createLink(shareId, { password: 'pw', max_downloads: 1 });
    const unlocked = await post(base, `/l/${tokenOf(link.url)}?download`, {
      body: 'password=pw',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expectStatus(unlocked, 200);
    expect(sha256hex(unlocked.buf)).toBe(sha256hex(DATA));
    const page = await (await newContext()).newPage();
    for (const url of [link.url, `${link.url}?download`]) {
      const res = await open(page, url);
      expect(res.status(), url).toBe(410);
      expect(await page.locator('#password').count(), url).toBe(0);
      expect(await page.locator('form').count(), url).toBe(0);
      expect(await page.textContent('#message'), url).toMatch(/download limit/);
    }
    expect((await linkState(link.id)).downloads).toBe(1);
  });

  it('fits a phone screen without horizontal scrolling', async () => {
    const longName = `${'quarterly-report-without-any-space-'.repeat(5)}été.tar.gz`;
    const longShare = await createShareWithContent(base, admin, longName, randomBytes(2048));
    const usedUp = await createLink(shareId, { max_downloads: 1 });
    expectStatus(await get(base, `/l/${tokenOf(usedUp.url)}?download`), 200);
    const pages = [
      { what: 'the share page', url: (await createLink(shareId)).url, status: 200 },
      { what: 'a long file name', url: (await createLink(longShare)).url, status: 200 },
      {
        what: 'the password form',
        url: (await createLink(shareId, { password: 'pw' })).url,
        status: 401,
      },
      { what: 'the used-up page', url: usedUp.url, status: 410 },
    ];
    const ctx = await newContext({
      viewport: PHONE,
      isMobile: true,
      hasTouch: true,
      deviceScaleFactor: 3,
    });
    const page = await ctx.newPage();
    for (const { what, url, status } of pages) {
      expect((await open(page, url)).status(), what).toBe(status);
      // The viewport meta tag makes the layout as wide as the phone (else 980 px).
      expect(await page.evaluate('window.innerWidth'), what).toBe(PHONE.width);
      const scrollWidth = await page.evaluate('document.documentElement.scrollWidth');
      expect(scrollWidth, `${what}: scrollWidth`).toBeLessThanOrEqual(PHONE.width);
      if (status === 200) {
        const box = await page.locator('#download').boundingBox();
        expect(box, what).not.toBeNull();
        expect(box!.x, what).toBeGreaterThanOrEqual(0);
        expect(box!.x + box!.width, what).toBeLessThanOrEqual(PHONE.width);
      }
    }
  });

  // An .html share is anyone's markup on the server's own origin, where the link pages and their
  // grant cookies live. Content-Disposition makes Chromium save it; shown inline anyway (here a
  // proxy drops that header), it ran its script as the server's origin: found without a
  // sandboxing Content-Security-Policy on content. The sandbox must not stop the download.
  it('an .html share is saved, and shown inline anyway runs no script', async () => {
    const markup = Buffer.from(
      '<!doctype html><title>inert</title><script>document.title = "ran as " + origin</script>',
    );
    const link = await createLink(await createShareWithContent(base, admin, 'page.html', markup));
    const ctx = await newContext({ javaScriptEnabled: true });
    const page = await ctx.newPage();

    // As served: a download of exactly its bytes (page.goto fails: "Download is starting").
    const [saved] = await Promise.all([
      page.waitForEvent('download'),
      page.goto(`${link.url}?download`).catch(() => null),
    ]);
    expect(await saved.failure(), 'the download failed').toBeNull();
    expect(saved.suggestedFilename()).toBe('page.html');
    const file = join(downloads, randomUUID());
    await saved.saveAs(file);
    expect((await readFile(file)).equals(markup)).toBe(true);

    // Through a proxy that drops Content-Disposition: shown, and its script does not run.
    await page.route('**/l/**', async (route) => {
      const res = await route.fetch();
      const headers = { ...res.headers() };
      delete headers['content-disposition'];
      await route.fulfill({ response: res, headers });
    });
    const shown = await open(page, `${link.url}?download`);
    expect(shown.status()).toBe(200);
    expect(shown.headers()['content-disposition']).toBeUndefined();
    expect(await page.title()).toBe('inert');
  });

  // A ?download that fails after its headers were chosen (here a Range past the end, 416) kept
  // Content-Disposition on its error page: Chromium took the page for a download, which then
  // failed, and the page never showed. It is now shown, saying what went wrong.
  it('a ?download refused with 416 shows its error page, not a failed download', async () => {
    const link = await createLink(shareId);
    const ctx = await newContext({ extraHTTPHeaders: { range: `bytes=${DATA.length}-` } });
    const page = await ctx.newPage();
    const res = await open(page, `${link.url}?download`);
    expect(res.status()).toBe(416);
    expect(await page.locator('#message').textContent()).toMatch(/cannot be satisfied/);
  });

  it('CSP: no script runs, and the one inline style is allowed by its hash', async () => {
    const link = await createLink(shareId);
    const used = await createLink(shareId, { max_downloads: 1 });
    expectStatus(await get(base, `/l/${tokenOf(used.url)}?download`), 200);
    const locked = await createLink(shareId, { password: 'pw' });

    const ctx = await newContext({ javaScriptEnabled: true });
    const page = await ctx.newPage();
    const errors: string[] = [];
    page.on('console', (m) => {
      if (m.type() === 'error') errors.push(m.text());
    });
    page.on('pageerror', (err) => errors.push(String(err)));
    const cspErrors = () => errors.filter((e) => /Content Security Policy|Refused to/i.test(e));

    const res = await open(page, link.url);
    expect(res.status()).toBe(200);
    const headers = res.headers();
    const csp = headers['content-security-policy'];
    expect(csp).toContain("default-src 'none'");
    expect(csp).toMatch(/style-src 'sha256-[A-Za-z0-9+/]{43}='/);
    expect(csp).not.toMatch(/script-src|unsafe-inline|unsafe-eval/);
    expect(headers['referrer-policy']).toBe('no-referrer');
    expect(headers['x-frame-options']).toBe('DENY');
    expect(headers['cache-control']).toBe('no-store');
    // The inline style applied (the button's accent colour, the card's corners): its hash matched.
    expect(
      await page.evaluate(`getComputedStyle(document.getElementById('download')).backgroundColor`),
    ).toBe('rgb(9, 105, 218)');
    expect(
      await page.evaluate(`getComputedStyle(document.querySelector('main')).borderTopLeftRadius`),
    ).toBe('12px');
    expect(errors, 'console errors on the share page').toEqual([]);

    // A script put into the page does not run, and Chromium reports the violation.
    await page.evaluate(`{
      const s = document.createElement('script');
      s.textContent = "document.title = 'script ran'";
      document.head.append(s);
    }`);
    expect(await page.title()).toBe(NAME);
    await expect.poll(() => cspErrors().length).toBeGreaterThan(0);
    expect(cspErrors().join('\n')).toMatch(/script/i);

    // The other pages carry the same policy and their style applies too. Their status (401,
    // 410) shows as a "Failed to load resource" console error; nothing may be about the CSP.
    for (const { url, status } of [
      { url: locked.url, status: 401 },
      { url: used.url, status: 410 },
    ]) {
      errors.length = 0;
      const r = await open(page, url);
      expect(r.status()).toBe(status);
      expect(r.headers()['content-security-policy']).toBe(csp);
      expect(
        await page.evaluate(`getComputedStyle(document.querySelector('main')).borderTopLeftRadius`),
      ).toBe('12px');
      expect(cspErrors(), `CSP errors on ${url}`).toEqual([]);
    }
  });
});
