import type { Command } from 'commander';
import { getSettings, patchSettings } from '../../client/api.js';
import { unknownFieldRefused } from '../../client/errors.js';
import { openSession } from '../context.js';
import type { Settings } from '../../shared/types.js';
import { formatDuration } from '../../shared/duration.js';
import { parseExpiry, parsePositiveInt } from '../args.js';
import { UsageError, examples, printJson, printLine, warn } from '../output.js';
import { formatPermissions, parsePermissionList } from './perms.js';

export function registerSettings(program: Command): void {
  const settings = program
    .command('settings')
    .description('server settings (needs ADMIN)')
    .addHelpText('after', examples(['fshare settings show', 'fshare settings anon READ']));

  settings
    .command('show')
    .description('show the server settings')
    .addHelpText('after', examples(['fshare settings show', 'fshare settings show --json']))
    .action(async (_options: object, cmd: Command) => {
      const session = openSession(cmd);
      const current = await getSettings(await session.client());
      if (session.opts.json) return printJson(settingsShape(current));
      printSettings(current);
    });

  settings
    .command('limits')
    .description(
      'limit the expiry and download count users without ADMIN may give shares and links',
    )
    .option('--max-expiry <duration>', 'longest expiry (12h, 30d…), or none')
    .option('--max-downloads <n>', 'most downloads per link, or none')
    .addHelpText(
      'after',
      examples([
        'fshare settings limits --max-expiry 30d --max-downloads 100',
        'fshare settings limits --max-expiry none',
      ]),
    )
    .action(async (options: { maxExpiry?: string; maxDownloads?: string }, cmd: Command) => {
      const session = openSession(cmd);
      const changes: Partial<Settings> = {};
      if (options.maxExpiry !== undefined)
        changes.max_expiry = parseExpiry(options.maxExpiry, '--max-expiry', true, 'none');
      if (options.maxDownloads !== undefined)
        changes.max_downloads = /^(none|never)$/i.test(options.maxDownloads.trim())
          ? null
          : parsePositiveInt(options.maxDownloads, '--max-downloads');
      if (Object.keys(changes).length === 0)
        throw new UsageError('give --max-expiry, --max-downloads or both');
      const client = await session.client();
      const keys = Object.keys(changes) as (keyof Settings)[];
      const noSetting = (key: string) =>
        new UsageError(`${client.server} has no setting ${key} (an fshare serve extension)`);
      // The reference server refuses a setting it does not know (400 'Unknown field.').
      await patchSettings(client, changes).catch((err: unknown) => {
        const unknown = keys.find((key) => unknownFieldRefused(err, key));
        throw unknown ? noSetting(unknown) : err;
      });
      const current = await getSettings(client);
      // Checked, not assumed: a server without these settings may ignore them.
      for (const key of keys) if (current[key] === undefined) throw noSetting(key);
      if (session.opts.json) printJson(settingsShape(current));
      else printSettings(current);
    });

  settings
    .command('anon')
    .description('set what anonymous users may do (default_permissions)')
    .argument('[perms...]', 'permissions, e.g. READ LIST (or READ,LIST)')
    .option('--none', 'anonymous users may do nothing')
    .addHelpText(
      'after',
      examples([
        'fshare settings anon READ          # anyone with a link can download',
        'fshare settings anon READ LIST',
        'fshare settings anon --none',
      ]),
    )
    .action(async (perms: string[], options: { none?: boolean }, cmd: Command) => {
      const session = openSession(cmd);
      if (options.none && perms.length)
        throw new UsageError('give permissions or --none, not both');
      if (!options.none && !perms.length)
        throw new UsageError('give the anonymous permissions (e.g. READ) or --none');
      const defaultPermissions = options.none ? [] : parsePermissionList(perms);
      const client = await session.client();
      await patchSettings(client, { default_permissions: defaultPermissions });
      if (session.opts.json) printJson(settingsShape(await getSettings(client)));
      else printLine(`anonymous permissions: ${formatPermissions(defaultPermissions)}`);
      // The contract allows it, and it hands the server to anyone: said, on every run that sets it.
      if (defaultPermissions.includes('ADMIN'))
        warn(
          `anyone who can reach ${session.server} may now, without signing in, manage its users and settings (ADMIN), make themselves an administrator included; take it back with fshare settings anon --none (or a list without ADMIN)`,
        );
    });
}

/** Settings as --json prints them: fields a server does not have are null. */
function settingsShape(s: Settings) {
  return {
    default_permissions: s.default_permissions,
    max_expiry: s.max_expiry ?? null,
    max_downloads: s.max_downloads ?? null,
  };
}

function printSettings(s: Settings): void {
  printLine(`anonymous permissions: ${formatPermissions(s.default_permissions)}`);
  if (s.max_expiry !== undefined)
    printLine(
      `max expiry:            ${s.max_expiry === null ? 'none' : formatDuration(s.max_expiry)}`,
    );
  if (s.max_downloads !== undefined)
    printLine(`max downloads:         ${s.max_downloads === null ? 'none' : s.max_downloads}`);
}
