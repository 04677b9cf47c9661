import type { Command } from 'commander';
import { getSettings, patchSettings } from '../../client/api.js';
import { openSession } from '../context.js';
import { UsageError, examples, printJson, printLine } from '../output.js';
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
      if (session.opts.json) return printJson(current);
      printLine(`anonymous permissions: ${formatPermissions(current.default_permissions)}`);
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
      if (session.opts.json) printJson(await getSettings(client));
      else printLine(`anonymous permissions: ${formatPermissions(defaultPermissions)}`);
    });
}
