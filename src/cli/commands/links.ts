import type { Command } from 'commander';
import {
  createLink,
  deleteLink,
  getFile,
  listLinks,
  patchFile,
  shareLinks,
  type NewLink,
} from '../../client/api.js';
import { ApiError, UnsupportedError, unknownFieldRefused } from '../../client/errors.js';
import type { Link } from '../../shared/types.js';
import { parseExpiry, parsePositiveInt } from '../args.js';
import { openSession } from '../context.js';
import { readStdinLines } from '../input.js';
import { addPageOptions, listPaged, notePage, type PageOptions } from '../lists.js';
import {
  eachReporting,
  examples,
  printJson,
  printLine,
  printTable,
  UsageError,
  warn,
} from '../output.js';
import { linkShape, shareShape } from '../shapes.js';

/** A 404 or 405 for a link endpoint of a share that exists: the server has no share links. */
export function linkUnsupported(err: unknown, server: string): unknown {
  if (err instanceof ApiError && (err.status === 404 || err.status === 405))
    return new UnsupportedError(
      `${server} does not offer share links (an fshare serve extension): ${err.message}`,
    );
  return err;
}

/** "2026-11-30 08:04 UTC (in 7 days)", "never". */
export function describeExpiry(iso: string | null | undefined, now = Date.now()): string {
  if (!iso) return 'never';
  const at = Date.parse(iso);
  if (Number.isNaN(at)) return iso;
  const when = new Date(at).toISOString().slice(0, 16).replace('T', ' ');
  const seconds = Math.round((at - now) / 1000);
  if (seconds <= 0) return `${when} UTC (passed)`;
  const rough =
    seconds >= 2 * 86400
      ? `${Math.round(seconds / 86400)} days`
      : seconds >= 2 * 3600
        ? `${Math.round(seconds / 3600)} hours`
        : seconds >= 120
          ? `${Math.round(seconds / 60)} minutes`
          : `${seconds} seconds`;
  return `${when} UTC (in ${rough})`;
}

function downloadsText(l: Link): string {
  return l.max_downloads === null ? `${l.downloads}` : `${l.downloads}/${l.max_downloads}`;
}

function printLinks(links: Link[]): void {
  printTable(
    ['ID', 'SHARE', 'NAME', 'DOWNLOADS', 'EXPIRES', 'STATE'],
    links.map((l) => [
      l.id,
      l.share_id,
      l.file_name ?? '-',
      downloadsText(l),
      l.expires ? l.expires.slice(0, 16).replace('T', ' ') : 'never',
      l.state + (l.has_password ? ' (password)' : ''),
    ]),
  );
}

export function registerLinks(program: Command): void {
  const link = program
    .command('link')
    .description('make a share link anyone can open in a browser or with curl; prints its URL')
    .argument('<share>', 'share id or URL')
    .option('--expires <duration>', 'the link stops working after this long: 12h, 7d, 2w')
    .option('--max-downloads <n>', 'the link works for this many downloads')
    .option('--password-stdin', 'protect the link with a password read from standard input')
    .addHelpText(
      'after',
      examples([
        'fshare link 3f0c…e1',
        'fshare link 3f0c…e1 --expires 7d --max-downloads 10',
        'printf %s "$PW" | fshare link 3f0c…e1 --password-stdin',
        'curl -OJ "$(fshare link 3f0c…e1)?download"',
        'fshare link rm 1e12848f89cc7245',
      ]),
    )
    .action(
      async (
        ref: string,
        options: { expires?: string; maxDownloads?: string; passwordStdin?: boolean },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const request: NewLink = {};
        if (options.expires !== undefined)
          request.expires_in = parseExpiry(options.expires, '--expires')!;
        if (options.maxDownloads !== undefined)
          request.max_downloads = parsePositiveInt(options.maxDownloads, '--max-downloads');
        if (options.passwordStdin)
          request.password = (await readStdinLines(1, 'the link password'))[0]!;
        const { client, id } = await session.shareClient(ref);
        await getFile(client, id); // a missing share is "not found", not "no links here"
        const made = await createLink(client, id, request).catch((err: unknown) => {
          throw linkUnsupported(err, client.server);
        });
        if (session.opts.json) return printJson(linkShape(made));
        printLine(made.url);
        if (process.stderr.isTTY)
          warn(
            `link ${made.id}: expires ${describeExpiry(made.expires)}; ${made.max_downloads === null ? 'no download limit' : `${made.max_downloads} downloads`}${made.has_password ? '; password' : ''}`,
          );
      },
    );

  link
    .command('rm')
    .description('revoke share links (they stop working at once)')
    .argument('<ids...>', 'link ids (from fshare links)')
    .addHelpText('after', examples(['fshare link rm 1e12848f89cc7245']))
    .action(async (ids: string[], _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const client = await session.client();
      const done: { id: string; revoked: true }[] = [];
      // Every id is tried: a typo in one must not leave the others working.
      process.exitCode = await eachReporting(
        ids,
        async (linkId) => {
          // In a URL these name another path: "" and "." DELETE /links/ (405), ".." DELETE / (a
          // 404 that read as a server without links).
          if (/^\.{0,2}$/.test(linkId)) throw new UsageError(`not a link id: "${linkId}"`);
          await deleteLink(client, linkId).catch((err: unknown) => {
            if (err instanceof ApiError && err.status === 404 && /No route/i.test(err.message))
              throw linkUnsupported(err, client.server);
            throw err;
          });
          done.push({ id: linkId, revoked: true });
          if (!session.opts.json) printLine(`Revoked link ${linkId}`);
        },
        (linkId) => linkId,
      );
      if (session.opts.json) printJson(done);
    });

  addPageOptions(
    program
      .command('links')
      .description("list share links: one share's, or all of yours (every link, for ADMIN)")
      .argument('[share]', 'share id or URL'),
  )
    .addHelpText(
      'after',
      examples(['fshare links', 'fshare links 3f0c…e1', 'fshare links --all --json']),
    )
    .action(async (ref: string | undefined, options: PageOptions, cmd: Command) => {
      const session = openSession(cmd);
      let links: Link[];
      if (ref !== undefined) {
        const { client, id } = await session.shareClient(ref);
        await getFile(client, id);
        links = (
          await shareLinks(client, id).catch((err: unknown) => {
            throw linkUnsupported(err, client.server);
          })
        ).data;
      } else {
        const client = await session.client();
        const listed = await listPaged(options, (q) => listLinks(client, q)).catch(
          (err: unknown) => {
            throw linkUnsupported(err, client.server);
          },
        );
        links = listed.items;
        // --json's array says nothing of pages: the note goes to stderr with it too.
        notePage(listed.page, listed.pageNumber);
      }
      if (session.opts.json) return printJson(links.map(linkShape));
      if (links.length === 0) {
        if (process.stdout.isTTY) printLine('No links.');
        return;
      }
      printLinks(links);
    });

  program
    .command('expire')
    .description('set when the server deletes a share (content, metadata and links)')
    .argument('<share>', 'share id or URL')
    .argument('<when>', 'a duration from now (12h, 7d, 2w) or never')
    .addHelpText('after', examples(['fshare expire 3f0c…e1 7d', 'fshare expire 3f0c…e1 never']))
    .action(async (ref: string, when: string, _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const seconds = parseExpiry(when, 'the expiry', true);
      const { client, id } = await session.shareClient(ref);
      const unsupported = () =>
        new UnsupportedError(
          `${client.server} does not support share expiry (an fshare serve extension)`,
        );
      // The reference server refuses the field it does not know (400 'Unknown field.').
      await patchFile(client, id, { expires_in: seconds }).catch((err: unknown) => {
        throw unknownFieldRefused(err, 'expires_in') ? unsupported() : err;
      });
      // Checked, not assumed: a server without expiry may ignore the field.
      const share = await getFile(client, id);
      if (share.expires === undefined || (seconds !== null && !share.expires)) throw unsupported();
      if (session.opts.json) return printJson(shareShape(client.server, share));
      printLine(
        share.expires ? `${id} expires ${describeExpiry(share.expires)}` : `${id} never expires`,
      );
    });
}
