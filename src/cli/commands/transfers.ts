import { setMaxListeners } from 'node:events';
import { createWriteStream, fstatSync, readFileSync, rmSync, statSync } from 'node:fs';
import { basename, dirname, join, resolve } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Command } from 'commander';
import { createLink, deleteFile, getFile, whoami } from '../../client/api.js';
import { byteRangeText, download, parseByteRange, type ByteRange } from '../../client/download.js';
import { ApiError, NetworkError } from '../../client/errors.js';
import { createChunkLimiter, createLimiter } from '../../client/limit.js';
import { createClient } from '../../client/http.js';
import { openLink, parseLinkRef } from '../../client/link-download.js';
import { shareUrl } from '../../client/refs.js';
import {
  busyElsewhere,
  DEFAULT_PARALLEL,
  fromStdin,
  leftToResume,
  leftUnrecorded,
  localFileSize,
  pendingShare,
  refusedForGood,
  replaceFile,
  uploadFile,
  type UploadedShare,
  type UploadRecord,
} from '../../client/upload.js';
import { ownedTempDir } from '../../shared/owned-temp.js';
import { systemErrorText } from '../../shared/syserr.js';
import { formatSize } from '../../shared/size.js';
import type { Whoami } from '../../shared/types.js';
import { parseChunkSize, parseExpiry, parsePositiveInt } from '../args.js';
import { configDir } from '../config.js';
import { openSession, partialValidators, type Session } from '../context.js';
import { promptHidden, readStdinLines } from '../input.js';
import { localIso, shortDate } from '../lists.js';
import {
  EXIT,
  UsageError,
  errorLine,
  examples,
  exitCodeFor,
  printJson,
  printable,
  printLine,
  printTable,
  reportError,
  treatOutputAsContent,
  warn,
} from '../output.js';
import { createProgress, progressEnabled } from '../progress.js';
import { linkShape, type LinkShape, type TransferShape } from '../shapes.js';
import { linkUnsupported } from './links.js';
import {
  damagedNotice,
  uploadRecords,
  type DamagedRecord,
  type UploadRecordStore,
} from '../uploads.js';
import { shellWord } from '../../shared/shell.js';

interface Spool {
  file: string;
  /** Removes the temporary directory (and stops guarding it). */
  remove(): void;
}

/**
 * Standard input into a new private temporary file, removed by the caller with remove(). Until
 * then a SIGINT, SIGTERM or SIGHUP (or any exit) removes it too: a signal while stdin was being
 * read used to leave the /tmp/fshare-stdin-* directory behind for good.
 */
function stdinIsDirectory(): boolean {
  try {
    return fstatSync(0, { bigint: true }).isDirectory(); // bigint: see main.ts, isRegularFile
  } catch {
    return false; // no standard input at all: it reads as empty, as before
  }
}

/**
 * Whether standard input was closed when fshare started (`fshare upload - <&-`, a job runner
 * that gives none). Node then opens /dev/null in its place, read-write, and it reads as empty:
 * the upload made an empty share and said so, exit 0. A redirection from /dev/null opens it
 * read-only and is an empty file given on purpose. Linux (/proc); elsewhere, false.
 */
function stdinWasClosed(): boolean {
  try {
    const flags = /^flags:\s*([0-7]+)$/m.exec(readFileSync('/proc/self/fdinfo/0', 'utf8'));
    if (!flags || (parseInt(flags[1]!, 8) & 0o3) !== 0o2) return false; // O_ACCMODE: O_RDWR
    // bigint: see main.ts, isRegularFile
    const stdin = fstatSync(0, { bigint: true });
    return stdin.isCharacterDevice() && stdin.rdev === statSync('/dev/null', { bigint: true }).rdev;
  } catch {
    return false;
  }
}

async function spoolStdin(): Promise<Spool> {
  if (stdinWasClosed())
    throw new UsageError('- reads standard input, which is closed here; pipe something in');
  if (process.stdin.isTTY)
    throw new UsageError('- reads standard input, which is a terminal here; pipe something in');
  // A directory reads as nothing here (`fshare upload - < dir` made an empty share, exit 0).
  if (stdinIsDirectory())
    throw new UsageError('- reads standard input, which is a directory here; pipe something in');
  // Named with this process: one a SIGKILL left is removed by the next fshare that makes one.
  const dir = await ownedTempDir('fshare-stdin-');
  const removeDir = () => rmSync(dir, { recursive: true, force: true });
  const onSignal = (signal: NodeJS.Signals) => {
    // Once a transfer runs, its own Ctrl-C handler stops it cleanly; the exit hook removes it.
    if (signal === 'SIGINT' && process.listenerCount('SIGINT') > 1) return;
    removeDir();
    if (signal === 'SIGINT') process.exit(EXIT.interrupted);
    // Die of the signal, as every fshare command does without a spool (the shell says 143, 129).
    unguard();
    process.kill(process.pid, signal);
  };
  const unguard = () => {
    for (const signal of SPOOL_SIGNALS) process.off(signal, onSignal);
    process.off('exit', removeDir);
  };
  for (const signal of SPOOL_SIGNALS) process.on(signal, onSignal);
  process.on('exit', removeDir);
  const remove = () => {
    unguard();
    removeDir();
  };
  const file = join(dir, 'stdin');
  const spool = createWriteStream(file, { mode: 0o600, flags: 'wx' });
  let writeFailed = false;
  spool.once('error', () => (writeFailed = true));
  try {
    await pipeline(process.stdin, spool);
  } catch (err) {
    remove();
    // A full temp directory said only "no space left on the device", not where, nor what to do.
    if (writeFailed)
      throw new Error(
        `standard input could not be kept in ${dirname(dir)} to upload it (${systemErrorText(err) ?? (err as Error).message}); set TMPDIR to a directory with room for all of it`,
        { cause: err },
      );
    throw err;
  }
  return { file, remove };
}

const SPOOL_SIGNALS: NodeJS.Signals[] = ['SIGINT', 'SIGTERM', 'SIGHUP'];

/**
 * The line after an interrupted upload of standard input: the spool is gone, so running the
 * command again cannot resume it; what it left is the share (and its record), and how to remove it.
 */
async function stdinLeftovers(resume: UploadRecordStore, spool: string): Promise<string> {
  const left = (await resume.list()).find((r) => r.mode === 'create' && r.path === resolve(spool));
  if (!left)
    return 'fshare: an upload from standard input cannot be resumed; nothing of it was left on the server';
  // Its create was not answered: the share it may have made is found by the record's key.
  if (left.share_id === null)
    return 'fshare: an upload from standard input cannot be resumed; its share may have been created without an answer: fshare uploads clean deletes it';
  return `fshare: an upload from standard input cannot be resumed; it left the share ${left.share_id} without content: fshare uploads clean (or fshare rm ${left.share_id}) deletes it`;
}

function chunkOptions(options: { chunkSize: string; parallel: string }) {
  return {
    chunkSize: parseChunkSize(options.chunkSize),
    parallel: parsePositiveInt(options.parallel, '--parallel', 64),
  };
}

/**
 * Ctrl-C during a transfer: the first one stops it cleanly (what was sent stays on the server and
 * the record to resume it stays here); a second one exits at once.
 */
function interruptible(): { signal: AbortSignal; done(): void } {
  const abort = new AbortController();
  // Each chunk and request under way listens to it until it ends, as many at once as --parallel
  // allows: not a leak for Node to warn of past 10 listeners.
  setMaxListeners(0, abort.signal);
  let pressed = false;
  const onSigint = () => {
    if (pressed) process.exit(EXIT.interrupted);
    pressed = true;
    abort.abort(Object.assign(new Error('interrupted'), { name: 'AbortError' }));
  };
  process.on('SIGINT', onSigint);
  return { signal: abort.signal, done: () => process.off('SIGINT', onSigint) };
}

/** An upload that stopped on the way (not refused): it can be resumed. */
function interrupted(err: unknown): boolean {
  if (err instanceof NetworkError) return true;
  if ((err as { name?: string } | null)?.name === 'AbortError') return true;
  return err instanceof ApiError && (err.status >= 500 || err.status === 408 || err.status === 429);
}

function transferShape(
  r: UploadedShare,
  path: string,
  link: LinkShape | null = null,
): TransferShape {
  return {
    share_id: r.share_id,
    url: r.url,
    file_name: r.file_name,
    path: resolve(path),
    size: r.size,
    sha256: r.sha256,
    verified: r.verified,
    resumed_bytes: r.resumed_bytes,
    expires: r.expires,
    link,
  };
}

const upload = (program: Command) =>
  program
    .command('upload')
    .description(
      'create a share per file and upload it in chunks, verified; prints each id and URL',
    )
    .argument('<files...>', 'files to share; - for standard input (name it with --name)')
    .option('-n, --name <name>', 'share name (one file only; default: the file name)')
    .option('--chunk-size <size>', 'bytes per chunk: 512k, 8m, 1g or bytes', '8m')
    .option('-p, --parallel <n>', 'chunks going up at once', String(DEFAULT_PARALLEL))
    .option('--lock', 'lock each share once it is uploaded')
    .option('--restart', 'start afresh even if an interrupted upload of the file could resume')
    .option('--expires <duration>', 'the server deletes the share after this long: 12h, 7d, 2w')
    .option('--link', 'also make a share link anyone can open; print it instead of the share URL')
    .option('--max-downloads <n>', 'the link works for this many downloads (implies --link)')
    .addHelpText(
      'after',
      examples([
        'fshare upload build.tar.gz',
        'fshare upload slides.pdf --expires 7d --link --max-downloads 20',
        'fshare upload *.log --parallel 8 --chunk-size 16m',
        'fshare upload report.pdf --name "Q3 report.pdf" --lock',
        'fshare upload data.csv --json | jq -r ".[0].url"',
        'fshare upload big.iso            # again after Ctrl-C or a crash: sends only what is missing',
      ]),
    )
    .action(
      async (
        files: string[],
        options: {
          name?: string;
          chunkSize: string;
          parallel: string;
          lock?: boolean;
          restart?: boolean;
          expires?: string;
          link?: boolean;
          maxDownloads?: string;
        },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const { chunkSize, parallel } = chunkOptions(options);
        const expiresIn =
          options.expires === undefined ? undefined : parseExpiry(options.expires, '--expires')!;
        const maxDownloads =
          options.maxDownloads === undefined
            ? undefined
            : parsePositiveInt(options.maxDownloads, '--max-downloads');
        const wantLink = Boolean(options.link) || maxDownloads !== undefined;
        if (options.name !== undefined && files.length > 1)
          throw new UsageError('--name works with one file only');
        if (options.name === '') throw new UsageError('--name must not be empty');
        // `-`: standard input, kept in a private temporary file first (the protocol needs the
        // number of chunks up front, so the whole size must be known before the first chunk).
        let spool: Spool | undefined;
        if (files.includes('-')) {
          if (files.length > 1) throw new UsageError('- (standard input) must be the only file');
          spool = await spoolStdin();
          files = [spool.file];
          options.name ??= 'stdin';
        }
        // Every path is checked before the first share is created.
        const sizes = await Promise.all(files.map((f) => localFileSize(f)));
        const client = await session.client();
        const progress = createProgress(progressEnabled(session.opts.progress));
        const chunkLimit = createChunkLimiter(parallel);
        const fileLimit = createLimiter(parallel);
        const resume = uploadRecords(configDir(session.config), {
          onDamaged: (d) => progress.log(damagedNotice(d)),
        });
        const stop = interruptible();
        // The user gave `-`: a line about the spool file is about standard input.
        const asGiven = (line: string) =>
          spool ? line.replaceAll(spool.file, 'standard input') : line;
        const results: (TransferShape | undefined)[] = [];
        let code = 0;
        await Promise.all(
          files.map((file, i) =>
            fileLimit(async () => {
              const bar = progress.bar(options.name ?? basename(file), sizes[i]!);
              try {
                const r = await uploadFile(client, file, {
                  name: options.name,
                  chunkSize,
                  limiter: chunkLimit,
                  lock: options.lock,
                  resume,
                  restart: options.restart,
                  expiresIn,
                  stdin: spool !== undefined,
                  signal: stop.signal,
                  onProgress: (sent, total) => bar.update(sent, total),
                  onNotice: (line) => progress.log(asGiven(`fshare: ${line}`)),
                });
                bar.stop();
                let link: LinkShape | null = null;
                if (wantLink) {
                  try {
                    link = linkShape(
                      await createLink(client, r.share_id, {
                        ...(maxDownloads === undefined ? {} : { max_downloads: maxDownloads }),
                      }),
                    );
                  } catch (thrown) {
                    // The share is uploaded and stays: the line says which it is, or the user
                    // uploads it again (its id is on no other line, and the JSON leaves it out).
                    const err = linkUnsupported(thrown, client.server);
                    code ||= exitCodeFor(err);
                    progress.log(
                      errorLine(err).replace(
                        /^fshare: /,
                        `fshare: ${printable(r.file_name)} was uploaded as ${r.share_id}, but no link was made: `,
                      ) +
                        `; fshare link ${r.share_id} makes one, fshare rm ${r.share_id} removes the share`,
                    );
                    return;
                  }
                }
                results[i] = transferShape(r, file, link);
                if (!session.opts.json) {
                  // stdout keeps CLI.md's "id  url  name" for scripts (with --link, the link's
                  // URL); the proof goes beside it
                  if (r.verified && process.stderr.isTTY)
                    progress.log(`fshare: ${r.file_name}: verified sha256 ${r.sha256}`);
                  progress.print(`${r.share_id}  ${link?.url ?? r.url}  ${r.file_name}`);
                }
              } catch (err) {
                bar.stop();
                code ||= exitCodeFor(err);
                progress.log(asGiven(errorLine(err)));
                // (a 401 on the way, too: signed in again, the same command goes on)
                if (
                  ((interrupted(err) && !refusedForGood(err)) || leftToResume(err)) &&
                  !leftUnrecorded(err)
                )
                  progress.log(
                    spool
                      ? await stdinLeftovers(resume, spool.file)
                      : `fshare: to resume: fshare upload ${shellWord(file)}; to give up: fshare uploads clean`,
                  );
              }
            }),
          ),
        );
        stop.done();
        progress.stop();
        spool?.remove();
        if (session.opts.json)
          printJson(
            results.filter((r) => r !== undefined).map((r) => (spool ? { ...r, path: null } : r)),
          );
        process.exitCode = code;
      },
    );

const replace = (program: Command) =>
  program
    .command('replace')
    .description("replace a share's content with a local file (chunked PUT, verified)")
    .argument('<id>', 'share id or URL')
    .argument('<file>', 'the new content')
    .option('--chunk-size <size>', 'bytes per chunk: 512k, 8m, 1g or bytes', '8m')
    .option('-p, --parallel <n>', 'chunks going up at once', String(DEFAULT_PARALLEL))
    .option('--restart', 'start afresh even if an interrupted replacement could resume')
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
        options: { chunkSize: string; parallel: string; restart?: boolean },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const { chunkSize, parallel } = chunkOptions(options);
        const { client, id } = await session.shareClient(ref);
        const size = await localFileSize(file);
        const progress = createProgress(progressEnabled(session.opts.progress));
        const bar = progress.bar(basename(file), size);
        const stop = interruptible();
        try {
          const result = await replaceFile(client, id, file, {
            chunkSize,
            parallel,
            resume: uploadRecords(configDir(session.config), {
              onDamaged: (d) => progress.log(damagedNotice(d)),
            }),
            restart: options.restart,
            signal: stop.signal,
            onProgress: (sent, total) => bar.update(sent, total),
            onNotice: (line) => progress.log(`fshare: ${line}`),
          });
          progress.stop();
          if (session.opts.json) printJson(transferShape(result, file));
          else
            printLine(
              `Replaced ${result.share_id} with ${file} (${formatSize(result.size)}${result.verified ? ', verified sha256' : ''})`,
            );
        } catch (err) {
          progress.stop();
          if (interrupted(err)) {
            // The error line, then what to do, as `upload` says it (the error used to be said
            // twice, the second time without the way on).
            process.exitCode = reportError(err);
            warn(`to resume: fshare replace ${shellWord(ref)} ${shellWord(file)}`);
            return;
          }
          // Locked on the way: the chunks stored stay on the server, and so does the record.
          if (err instanceof ApiError && err.status === 423 && leftToResume(err))
            warn(
              `to finish once the share is unlocked: fshare replace ${shellWord(ref)} ${shellWord(file)}`,
            );
          throw err;
        } finally {
          stop.done();
          progress.stop();
        }
      },
    );

/** Whether PATH (links followed) is this process's standard output, as /dev/stdout is. */
function namesStdout(path: string): boolean {
  try {
    // bigint: see main.ts, isRegularFile.
    const named = statSync(path, { bigint: true });
    const stdout = fstatSync(1, { bigint: true });
    return !named.isDirectory() && named.dev === stdout.dev && named.ino === stdout.ino;
  } catch {
    return false;
  }
}

const get = (program: Command) =>
  program
    .command('get')
    .description(
      'download a share or a share link, verified (name from Content-Disposition; resumable)',
    )
    .argument('<id>', "share id or URL, or a share link's URL")
    .option('-o, --output <path>', 'file or directory to write to, or - for standard output')
    .option('--range <A-B>', 'only bytes A to B (inclusive); also A- or -N')
    .option('-c, --continue', 'resume NAME.part with Range + If-Range')
    .option('--clobber', 'overwrite an existing file named by the server')
    .option('-v, --verbose', 'say how the download was verified')
    .option('--password-stdin', "a share link's password, from the first line of standard input")
    .addHelpText(
      'after',
      examples([
        'fshare get 3f0c…e1',
        'fshare get http://127.0.0.1:5000/files/3f0c…e1 -o backup.tar.gz',
        'fshare get https://files.example.com/l/Qm9…x2',
        'printf %s "$PW" | fshare get https://files.example.com/l/Qm9…x2 --password-stdin',
        'fshare get 3f0c…e1 --continue',
        'fshare get 3f0c…e1 --range 0-1023 -o - | xxd | head',
      ]),
    )
    .action(
      async (
        ref: string,
        options: {
          output?: string;
          range?: string;
          continue?: boolean;
          clobber?: boolean;
          verbose?: boolean;
          passwordStdin?: boolean;
        },
        cmd: Command,
      ) => {
        const session = openSession(cmd);
        const link = parseLinkRef(ref);
        if (options.passwordStdin && !link)
          throw new UsageError("--password-stdin is for a share link's password");
        // An empty -o (`-o "$OUT"` with OUT unset) names no file: found from outside, the
        // content went to standard output and a file named `.part` was left behind.
        if (options.output === '')
          throw new UsageError('-o needs a path, or - for standard output; it was empty');
        // -o /dev/stdout (or /dev/fd/1, or any other name of it) is -o -: the bytes are the
        // output, and no other line may go there.
        const toStdout =
          options.output === '-' || (options.output !== undefined && namesStdout(options.output));
        if (toStdout && session.opts.json)
          throw new UsageError('--json cannot be combined with -o - (the content goes to stdout)');
        if (toStdout && options.continue) throw new UsageError('--continue needs a file, not -o -');
        if (toStdout) treatOutputAsContent();
        // An empty --range (`--range "$R"` with R unset) is not a range, never the whole content.
        if (options.continue && options.range !== undefined)
          throw new UsageError('--continue and --range cannot be combined');
        const range: ByteRange | undefined =
          options.range !== undefined ? parseByteRange(options.range) : undefined;
        // A link is downloaded without any token of ours (it needs none, and a link URL may come
        // from anyone); its page's description gives the name, size and sha256 to check.
        const opened = link
          ? await openLink(createClient({ server: link.server }), link, () =>
              linkPassword(options.passwordStdin === true),
            )
          : undefined;
        const { client, id } = link
          ? { client: createClient({ server: link.server }), id: 'download' }
          : await session.shareClient(ref);
        const progress = createProgress(progressEnabled(session.opts.progress));
        let bar: ReturnType<typeof progress.bar> | undefined;
        const stop = interruptible();
        try {
          const result = await download(client, id, {
            output: toStdout ? '-' : options.output,
            // A slice is not the file: unless -o names the file, it is saved as NAME.A-B
            // (also in a directory -o names), never as NAME.
            nameSuffix: range ? `.${byteRangeText(range)}` : undefined,
            range,
            resume: options.continue,
            overwrite: options.clobber,
            // A damaged record is replaced when the download records its own; until then, said.
            validators: partialValidators(session.config, {
              onDamaged: (file, reason) =>
                progress.log(`fshare: damaged download record (${reason}), not used: ${file}`),
            }),
            signal: stop.signal,
            onStart: (info) => {
              bar = progress.bar(info.path ? basename(info.path) : id, info.totalBytes ?? 0);
              bar.update(info.offset, info.totalBytes);
            },
            onProgress: (bytes, total) => bar?.update(bytes, total),
            onRestart: (reason) => progress.log(`fshare: ${reason}`),
            onNotice: (line) => progress.log(`fshare: ${line}`),
            source: opened?.source,
          }).catch((err: unknown) => {
            // The download names the sha256 the link stated: a 412 is content that replaced it
            // between the two requests, and nothing of it was saved.
            if (link && err instanceof ApiError && err.status === 412)
              throw new ApiError(
                412,
                'the share was replaced as the download started, and nothing was saved; run the command again for the new content',
              );
            throw err;
          });
          progress.stop();
          const shape: TransferShape = {
            // A link does not say which share it is for.
            share_id: link ? null : id,
            url: link ? null : shareUrl(client.server, id),
            file_name: result.path ? basename(result.path) : null,
            path: result.path ? resolve(result.path) : null,
            size: result.bytes,
            sha256: result.sha256,
            verified: result.verified,
            resumed_bytes: result.resumedFrom,
            expires: null,
            link: null,
          };
          if (session.opts.json) printJson(shape);
          else if (result.path)
            printLine(
              `Saved ${result.path} (${formatSize(result.bytes)}${result.resumedFrom ? `, resumed at ${formatSize(result.resumedFrom)}` : ''}${result.verified ? ', verified sha256' : ''})`,
            );
          if (options.verbose && result.verified)
            warn(`verified sha256 ${result.sha256} against the server's digest`);
        } finally {
          stop.done();
          progress.stop();
        }
      },
    );

/** A share link's password: the first line of stdin, or asked for on the terminal. */
async function linkPassword(fromStdin: boolean): Promise<string> {
  if (fromStdin) return (await readStdinLines(1, "the link's password"))[0]!;
  if (!process.stdin.isTTY || !process.stderr.isTTY) {
    const err = new ApiError(401, 'This link needs a password; give it with --password-stdin');
    err.hint = null;
    throw err;
  }
  return promptHidden('Password for the link: ');
}

const uploads = (program: Command) => {
  const cmd = program
    .command('uploads')
    .description("list this client's interrupted uploads (resume one by running the same upload)")
    .addHelpText(
      'after',
      examples(['fshare uploads', 'fshare uploads clean', 'fshare uploads --json']),
    )
    .action(async (_options: object, c: Command) => {
      const session = openSession(c);
      const store = uploadRecords(configDir(session.config));
      const { records, damaged } = await store.scan();
      if (session.opts.json)
        return printJson([
          ...records.map((r) => recordShape(r, store)),
          ...damaged.map(damagedShape),
        ]);
      if (records.length + damaged.length === 0 && process.stdout.isTTY)
        return printLine('No unfinished uploads.');
      printTable(
        ['SHARE', 'FILE', 'SIZE', 'KIND', 'STARTED', 'SERVER'],
        [
          ...records.map((r) => [
            r.share_id ?? '-',
            uploadedFile(r),
            process.stdout.isTTY ? formatSize(r.size) : String(r.size),
            r.mode === 'create' ? 'upload' : 'replace',
            process.stdout.isTTY ? shortDate(r.started) : localIso(r.started),
            r.server,
          ]),
          // FILE is the damaged record file itself: there is no upload to name
          ...damaged.map((d) => ['-', d.file, '-', 'damaged', '-', '-']),
        ],
      );
    });
  cmd
    .command('clean')
    .description('give up every interrupted upload: delete the shares they made, forget them')
    .addHelpText('after', examples(['fshare uploads clean', 'fshare uploads clean --json']))
    .action(async (_options: object, c: Command) => {
      const session = openSession(c);
      const store = uploadRecords(configDir(session.config));
      const cleaned: Cleaned[] = [];
      const { records, damaged } = await store.scan();
      const users = new Map<string, Promise<Whoami | undefined>>();
      // Each line as its record goes: a failure that stops the command (below) used to hide what
      // it had already deleted and forgotten. --json: the array of those, then the error.
      const done = (item: Cleaned) => {
        cleaned.push(item);
        if (!session.opts.json) printLine(item.message);
      };
      try {
        for (const record of records) done(await clean(session, record, store, users));
        for (const d of damaged) {
          await store.removeDamaged(d);
          done({
            ...damagedShape(d),
            share_deleted: false,
            message: `Removed the damaged upload record ${d.file} (${d.reason}; no share to delete)`,
          });
        }
      } finally {
        if (session.opts.json) printJson(cleaned);
      }
    });
};

/** One item of `uploads clean`: the record, what became of its share, and the line said. */
type Cleaned = ReturnType<typeof recordShape> & { share_deleted: boolean; message: string };

function recordShape(r: UploadRecord, store: UploadRecordStore) {
  return {
    share_id: r.share_id as string | null,
    url: r.share_id === null ? null : shareUrl(r.server, r.share_id),
    path: fromStdin(r) ? null : (r.path as string | null),
    // (additive) the upload read standard input: there is no file to name, nor to resume from
    stdin: fromStdin(r),
    size: r.size as number | null,
    kind: r.mode === 'create' ? 'upload' : 'replace',
    started: r.started as string | null,
    server: r.server as string | null,
    running: busyElsewhere(r),
    record: store.fileOf(r),
    damaged: null as string | null,
  };
}

/** What an upload record uploaded, in lines and tables: its file, or standard input. */
const uploadedFile = (r: UploadRecord) => (fromStdin(r) ? 'standard input' : r.path);

/** A record file that cannot be used: listed (never skipped in silence) with why. */
function damagedShape(d: DamagedRecord): ReturnType<typeof recordShape> {
  return {
    share_id: null,
    url: null,
    path: null,
    stdin: false,
    size: null,
    kind: 'damaged',
    started: null,
    server: null,
    running: false,
    record: d.file,
    damaged: d.reason,
  };
}

/**
 * Forgets one interrupted upload; deletes the share it made if that share is still empty and
 * still the user's. `users`: who is signed in, per server (undefined: the server did not say).
 */
async function clean(
  session: Session,
  record: UploadRecord,
  store: UploadRecordStore,
  users: Map<string, Promise<Whoami | undefined>>,
) {
  // A record whose process is still running belongs to an upload in progress (another
  // terminal, another CI step): cleaning it used to delete that upload's share under it.
  if (busyElsewhere(record))
    return {
      ...recordShape(record, store),
      share_deleted: false,
      running: true,
      message: `Left the upload of ${uploadedFile(record)} alone: fshare process ${record.pid} is still running it`,
    };
  const client = await session.client(record.server);
  const me = () => {
    if (!users.has(record.server))
      users.set(
        record.server,
        whoami(client).catch(() => undefined),
      );
    return users.get(record.server)!;
  };
  let deleted = false;
  let id = record.share_id;
  // Handed to another user since (or no longer open to this one): not this user's to delete, and
  // never will be; its record goes, said in its line, and the others are cleaned as usual.
  let notYours = false;
  if (id === null) {
    // Stopped before its create was answered: the create again with its key names the share.
    const pending = await pendingShare(client, record).catch((err: unknown) => {
      if (err instanceof ApiError && err.status === 409) return void (notYours = true);
      throw err;
    });
    if (pending?.unknown)
      warn(
        pending.unknown
          .replace(/^the earlier upload/, 'the upload')
          .replace(record.path, uploadedFile(record)),
      );
    // Made just now (nothing earlier to give back): deleted again, and not the upload's share.
    if (pending && !pending.replayed) await deleteFile(client, pending.id);
    else id = pending?.id ?? null;
  }
  if (record.mode === 'create' && id !== null) {
    // Gone already (404) is fine; any other failure keeps the record, to try again later.
    const share = await getFile(client, id).catch(async (err: unknown) => {
      if (err instanceof ApiError && err.status === 404) return undefined;
      // A 403 for a user who lacks READ is about the user, not the share: a failure as before.
      if (
        err instanceof ApiError &&
        err.status === 403 &&
        (await me())?.permissions.includes('READ') !== false
      )
        return void (notYours = true);
      throw err;
    });
    // Anyone with READ may see a share (fshare serve): whose it is now, its owner's name says.
    const user = share ? await me() : undefined;
    if (share && user && share.owner_name !== user.username) notYours = true;
    else if (share && !share.initialized) {
      await deleteFile(client, id);
      deleted = true;
    }
  }
  await store.remove(record);
  record = { ...record, share_id: id };
  return {
    ...recordShape(record, store),
    share_deleted: deleted,
    running: false,
    message: notYours
      ? `Forgot the unfinished upload of ${uploadedFile(record)}: ${id === null ? 'the share made for it' : `share ${id}`} is no longer yours (not deleted)`
      : deleted
        ? `Deleted share ${id} of the unfinished upload of ${uploadedFile(record)}`
        : `Forgot the unfinished ${record.mode === 'create' ? 'upload' : 'replacement'} of ${uploadedFile(record)}`,
  };
}

export function registerTransfers(program: Command): void {
  upload(program);
  replace(program);
  get(program);
  uploads(program);
}
