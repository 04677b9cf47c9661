import { basename } from 'node:path';
import type { Command } from 'commander';
import {
  allPages,
  type PageQuery,
  deleteFile,
  getFile,
  listFiles,
  lockFile,
  patchFile,
  unlockFile,
} from '../../client/api.js';
import { download, parseByteRange, type ByteRange } from '../../client/download.js';
import { createLimiter } from '../../client/limit.js';
import { shareUrl } from '../../client/refs.js';
import {
  DEFAULT_PARALLEL,
  localFileSize,
  replaceFile,
  uploadFile,
  type UploadedShare,
} from '../../client/upload.js';
import { parseIsoNoZone } from '../../shared/dates.js';
import { formatSize, parseSize } from '../../shared/size.js';
import type { Page, Share } from '../../shared/types.js';
import { openSession, partialValidators, type Session } from '../context.js';
import {
  UsageError,
  errorLine,
  examples,
  exitCodeFor,
  printDetails,
  printJson,
  printLine,
  printTable,
  reportError,
  warn,
} from '../output.js';
import { createProgress, progressEnabled } from '../progress.js';

export function parseChunkSize(text: string): number {
  const size = parseSize(text);
  if (size === null || size < 1)
    throw new UsageError(`not a size: ${text} (try 512k, 8m, 1g or bytes)`);
  return size;
}

export function parsePositiveInt(
  text: string,
  what: string,
  max = Number.MAX_SAFE_INTEGER,
): number {
  const n = /^\d+$/.test(text.trim()) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < 1 || n > max)
    throw new UsageError(`${what} must be a whole number from 1 to ${max}: ${text}`);
  return n;
}

interface PageOptions {
  page?: string;
  perPage?: string;
  all?: boolean;
}

/** The `ls` and `users ls` paging flags, shared so both behave alike. */
export function addPageOptions(cmd: Command): Command {
  return cmd
    .option('--page <n>', 'page number, from 1', '1')
    .option('--per-page <n>', 'items per page (at most 1000)', '15')
    .option('--all', 'every page, one after another');
}

/** One page, or with --all every item; `--json` gets the server's page object or an array. */
export async function listPaged<T>(
  options: PageOptions,
  fetchPage: (q: PageQuery) => Promise<Page<T>>,
): Promise<{ items: T[]; page?: Page<T>; pageNumber: number }> {
  if (options.all) {
    const items: T[] = [];
    for await (const item of allPages(fetchPage)) items.push(item);
    return { items, pageNumber: 1 };
  }
  const pageNumber = parsePositiveInt(options.page ?? '1', '--page');
  const perPage = parsePositiveInt(options.perPage ?? '15', '--per-page', 1000);
  const page = await fetchPage({ page: pageNumber, perPage });
  return { items: page.data, page, pageNumber };
}

/** "2026-11-21 20:05" in local time, for tables. */
export function shortDate(iso: string): string {
  const date = parseIsoNoZone(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

function stateOf(share: Share): string {
  const flags = [share.locked ? 'locked' : '', share.initialized ? '' : 'empty'].filter(Boolean);
  return flags.join(',') || '-';
}

function chunkOptions(options: { chunkSize: string; parallel: string }) {
  return {
    chunkSize: parseChunkSize(options.chunkSize),
    parallel: parsePositiveInt(options.parallel, '--parallel', 64),
  };
}

/** Runs `task` for each item, reporting failures as they happen; returns the first exit code. */
async function eachReporting<T>(items: T[], task: (item: T) => Promise<void>): Promise<number> {
  let code = 0;
  for (const item of items) {
    try {
      await task(item);
    } catch (err) {
      const c = reportError(err);
      code ||= c;
    }
  }
  return code;
}

export function registerFiles(program: Command): void {
  program
    .command('upload')
    .description('create a share per file and upload it in chunks; prints each id and URL')
    .argument('<files...>', 'files to share')
    .option('-n, --name <name>', 'share name (one file only; default: the file name)')
    .option('--chunk-size <size>', 'bytes per chunk: 512k, 8m, 1g or bytes', '8m')
    .option('-p, --parallel <n>', 'chunk requests in flight', String(DEFAULT_PARALLEL))
    .option('--lock', 'lock each share once it is uploaded')
    .addHelpText(
      'after',
      examples([
        'fshare upload build.tar.gz',
        'fshare upload *.log --parallel 8 --chunk-size 16m',
        'fshare upload report.pdf --name "Q3 report.pdf" --lock',
        'fshare upload data.csv --json | jq -r ".[0].url"',
      ]),
    )
    .action(
      async (
        files: string[],
        options: { name?: string; chunkSize: string; parallel: string; lock?: boolean },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const { chunkSize, parallel } = chunkOptions(options);
        if (options.name !== undefined && files.length > 1)
          throw new UsageError('--name works with one file only');
        if (options.name === '') throw new UsageError('--name must not be empty');
        // Every path is checked before the first share is created.
        const sizes = await Promise.all(files.map((f) => localFileSize(f)));
        const client = await session.client();
        const progress = createProgress(progressEnabled(session.opts.progress));
        const chunkLimit = createLimiter(parallel);
        const fileLimit = createLimiter(parallel);
        const results: (UploadedShare | undefined)[] = [];
        let code = 0;
        await Promise.all(
          files.map((file, i) =>
            fileLimit(async () => {
              const bar = progress.bar(options.name ?? basename(file), sizes[i]!);
              try {
                results[i] = await uploadFile(client, file, {
                  name: options.name,
                  chunkSize,
                  limiter: chunkLimit,
                  lock: options.lock,
                  onProgress: (sent, total) => bar.update(sent, total),
                });
                bar.stop();
                const r = results[i]!;
                if (!session.opts.json) progress.print(`${r.share_id}  ${r.url}  ${r.file_name}`);
              } catch (err) {
                bar.stop();
                code ||= exitCodeFor(err);
                progress.log(errorLine(err));
              }
            }),
          ),
        );
        progress.stop();
        if (session.opts.json) printJson(results.filter((r) => r !== undefined));
        process.exitCode = code;
      },
    );

  program
    .command('replace')
    .description("replace a share's content with a local file (chunked PUT)")
    .argument('<id>', 'share id or URL')
    .argument('<file>', 'the new content')
    .option('--chunk-size <size>', 'bytes per chunk: 512k, 8m, 1g or bytes', '8m')
    .option('-p, --parallel <n>', 'chunk requests in flight', String(DEFAULT_PARALLEL))
    .addHelpText(
      'after',
      examples([
        'fshare replace 3f0c…e1 build.tar.gz',
        'fshare replace http://127.0.0.1:5000/files/3f0c…e1 notes.txt',
      ]),
    )
    .action(
      async (
        ref: string,
        file: string,
        options: { chunkSize: string; parallel: string },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const { chunkSize, parallel } = chunkOptions(options);
        const { client, id } = await session.shareClient(ref);
        const size = await localFileSize(file);
        const progress = createProgress(progressEnabled(session.opts.progress));
        const bar = progress.bar(basename(file), size);
        try {
          const result = await replaceFile(client, id, file, {
            chunkSize,
            parallel,
            onProgress: (sent, total) => bar.update(sent, total),
          });
          progress.stop();
          if (session.opts.json) printJson(result);
          else printLine(`Replaced ${result.share_id} with ${file} (${formatSize(result.size)})`);
        } finally {
          progress.stop();
        }
      },
    );

  program
    .command('get')
    .description('download a share (name from Content-Disposition; resumable)')
    .argument('<id>', 'share id or URL')
    .option('-o, --output <path>', 'file or directory to write to, or - for standard output')
    .option('--range <A-B>', 'only bytes A to B (inclusive); also A- or -N')
    .option('-c, --continue', 'resume NAME.part with Range + If-Range')
    .option('--clobber', 'overwrite an existing file named by the server')
    .addHelpText(
      'after',
      examples([
        'fshare get 3f0c…e1',
        'fshare get http://127.0.0.1:5000/files/3f0c…e1 -o backup.tar.gz',
        'fshare get 3f0c…e1 --continue',
        'fshare get 3f0c…e1 --range 0-1023 -o - | xxd | head',
      ]),
    )
    .action(
      async (
        ref: string,
        options: { output?: string; range?: string; continue?: boolean; clobber?: boolean },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const toStdout = options.output === '-';
        if (toStdout && session.opts.json)
          throw new UsageError('--json cannot be combined with -o - (the content goes to stdout)');
        if (toStdout && options.continue) throw new UsageError('--continue needs a file, not -o -');
        if (options.continue && options.range)
          throw new UsageError('--continue and --range cannot be combined');
        const range: ByteRange | undefined = options.range
          ? parseByteRange(options.range)
          : undefined;
        const { client, id } = await session.shareClient(ref);
        const progress = createProgress(progressEnabled(session.opts.progress));
        let bar: ReturnType<typeof progress.bar> | undefined;
        try {
          const result = await download(client, id, {
            output: options.output,
            range,
            resume: options.continue,
            overwrite: options.clobber,
            validators: partialValidators(session.config),
            onStart: (info) => {
              bar = progress.bar(info.path ? basename(info.path) : id, info.totalBytes ?? 0);
              bar.update(info.offset, info.totalBytes);
            },
            onProgress: (bytes, total) => bar?.update(bytes, total),
            onRestart: (reason) => warn(reason),
          });
          progress.stop();
          if (session.opts.json)
            printJson({
              share_id: id,
              path: result.path,
              size: result.bytes,
              resumed_from: result.resumedFrom,
            });
          else if (result.path)
            printLine(
              `Saved ${result.path} (${formatSize(result.bytes)}${result.resumedFrom ? `, resumed at ${formatSize(result.resumedFrom)}` : ''})`,
            );
        } finally {
          progress.stop();
        }
      },
    );

  addPageOptions(
    program
      .command('ls')
      .description('list shares as a table')
      .addHelpText(
        'after',
        examples([
          'fshare ls',
          'fshare ls --page 2 --per-page 50',
          'fshare ls --all --json | jq length',
        ]),
      ),
  ).action(async (options: PageOptions, cmd: Command) => {
    const session = openSession(cmd);
    const client = await session.client();
    const { items, page, pageNumber } = await listPaged(options, (q) => listFiles(client, q));
    if (session.opts.json) return printJson(page ?? items);
    if (items.length === 0 && process.stdout.isTTY) return printLine('No shares.');
    const tty = process.stdout.isTTY === true;
    printTable(
      ['ID', 'NAME', 'SIZE', 'OWNER', 'STATE', 'CREATED'],
      items.map((s) => [
        s.share_id,
        s.file_name,
        s.size === null || s.size === undefined ? '-' : tty ? formatSize(s.size) : String(s.size),
        s.owner_name ?? '(anonymous)',
        stateOf(s),
        tty ? shortDate(s.create_date) : s.create_date,
      ]),
    );
    if (page && page.pages > 1 && tty)
      process.stderr.write(
        `(page ${pageNumber} of ${page.pages}${page.next ? `; next: --page ${page.next}` : ''})\n`,
      );
  });

  program
    .command('info')
    .description("show one share's metadata")
    .argument('<id>', 'share id or URL')
    .addHelpText(
      'after',
      examples(['fshare info 3f0c…e1', 'fshare info 3f0c…e1 --json | jq .size']),
    )
    .action(async (ref: string, _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const { client, id } = await session.shareClient(ref);
      const share = await getFile(client, id);
      if (session.opts.json) return printJson(share);
      printDetails([
        ['id', share.share_id],
        ['name', share.file_name],
        [
          'size',
          share.size === null || share.size === undefined
            ? '-'
            : `${formatSize(share.size)} (${share.size} bytes)`,
        ],
        ['owner', share.owner_name ?? '(anonymous)'],
        ['content', share.initialized ? 'yes' : 'none yet'],
        ['locked', share.locked ? 'yes' : 'no'],
        ['created', share.create_date],
        ['url', shareUrl(client.server, share.share_id)],
      ]);
    });

  program
    .command('rm')
    .description('delete shares and their content')
    .argument('<ids...>', 'share ids or URLs')
    .addHelpText(
      'after',
      examples([
        'fshare rm 3f0c…e1',
        'fshare ls --json | jq -r ".data[].share_id" | xargs fshare rm',
      ]),
    )
    .action(async (refs: string[], _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const targets = await Promise.all(refs.map((ref) => session.shareClient(ref)));
      const done: { share_id: string; status: string; message?: string }[] = [];
      process.exitCode = await eachReporting(targets, async ({ client, id }) => {
        const res = await deleteFile(client, id);
        done.push({ share_id: id, ...res });
        if (!session.opts.json) printLine(`Deleted ${id}`);
      });
      if (session.opts.json) printJson(done);
    });

  const simple = (
    name: string,
    description: string,
    call: (
      session: Session,
      ref: string,
      arg: string | undefined,
    ) => Promise<{ id: string; body: object; line: string }>,
    configure: (cmd: Command) => Command,
    helpExamples: string[],
  ) => {
    configure(program.command(name).description(description))
      .addHelpText('after', examples(helpExamples))
      .action(async (...args: unknown[]) => {
        const cmd = args[args.length - 1] as Command;
        const session = openSession(cmd);
        const ref = args[0] as string;
        const second = typeof args[1] === 'string' ? args[1] : undefined;
        const { id, body, line } = await call(session, ref, second);
        if (session.opts.json) printJson({ share_id: id, ...body });
        else printLine(line);
      });
  };

  simple(
    'rename',
    "change a share's file name",
    async (session, ref, name) => {
      if (!name) throw new UsageError('the new name must not be empty');
      const { client, id } = await session.shareClient(ref);
      return {
        id,
        body: await patchFile(client, id, { file_name: name }),
        line: `Renamed ${id} to ${name}`,
      };
    },
    (cmd) => cmd.argument('<id>', 'share id or URL').argument('<name>', 'new file name'),
    ['fshare rename 3f0c…e1 "final report.pdf"'],
  );

  program
    .command('chown')
    .description('give a share to another user, or to anonymous users')
    .argument('<id>', 'share id or URL')
    .argument('[user]', 'the new owner')
    .option('--anonymous', 'make the share owned by anonymous users (owner_name null)')
    .addHelpText(
      'after',
      examples(['fshare chown 3f0c…e1 bob', 'fshare chown 3f0c…e1 --anonymous']),
    )
    .action(
      async (
        ref: string,
        user: string | undefined,
        options: { anonymous?: boolean },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        if ((user === undefined) === !options.anonymous)
          throw new UsageError('name a user or pass --anonymous (one of the two)');
        const { client, id } = await session.shareClient(ref);
        const owner = options.anonymous ? null : user!;
        const body = await patchFile(client, id, { owner_name: owner });
        if (session.opts.json) printJson({ share_id: id, ...body });
        else printLine(`${id} now belongs to ${owner ?? 'anonymous users'}`);
      },
    );

  simple(
    'lock',
    'lock a share: no changes or deletion until it is unlocked',
    async (session, ref) => {
      const { client, id } = await session.shareClient(ref);
      return { id, body: await lockFile(client, id), line: `Locked ${id}` };
    },
    (cmd) => cmd.argument('<id>', 'share id or URL'),
    ['fshare lock 3f0c…e1'],
  );

  simple(
    'unlock',
    'unlock a share',
    async (session, ref) => {
      const { client, id } = await session.shareClient(ref);
      return { id, body: await unlockFile(client, id), line: `Unlocked ${id}` };
    },
    (cmd) => cmd.argument('<id>', 'share id or URL'),
    ['fshare unlock 3f0c…e1'],
  );
}
