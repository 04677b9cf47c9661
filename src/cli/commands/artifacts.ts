import { join } from 'node:path';
import type { Command } from 'commander';
import {
  fileHashCache,
  listArtifacts,
  pull,
  push,
  removeArtifact,
  type PullResult,
  type PushResult,
} from '../../client/artifacts.js';
import { whoami } from '../../client/api.js';
import type { ApiClient } from '../../client/http.js';
import { formatSize } from '../../shared/size.js';
import { parsePositiveInt } from '../args.js';
import { configDir } from '../config.js';
import { openSession } from '../context.js';
import {
  AuthError,
  examples,
  printable,
  printJson,
  printLine,
  printTable,
  warn,
} from '../output.js';
import { createProgress, progressEnabled, type ProgressBar } from '../progress.js';
import { removingTempsOnSignals } from '../signals.js';
import { damagedNotice, uploadRecords } from '../uploads.js';

const collect = (value: string, previous: string[] = []) => [...previous, value];

const n = (count: number) => count.toLocaleString('en-US');

/**
 * Whose sets a command works on: the signed-in user, as the server knows them (GET /whoami). An
 * anonymous caller has no sets: shares without an owner are anyone's to replace.
 */
async function artifactOwner(client: ApiClient): Promise<string> {
  const me = await whoami(client);
  if (!me.username)
    throw new AuthError(
      `not signed in to ${client.server}; artifacts belong to a user: run fshare login`,
    );
  return me.username;
}

/** One overall bar for a push or pull: files in the label, bytes in the bar. */
function overallBar(enabled: boolean, verb: string, name: string) {
  const progress = createProgress(enabled);
  let bar: ProgressBar | undefined;
  let files = 0;
  return {
    progress,
    onStart: (count: number, bytes: number) => {
      files = count;
      bar?.stop(); // a pull that starts over (the set was replaced under it) starts a new bar
      bar = progress.bar(`${verb} ${name} 0/${n(count)} files`, bytes);
    },
    onProgress: (done: number, bytes: number) =>
      bar?.update(bytes, undefined, `${verb} ${name} ${n(done)}/${n(files)} files`),
    stop: () => {
      bar?.stop();
      progress.stop();
    },
  };
}

function pushLine(r: PushResult): string {
  if (!r.changed)
    return `${r.name}: unchanged (${n(r.files)} files, ${formatSize(r.bytes)}); nothing uploaded`;
  return (
    `Pushed ${r.name}: ${n(r.files)} files (${formatSize(r.bytes)}); uploaded ${n(r.uploaded.files)} ` +
    `(${formatSize(r.uploaded.bytes)}), ${n(r.skipped.files)} already there, ${n(r.deleted.files)} dropped`
  );
}

function pullLine(r: PullResult): string {
  return (
    `Pulled ${r.name} into ${r.dir}: ${n(r.files)} files (${formatSize(r.bytes)}); downloaded ` +
    `${n(r.downloaded.files)} (${formatSize(r.downloaded.bytes)}), ${n(r.skipped.files)} already there, ` +
    `${n(r.deleted.files)} removed`
  );
}

export function registerArtifacts(program: Command): void {
  program
    .command('push')
    .description('upload a folder as a named set (an artifact): only what changed, verified')
    .argument('<dir>', 'the folder')
    .requiredOption('--name <name>', 'the artifact name (letters, digits, ".", "_", "-")')
    .option('--include <glob>', 'only paths matching (repeatable): "**/*.js"', collect)
    .option('--exclude <glob>', 'leave out paths matching (repeatable): "**/*.map"', collect)
    .option('--delete', 'drop files of the stored set that are not in the folder any more')
    .option('-p, --parallel <n>', 'uploads in flight', '4')
    .addHelpText(
      'after',
      examples([
        'fshare push dist --name build-1234',
        'fshare push dist --name web --exclude "**/*.map" --delete',
        'fshare push out --name nightly --json | jq .uploaded',
      ]),
    )
    .action(
      removingTempsOnSignals(
        async (
          dir: string,
          options: {
            name: string;
            include?: string[];
            exclude?: string[];
            delete?: boolean;
            parallel: string;
          },
          cmd: Command,
        ) => {
          const session = openSession(cmd);
          const parallel = parsePositiveInt(options.parallel, '--parallel', 64);
          const client = await session.client();
          const owner = await artifactOwner(client);
          const display = overallBar(progressEnabled(session.opts.progress), 'push', options.name);
          try {
            const result = await push(client, dir, {
              name: options.name,
              owner,
              include: options.include,
              exclude: options.exclude,
              delete: options.delete,
              parallel,
              resume: uploadRecords(configDir(session.config), {
                onDamaged: (d) => display.progress.log(damagedNotice(d)),
              }),
              hashCache: fileHashCache(join(configDir(session.config), 'push-hashes.json')),
              onStart: display.onStart,
              onProgress: display.onProgress,
              // A name of DIR may hold a newline or a terminal's escape: one line, shown safe.
              onNotice: (line) => display.progress.log(`fshare: ${printable(line)}`),
            });
            display.stop();
            if (session.opts.json) printJson(result);
            else printLine(pushLine(result));
          } finally {
            display.stop();
          }
        },
      ),
    );

  program
    .command('pull')
    .description(
      'download a named set into a folder: verified, only what differs; the old set or the new, never a mix',
    )
    .argument('<name>', 'the artifact name')
    .argument('[dir]', 'the folder (created if needed)', '.')
    .option('--delete', 'remove files in the folder that the set does not have')
    .option('-p, --parallel <n>', 'downloads in flight', '4')
    .addHelpText(
      'after',
      examples([
        'fshare pull build-1234 dist',
        'fshare pull web public --delete',
        'fshare pull nightly out --json | jq .downloaded',
      ]),
    )
    .action(
      removingTempsOnSignals(
        async (
          name: string,
          dir: string,
          options: { delete?: boolean; parallel: string },
          cmd: Command,
        ) => {
          const session = openSession(cmd);
          const parallel = parsePositiveInt(options.parallel, '--parallel', 64);
          const client = await session.client();
          const owner = await artifactOwner(client);
          const display = overallBar(progressEnabled(session.opts.progress), 'pull', name);
          try {
            const result = await pull(client, name, dir, {
              owner,
              delete: options.delete,
              parallel,
              onStart: display.onStart,
              onProgress: display.onProgress,
              // A name of DIR may hold a newline or a terminal's escape: one line, shown safe.
              onNotice: (line) => display.progress.log(`fshare: ${printable(line)}`),
            });
            display.stop();
            if (session.opts.json) printJson(result);
            else printLine(pullLine(result));
          } finally {
            display.stop();
          }
        },
      ),
    );

  const artifacts = program
    .command('artifacts')
    .description('list your named sets on the server')
    .addHelpText('after', examples(['fshare artifacts', 'fshare artifacts rm build-1234']))
    .action(
      removingTempsOnSignals(async (_options: object, cmd: Command) => {
        const session = openSession(cmd);
        const client = await session.client();
        const list = await listArtifacts(client, await artifactOwner(client), warn);
        if (session.opts.json) return printJson(list);
        if (list.length === 0) {
          if (process.stdout.isTTY) printLine('No artifacts.');
          return;
        }
        printTable(
          ['NAME', 'FILES', 'SIZE', 'PUSHED'],
          list.map((a) => [
            a.name,
            n(a.files),
            formatSize(a.bytes),
            a.created.slice(0, 16).replace('T', ' '),
          ]),
        );
      }),
    );

  artifacts
    .command('rm')
    .description('delete a named set: its manifest first, then its data')
    .argument('<names...>', 'artifact names')
    .addHelpText(
      'after',
      examples(['fshare artifacts rm build-1234', 'fshare artifacts rm nightly-1 nightly-2']),
    )
    .action(
      removingTempsOnSignals(async (names: string[], _options: object, cmd: Command) => {
        const session = openSession(cmd);
        const client = await session.client();
        const owner = await artifactOwner(client);
        const done: { name: string; deleted: true; shares: number }[] = [];
        for (const name of names) {
          const { shares } = await removeArtifact(client, name, owner);
          done.push({ name, deleted: true, shares });
          if (!session.opts.json) printLine(`Deleted artifact ${name} (${shares} shares)`);
        }
        if (session.opts.json) printJson(done);
      }),
    );
}
