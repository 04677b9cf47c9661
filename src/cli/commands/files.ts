import type { Command } from 'commander';
import {
  deleteFile,
  getFile,
  shareLinks,
  listFiles,
  lockFile,
  patchFile,
  unlockFile,
} from '../../client/api.js';
import { ApiError } from '../../client/errors.js';
import type { ApiClient } from '../../client/http.js';
import { formatSize } from '../../shared/size.js';
import type { Share } from '../../shared/types.js';
import { configDir } from '../config.js';
import { openSession, type Session } from '../context.js';
import { uploadRecords } from '../uploads.js';
import {
  addPageOptions,
  listPaged,
  localIso,
  notePage,
  shortDate,
  type PageOptions,
} from '../lists.js';
import {
  UsageError,
  examples,
  printDetails,
  printJson,
  printLine,
  printTable,
  eachReporting,
} from '../output.js';
import { linkShape, shareShape } from '../shapes.js';
import { describeExpiry } from './links.js';

function stateOf(share: Share): string {
  const flags = [share.locked ? 'locked' : '', share.initialized ? '' : 'empty'].filter(Boolean);
  return flags.join(',') || '-';
}

/** A change to one share: done, then the share as it is now (one JSON shape for every command). */
async function changeShare(
  session: Session,
  ref: string,
  change: (client: ApiClient, id: string) => Promise<unknown>,
  line: (id: string) => string,
): Promise<void> {
  const { client, id } = await session.shareClient(ref);
  await change(client, id);
  if (session.opts.json) printJson(shareShape(client.server, await getFile(client, id)));
  else printLine(line(id));
}

export function registerFiles(program: Command): void {
  addPageOptions(
    program
      .command('ls')
      .description('list shares as a table')
      .addHelpText(
        'after',
        examples([
          'fshare ls',
          'fshare ls --page 2 --per-page 50',
          'fshare ls --all --json | jq ".shares | length"',
        ]),
      ),
  ).action(async (options: PageOptions, cmd: Command) => {
    const session = openSession(cmd);
    const client = await session.client();
    const { items, page, pageNumber } = await listPaged(options, (q) => listFiles(client, q));
    if (session.opts.json)
      return printJson({
        shares: items.map((s) => shareShape(client.server, s)),
        page: page ? pageNumber : null,
        pages: page?.pages ?? null,
        next: page?.next ?? null,
      });
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
        tty ? shortDate(s.create_date) : localIso(s.create_date),
      ]),
    );
    notePage(page, pageNumber);
  });

  program
    .command('info')
    .description("show one share's metadata")
    .argument('<id>', 'share id or URL')
    .addHelpText(
      'after',
      examples(['fshare info 3f0c…e1', 'fshare info 3f0c…e1 --json | jq .sha256']),
    )
    .action(async (ref: string, _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const { client, id } = await session.shareClient(ref);
      const share = shareShape(client.server, await getFile(client, id));
      // Links are shown to whoever may manage them (the owner, ADMIN); null for anyone else, or
      // a server without links. Any other failure (a 5xx, the network) fails the command: null
      // would say there is nothing to see.
      const links = await shareLinks(client, id).then(
        (r) => r.data,
        (err: unknown) => {
          if (err instanceof ApiError && [401, 403, 404, 405].includes(err.status)) return null;
          throw err;
        },
      );
      if (session.opts.json) return printJson({ ...share, links: links && links.map(linkShape) });
      const active = links?.filter((l) => l.state === 'active').length ?? 0;
      printDetails([
        ['id', share.share_id],
        ['name', share.file_name],
        ['size', share.size === null ? '-' : `${formatSize(share.size)} (${share.size} bytes)`],
        ['sha256', share.sha256 ?? '-'],
        ['owner', share.owner_name ?? '(anonymous)'],
        ['content', share.initialized ? 'yes' : 'none yet'],
        ['locked', share.locked ? 'yes' : 'no'],
        [
          'created',
          process.stdout.isTTY ? shortDate(share.create_date) : localIso(share.create_date),
        ],
        ['expires', describeExpiry(share.expires)],
        ...(links === null
          ? []
          : ([
              [
                'links',
                links.length === 0
                  ? 'none'
                  : `${active} active of ${links.length} (fshare links ${share.share_id})`,
              ],
            ] as [string, string][])),
        ['url', share.url],
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
        'fshare ls --json | jq -r ".shares[].share_id" | xargs fshare rm',
      ]),
    )
    .action(async (refs: string[], _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const targets = await Promise.all(refs.map((ref) => session.shareClient(ref)));
      const done: { share_id: string; deleted: true }[] = [];
      const records = uploadRecords(configDir(session.config));
      const unfinished = await records.list();
      process.exitCode = await eachReporting(
        targets,
        async ({ client, id }) => {
          await deleteFile(client, id);
          // An unfinished upload into that share has nothing left to resume.
          for (const r of unfinished)
            if (r.share_id === id && r.server === client.server) await records.remove(r);
          done.push({ share_id: id, deleted: true });
          if (!session.opts.json) printLine(`Deleted ${id}`);
        },
        ({ id }) => id,
      );
      if (session.opts.json) printJson(done);
    });

  program
    .command('rename')
    .description("change a share's file name")
    .argument('<id>', 'share id or URL')
    .argument('<name>', 'new file name')
    .addHelpText('after', examples(['fshare rename 3f0c…e1 "final report.pdf"']))
    .action(async (ref: string, name: string, _options: object, cmd: Command) => {
      if (!name) throw new UsageError('the new name must not be empty');
      await changeShare(
        openSession(cmd),
        ref,
        (client, id) => patchFile(client, id, { file_name: name }),
        (id) => `Renamed ${id} to ${name}`,
      );
    });

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
        if ((user === undefined) === !options.anonymous)
          throw new UsageError('name a user or pass --anonymous (one of the two)');
        const owner = options.anonymous ? null : user!;
        await changeShare(
          openSession(cmd),
          ref,
          (client, id) => patchFile(client, id, { owner_name: owner }),
          (id) => `${id} now belongs to ${owner ?? 'anonymous users'}`,
        );
      },
    );

  program
    .command('lock')
    .description('lock a share: no changes or deletion until it is unlocked')
    .argument('<id>', 'share id or URL')
    .addHelpText('after', examples(['fshare lock 3f0c…e1']))
    .action(async (ref: string, _options: object, cmd: Command) => {
      await changeShare(openSession(cmd), ref, lockFile, (id) => `Locked ${id}`);
    });

  program
    .command('unlock')
    .description('unlock a share')
    .argument('<id>', 'share id or URL')
    .addHelpText('after', examples(['fshare unlock 3f0c…e1']))
    .action(async (ref: string, _options: object, cmd: Command) => {
      await changeShare(openSession(cmd), ref, unlockFile, (id) => `Unlocked ${id}`);
    });
}
