import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto';
import express, { Router, type Request, type Response } from 'express';
import type { Link } from '../../shared/types.js';
import { isoNoZone } from '../../shared/dates.js';
import { need } from '../auth.js';
import type { Context } from '../context.js';
import { asHttpError, Errors, HttpError } from '../errors.js';
import { isExpired } from '../expiry.js';
import { fault, pausePoint } from '../faults.js';
import { paginate, route } from '../http.js';
import { messagePage, PAGE_HEADERS, passwordPage, sharePage } from '../page.js';
import {
  blobOf,
  LinkUsedUpError,
  MissingRecordError,
  type LinkRecord,
  type ShareRecord,
} from '../store/index.js';
import {
  expiryField,
  maxDownloadsField,
  noJsonBody,
  onlyFields,
  optionalObject,
  passwordField,
} from '../validate.js';
import { clientAddress } from './auth.js';
import { sendContent, shownName } from './content.js';
import { findShare, isAdmin, refuseOrphan } from './shares.js';
import { isUuid } from '../../shared/ids.js';
import { giveBack, takePoint, ThrottledError } from '../throttle.js';

/** Resume windows are kept as seconds after this (2023-11-14), so they fit a 32-bit count. */
const WINDOW_EPOCH_S = 1_700_000_000;

/** How long a correct link password is remembered by the browser that gave it. */
const GRANT_SECONDS = 3600;
const TOKEN = /^[A-Za-z0-9_-]{22,128}$/;
/** The 404 of a token that names no link (any more). */
const LINK_GONE =
  'This link does not exist: it was revoked, or its share was deleted or has expired';

/**
 * Where a request's Range starts (0 without one): enough to tell a resume from a download. A
 * suffix range (`bytes=-5`) starts `size - 5` bytes in, as sendContent will answer it.
 */
function rangeStart(req: Request, size: number | null | undefined): number {
  const m = /^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)/i.exec(req.headers.range ?? '');
  if (!m) return 0;
  if (m[1] !== '') return Number(m[1]);
  if (m[2] === '' || typeof size !== 'number') return 0;
  return Math.max(0, size - Number(m[2]));
}

/** `?download` values that ask for the bytes, and those that ask for the page (case ignored). */
const DOWNLOAD_YES = new Set(['', '1', 'true', 'yes']);
const DOWNLOAD_NO = new Set(['0', 'false', 'no']);

/**
 * Whether a link request asks for the bytes: `?download` (empty, or 1, true, yes) does;
 * `?download=0` (or false, no) asks for the page, as without the key. Any other value, or the key
 * given twice, is a 400 that counts nothing: a download is counted only when one was asked for.
 */
function wantsDownload(req: Request): boolean {
  const value = req.query.download;
  if (value === undefined) return false;
  const v = typeof value === 'string' ? value.toLowerCase() : undefined;
  if (v !== undefined && DOWNLOAD_YES.has(v)) return true;
  if (v !== undefined && DOWNLOAD_NO.has(v)) return false;
  throw Errors.badRequest(
    'download takes no value, or 1, true or yes for the file, or 0, false or no for the page, given once',
  );
}

export const tokenHash = (token: string) => createHash('sha256').update(token).digest('hex');

type LinkState = Link['state'];

function stateOf(link: LinkRecord, share: ShareRecord | undefined, now: number): LinkState {
  if (!share || isExpired(share, now) || isExpired(link, now)) return 'expired';
  if (link.max_downloads !== null && link.downloads >= link.max_downloads) return 'used-up';
  return 'active';
}

/** The earlier of the link's and its share's expiry. */
function effectiveExpiry(link: LinkRecord, share: ShareRecord): string | null {
  const times = [link.expires, share.expires ?? null].filter((t): t is string => !!t);
  if (times.length === 0) return null;
  return times.reduce((a, b) => (Date.parse(a) <= Date.parse(b) ? a : b));
}

/**
 * `manage`: the link endpoints of signed-in users. `pages`: the public side, /l/<token>, mounted
 * before the caller is identified: a link is the capability, so whatever Authorization header
 * comes with it (a proxy's Basic credentials, an expired token) is not looked at.
 */
export function linkRoutes(ctx: Context): { manage: Router; pages: Router } {
  const { store, storage, passwords, clock, limits, linkKey, expiry } = ctx;
  const router = Router();
  const pages = Router();
  const usernames = async (id: string | null) =>
    id === null ? null : ((await store.getUserById(id))?.username ?? null);

  const linkJson = async (link: LinkRecord): Promise<Link> => {
    const share = await store.getShare(link.share_id);
    return {
      id: link.id,
      share_id: link.share_id,
      file_name: share?.file_name ?? null,
      created_by: await usernames(link.created_by),
      create_date: link.create_date,
      expires: share ? effectiveExpiry(link, share) : link.expires,
      max_downloads: link.max_downloads,
      downloads: link.downloads,
      downloads_left:
        link.max_downloads === null ? null : Math.max(0, link.max_downloads - link.downloads),
      has_password: link.password_hash !== null,
      state: stateOf(link, share, clock()),
    };
  };

  /** Only the share's owner (a signed-in user) or an administrator manages its links. */
  const checkManager = (req: Request, share: ShareRecord | undefined) => {
    if (!share || isExpired(share, clock())) throw Errors.shareNotFound();
    if (isAdmin(req)) return;
    if (share.owner_id === null || share.owner_id !== req.caller.userId)
      throw new HttpError(
        403,
        'Only the owner of the share or an administrator may manage its links',
      );
  };

  const findLink = async (req: Request) => {
    need(req, null, false);
    const link = await store.getLink(String(req.params.link));
    if (!link) throw Errors.linkNotFound();
    checkManager(req, await store.getShare(link.share_id));
    return link;
  };

  /**
   * Where links' URLs start: `--public-url` when given, else the request's scheme (http or https
   * only) and its Host, which index.ts has checked is a valid `host[:port]`; a request without one
   * (HTTP/1.0) gets the address it reached.
   */
  const baseUrl = (req: Request) => {
    if (ctx.publicUrl) return ctx.publicUrl.replace(/\/+$/, '');
    const scheme = req.protocol === 'https' ? 'https' : 'http';
    const { localAddress, localPort } = req.socket;
    const host =
      req.get('host') ||
      `${localAddress?.includes(':') ? `[${localAddress}]` : (localAddress ?? 'localhost')}:${localPort}`;
    return `${scheme}://${host}`;
  };

  route(router, '/files/:id/links', {
    post: async (req, res) => {
      need(req, null, false);
      const share = await findShare(req, ctx, 'READ');
      checkManager(req, share);
      await refuseOrphan(store, share);
      const body = await optionalObject(req);
      onlyFields(body, ['expires', 'expires_in', 'max_downloads', 'password']);
      const settings = await store.getSettings();
      const admin = isAdmin(req);
      const expiryCap = admin ? null : (settings.max_expiry ?? null);
      const downloadCap = admin ? null : (settings.max_downloads ?? null);
      const now = clock();
      const expires =
        expiryField(body, now, expiryCap) ??
        (expiryCap === null ? null : new Date(now + expiryCap * 1000).toISOString());
      const max_downloads = maxDownloadsField(body, downloadCap) ?? downloadCap;
      let password_hash: string | null = null;
      if ('password' in body && body.password !== null)
        password_hash = await passwords.hash(passwordField(body, 'password'));
      const token = randomBytes(24).toString('base64url');
      const link: LinkRecord = {
        id: randomBytes(8).toString('hex'),
        share_id: share.share_id,
        token_sha256: tokenHash(token),
        created_by: req.caller.userId,
        create_date: isoNoZone(new Date(now)),
        expires,
        max_downloads,
        downloads: 0,
        password_hash,
      };
      await store.addLink(link).catch((err: unknown) => {
        // The caller was deleted (on any server) while the link was being made: it would
        // outlive them, as no other of their links does, so it is not made.
        if (err instanceof MissingRecordError && err.kind === 'user') throw Errors.badToken();
        throw err;
      });
      const url = `${baseUrl(req)}/l/${token}`;
      res
        .status(201)
        .location(`/links/${link.id}`)
        .json({
          status: 'success',
          ...(await linkJson(link)),
          url,
          download_url: `${url}?download`,
        });
    },
    get: async (req, res) => {
      need(req, null, false);
      // Managing links needs no READ (as GET /links and DELETE /links/<id>): owner or ADMIN.
      const id = String(req.params.id);
      const share = isUuid(id) ? await store.getShare(id) : undefined;
      checkManager(req, share);
      const links = await store.listLinks(share!.share_id);
      res.json({ data: await Promise.all(links.map(linkJson)) });
    },
  });

  route(router, '/links', {
    get: async (req, res) => {
      need(req, null, false);
      await expiry.sweepDue();
      // One query, not one per link in the store: another user's many links must not slow this.
      const links = isAdmin(req)
        ? await store.listLinks()
        : await store.listOwnedLinks(req.caller.userId!);
      const page = await paginate(
        req,
        links.length,
        async (o, l) => links.slice(o, o + l),
        (l) => l,
      );
      res.json({ ...page, data: await Promise.all(page.data.map(linkJson)) });
    },
  });

  route(router, '/links/:link', {
    get: async (req, res) => {
      res.json(await linkJson(await findLink(req)));
    },
    delete: async (req, res) => {
      const link = await findLink(req);
      noJsonBody(req);
      await store.deleteLink(link.id);
      res.json({ status: 'success', message: 'Link revoked' });
    },
  });

  // --- The public side: /l/<token> (docs/API.md "Share links").

  const grantValue = (link: LinkRecord, exp: number) =>
    createHmac('sha256', linkKey)
      .update(`${link.id}\0${link.password_hash}\0${exp}`)
      .digest('base64url');

  const cookieName = (link: LinkRecord) => `fshare_link_${link.id}`;

  const hasGrant = (req: Request, link: LinkRecord): boolean => {
    const header = req.headers.cookie ?? '';
    const prefix = `${cookieName(link)}=`;
    for (const part of header.split(';')) {
      const item = part.trim();
      if (!item.startsWith(prefix)) continue;
      const [expText, mac] = item.slice(prefix.length).split('.');
      const exp = Number(expText);
      if (!Number.isSafeInteger(exp) || exp * 1000 < clock() || !mac) continue;
      const want = Buffer.from(grantValue(link, exp));
      const got = Buffer.from(mac);
      if (want.length === got.length && timingSafeEqual(want, got)) return true;
    }
    return false;
  };

  /**
   * The page's path as the browser sees it (behind a proxy that serves fshare under a path, with
   * that path), however the request spelled it (`/L/<token>`, `/l/<token>/`): the grant's cookie
   * is for this path, and unlocking leads back to it.
   */
  const pagePath = (token: string) => {
    const prefix = ctx.publicUrl ? new URL(ctx.publicUrl).pathname.replace(/\/+$/, '') : '';
    return `${prefix}/l/${token}`;
  };

  const grant = (req: Request, res: Response, link: LinkRecord, token: string) => {
    const exp = Math.floor(clock() / 1000) + GRANT_SECONDS;
    const secure = req.secure || (ctx.publicUrl?.startsWith('https:') ?? false);
    res.append(
      'Set-Cookie',
      `${cookieName(link)}=${exp}.${grantValue(link, exp)}; Path=${pagePath(token)}; Max-Age=${GRANT_SECONDS}; HttpOnly; SameSite=Strict${secure ? '; Secure' : ''}`,
    );
  };

  const guesses = ctx.limiter(
    'link-password',
    limits.linkPasswordFailures.points,
    limits.linkPasswordFailures.seconds,
  );

  /**
   * Link id, client address and content (its blob) of counted downloads → the end of their
   * resume window (a ranged request before it continues that download; content that replaced the
   * one counted is another download), kept in a limiter's store so that with a shared
   * database every server knows it and a resume may reach any of them. The entry's points hold
   * the window's end in seconds (after WINDOW_EPOCH_S, to stay a small integer) by the server's
   * clock; the store forgets it a little after the window, in real time.
   */
  const windowSeconds = Math.max(1, Math.ceil(limits.linkResumeWindowMs / 1000));
  const continuing = ctx.limiter('link-resume', 1, windowSeconds);
  const continuationKey = (link: LinkRecord, req: Request, blob: string) =>
    `${link.id}\0${clientAddress(req)}\0${blob}`;

  /**
   * Counts a download as its answer starts (docs/API.md, "Counting downloads"): a request for
   * bytes counts once, unless it is a range starting after byte 0 from the address of this
   * link's last counted download of the same content within limits.linkResumeWindowMs (it
   * resumes that download).
   */
  const continues = async (req: Request, link: LinkRecord, blob: string, start: number) => {
    if (start <= 0) return false;
    const seen = await continuing.get(continuationKey(link, req, blob));
    return seen !== null && (seen.consumedPoints + WINDOW_EPOCH_S) * 1000 >= clock();
  };

  const countDownload = async (req: Request, link: LinkRecord, blob: string, start: number) => {
    await pausePoint('link.before-count');
    if (!(await continues(req, link, blob, start))) {
      // A client gone before its answer starts (it gave up waiting for the storage, or reset
      // the connection) can be sent nothing, so its request spends no download.
      if (req.socket.destroyed || !req.socket.writable)
        throw new HttpError(400, 'The client went away before its download started');
      try {
        await store.countDownload(link.id);
        await fault('link.after-count');
      } catch (err) {
        if (err instanceof LinkUsedUpError)
          throw new HttpError(410, 'This link has reached its download limit');
        throw err;
      }
    }
    const until = Math.floor((clock() + limits.linkResumeWindowMs) / 1000) - WINDOW_EPOCH_S;
    await continuing.set(continuationKey(link, req, blob), until, windowSeconds + 60);
  };

  /** The link of a token, checked for expiry; the download limit is checked by the caller. */
  const resolve = async (req: Request, res: Response) => {
    const token = String(req.params.token);
    const link = TOKEN.test(token) ? await store.getLinkByTokenHash(tokenHash(token)) : undefined;
    // A share's links go with it when it is deleted or its expiry is swept (at once, normally):
    // the link is then unknown, and the message says what may have happened.
    if (!link) throw new HttpError(404, LINK_GONE);
    res.locals.linkId = link.id;
    const share = await store.getShare(link.share_id);
    // Deleted since the link was read (its links go with it): unknown, as a moment later.
    if (!share) throw new HttpError(404, LINK_GONE);
    if (stateOf(link, share, clock()) === 'expired')
      throw new HttpError(410, 'This link has expired');
    return { token, link, share };
  };

  /** The page itself: HTML unless JSON is preferred (curl, accepting anything, gets the page). */
  const wantsJsonPage = (req: Request) => req.accepts(['html', 'json']) === 'json';
  /** Errors and the password prompt: HTML only for a browser (text/html preferred). */
  const wantsHtmlError = (req: Request) => req.accepts(['json', 'html']) === 'html';

  /** Errors of the public side: a page for a browser, JSON for everything else. */
  const publicSide =
    (handler: (req: Request, res: Response) => Promise<void>) =>
    async (req: Request, res: Response) => {
      try {
        await handler(req, res);
      } catch (thrown) {
        const err = asHttpError(thrown);
        if (res.headersSent || !(err instanceof HttpError) || !wantsHtmlError(req)) throw err;
        const title =
          err.status === 404
            ? 'Link not found'
            : err.status === 410
              ? 'This link cannot be used any more'
              : 'This link cannot be opened right now';
        // A download that failed after setting its headers (412, 416): the page must not be
        // saved as the share's file (errorHandler does the same for JSON).
        res.removeHeader('Content-Disposition');
        res
          .status(err.status)
          .set(err.headers)
          .set(PAGE_HEADERS)
          .send(messagePage(title, err.message));
      }
    };

  const usedUp = (link: LinkRecord) =>
    link.max_downloads !== null && link.downloads >= link.max_downloads;

  /**
   * A link with no downloads left is gone, for the page and for HEAD and conditional requests too
   * (they count nothing, so they are checked here); only the resume of a counted download goes on.
   */
  const refuseUsedUp = async (
    req: Request,
    link: LinkRecord,
    share: ShareRecord,
    downloading: boolean,
  ) => {
    if (!usedUp(link)) return;
    // A client's look before it resumes, HEAD and the page as JSON (they count nothing), goes on
    // too, for the address whose counted download can still be resumed (found from outside:
    // `fshare get LINK --continue`, run again after its first run was cut, met a 410 for the
    // page, then for its HEAD, and could not resume). They tell that address nothing the
    // download did not. A browser's page stays 410: its button would download from byte 0.
    const look = downloading ? req.method === 'HEAD' : wantsJsonPage(req);
    const start = look ? 1 : downloading ? rangeStart(req, share.size) : 0;
    if (share.initialized && (await continues(req, link, blobOf(share), start))) return;
    throw new HttpError(410, 'This link has reached its download limit');
  };

  const download = async (req: Request, res: Response, link: LinkRecord, share: ShareRecord) => {
    if (!share.initialized) throw new HttpError(404, 'The file has not been uploaded yet');
    await refuseUsedUp(req, link, share, true);
    // Given twice, sha256 was an array and not looked at: other content was sent and counted.
    const { sha256 } = req.query;
    if (sha256 !== undefined && typeof sha256 !== 'string')
      throw Errors.badRequest('sha256 may be given only once');
    // One that is no sha256 at all (`%ff`, a cut copy) is the request's mistake, not a replaced
    // file: it was a 412 saying the file had been replaced.
    if (sha256 !== undefined && !/^[0-9a-f]{64}$/i.test(sha256))
      throw Errors.badRequest('sha256 must be 64 hexadecimal digits');
    res.set('Referrer-Policy', 'no-referrer');
    try {
      await sendContent(req, res, share, storage, store, {
        // Each download is counted: no cache may answer for the server.
        headers: { 'Cache-Control': 'no-store' },
        // The page's Download button names the content whose sha256 it showed.
        // Hex digits in either case, as people copy them (sha256sum prints lower case).
        sha256: sha256?.toLowerCase(),
        beforeBody: ({ start, blob }) => countDownload(req, link, blob, start),
      });
    } catch (err) {
      // The link revoked, or its share deleted, since the request found them: the link is gone
      // (not a missing user, share or content).
      if (err instanceof MissingRecordError) throw new HttpError(404, LINK_GONE);
      throw err;
    }
  };

  /** The page, once refuseUsedUp let it through. */
  const showPage = (req: Request, res: Response, link: LinkRecord, share: ShareRecord) => {
    const view = {
      file_name: share.file_name,
      size: share.initialized ? share.size : null,
      sha256: share.initialized ? (share.sha256 ?? null) : null,
      expires: effectiveExpiry(link, share),
      downloads_left:
        link.max_downloads === null ? null : Math.max(0, link.max_downloads - link.downloads),
    };
    if (wantsJsonPage(req)) {
      res.set({ 'Cache-Control': 'no-store', 'Referrer-Policy': 'no-referrer' }).json(view);
      return;
    }
    res.set(PAGE_HEADERS).send(
      sharePage({
        // Without the control and bidi characters an old name may hold, as the download offers it.
        fileName: shownName(share.file_name),
        size: view.size,
        sha256: view.sha256,
        expires: view.expires,
        downloadsLeft: view.downloads_left,
      }),
    );
  };

  const needPassword = (req: Request, res: Response, wrong: boolean) => {
    const message = wrong ? 'Wrong password for this link' : 'This link needs a password';
    // A 401 names its challenge (RFC 9110 §11.6.1): here a form, which no standard scheme is.
    res.set('WWW-Authenticate', 'Form realm="fshare link"');
    if (!wantsHtmlError(req)) {
      res.status(401).json({ status: 'fail', message });
      return;
    }
    res.status(401).set(PAGE_HEADERS).send(passwordPage(wrong));
  };

  const form = express.urlencoded({ extended: false, limit: '8kb', parameterLimit: 4 });

  // A link that can give nothing any more says so before it asks for a password: unknown or
  // revoked 404, expired 410 (resolve), no downloads left 410 (refuseUsedUp). Nobody types a
  // password into such a link, nor can anyone try passwords against it (one perhaps used
  // elsewhere). The answer tells a caller without the password only what a link without one tells
  // anyone, that the link is gone, and nothing of the share (name, size, sha256). Only a resume of
  // a download counted for the same address goes on past the 410, and then to the password check.
  route(pages, '/l/:token', {
    get: publicSide(async (req, res) => {
      const { link, share } = await resolve(req, res);
      const downloading = wantsDownload(req);
      await refuseUsedUp(req, link, share, downloading);
      if (link.password_hash !== null && !hasGrant(req, link)) {
        needPassword(req, res, false);
        return;
      }
      if (downloading) await download(req, res, link, share);
      else showPage(req, res, link, share);
    }),
    post: publicSide(async (req, res) => {
      await new Promise<void>((ok, fail) => form(req, res, (err) => (err ? fail(err) : ok())));
      const { token, link, share } = await resolve(req, res);
      noJsonBody(req); // a body declared JSON must parse, as everywhere else
      const downloading = wantsDownload(req);
      await refuseUsedUp(req, link, share, downloading);
      if (link.password_hash !== null) {
        const body = (req.body ?? {}) as Record<string, unknown>;
        const password = typeof body.password === 'string' ? body.password : '';
        const key = `${link.id}\0${clientAddress(req)}`;
        // Counted before the check, so that guesses sent together cannot all pass the count; one
        // that finds the count full only with checks under way waits for them (throttle.ts), so
        // right passwords sent at once (an office opening the link) all get in.
        const checked = await ctx.throttle.linkChecks
          .admit([key], () => takePoint(guesses, key, key), {
            address: clientAddress(req),
            socket: req.socket,
          })
          .catch((err: unknown) => {
            if (!(err instanceof ThrottledError)) throw err;
            throw new HttpError(
              429,
              `Too many wrong passwords for this link; try again in ${err.retryAfter} s`,
              { 'Retry-After': String(err.retryAfter) },
            );
          });
        let right: boolean;
        try {
          right = await passwords.verify(password, link.password_hash);
        } catch (err) {
          // Never checked (the server busy): nothing was learnt, nothing counts.
          await giveBack(guesses, key);
          checked();
          throw err;
        }
        if (!right) {
          checked();
          needPassword(req, res, true);
          return;
        }
        await giveBack(guesses, key);
        checked();
        grant(req, res, link, token);
      }
      if (downloading) {
        await download(req, res, link, share);
        return;
      }
      // Post/redirect/get: the page, now unlocked, without a form to send again on reload; at
      // the cookie's own path (`./<token>` from `/l/<token>/` was /l/<token>/<token>, a 404).
      res.status(303).location(pagePath(token)).set('Cache-Control', 'no-store').end();
    }),
  });

  return { manage: router, pages };
}
