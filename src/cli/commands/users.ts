import type { Command } from 'commander';
import {
  createUser,
  deleteUser,
  getUser,
  getUserTagged,
  listUsers,
  patchUser,
  revokeTokens,
  setQuota,
  whoami,
} from '../../client/api.js';
import { ApiError, UnsupportedError, unknownFieldRefused } from '../../client/errors.js';
import type { ApiClient } from '../../client/http.js';
import { shownArgument } from '../../client/refs.js';
import type { Permission } from '../../shared/permissions.js';
import type { User } from '../../shared/types.js';
import { formatSize, parseSize } from '../../shared/size.js';
import { openSession } from '../context.js';
import { readNewPassword } from '../input.js';
import {
  UsageError,
  examples,
  printDetails,
  printJson,
  printLine,
  printTable,
  warn,
} from '../output.js';
import { addPageOptions, listPaged, localIso, notePage, shortDate } from '../lists.js';
import { userShape } from '../shapes.js';
import { applyPermissionChanges, formatPermissions, parsePermissionList } from './perms.js';

/**
 * GET /users/<name>. The protocol answers 403 both for "not yours" and for "no such user"; an
 * administrator may see every user, so for one a 403 can only mean the second, and says so.
 */
async function findUser(client: ApiClient, name: string): Promise<User> {
  return asAdmin(client, name, () => getUser(client, name));
}

/** A read of user NAME whose 403, for an administrator, means there is no such user (404). */
async function asAdmin<T>(client: ApiClient, name: string, read: () => Promise<T>): Promise<T> {
  try {
    return await read();
  } catch (err) {
    if (!(err instanceof ApiError) || err.status !== 403) throw err;
    const me = await whoami(client).catch(() => undefined);
    if (me?.permissions.includes('ADMIN')) throw new ApiError(404, `no such user: ${name}`);
    throw err;
  }
}

/**
 * +PERM/-PERM changes: read the user, change, write back with If-Match (fshare serve), so that
 * another change made in between (another administrator's `users perms`) is never overwritten:
 * the server refuses the write (412) and it is done again on what is there now.
 */
async function changePermissions(
  client: ApiClient,
  name: string,
  changes: string[],
): Promise<Permission[]> {
  for (let attempt = 1; ; attempt++) {
    const { user, etag } = await asAdmin(client, name, () => getUserTagged(client, name));
    const permissions = applyPermissionChanges(user.permissions, changes);
    try {
      await patchUser(client, name, { permissions }, etag);
      return permissions;
    } catch (err) {
      const again = err instanceof ApiError && err.status === 412 && etag !== undefined;
      if (!again || attempt >= 10) throw err;
    }
  }
}

/** Whether NAME is the signed-in caller (a server without GET /whoami: taken as not). */
async function isCaller(client: ApiClient, name: string): Promise<boolean> {
  if (client.token === undefined) return false;
  const me = await whoami(client).catch(() => undefined);
  return me?.username === name;
}

/**
 * A NAME argument that a URL cannot carry: "" and "." name /users/ and ".." names / (URLs drop
 * dot segments, even percent-encoded ones), so such a request would reach another endpoint. No
 * user can have these names; refused before any request (exit 2).
 */
function checkName(name: string): string {
  if (/^\.{0,2}$/.test(name)) throw new UsageError(`not a user name: "${name}"`);
  return name;
}

export function registerUsers(program: Command): void {
  const users = program
    .command('users')
    .description('manage user accounts (needs ADMIN)')
    .addHelpText(
      'after',
      examples([
        'fshare users ls',
        'fshare users add bob --perms CREATE,READ,LIST',
        'fshare users perms bob +DELETE -LIST',
      ]),
    );

  addPageOptions(
    users
      .command('ls')
      .description('list users')
      .addHelpText('after', examples(['fshare users ls', 'fshare users ls --all --json'])),
  ).action(async (options: { page?: string; perPage?: string; all?: boolean }, cmd: Command) => {
    const session = openSession(cmd);
    const client = await session.client();
    const { items, page, pageNumber } = await listPaged(options, (q) => listUsers(client, q));
    if (session.opts.json)
      return printJson({
        users: items.map(userShape),
        page: page ? pageNumber : null,
        pages: page?.pages ?? null,
        next: page?.next ?? null,
      });
    const tty = process.stdout.isTTY === true;
    const bytes = (n: number | null | undefined, none: string) =>
      n === null || n === undefined ? none : tty ? formatSize(n) : String(n);
    printTable(
      ['USER', 'PERMISSIONS', 'USED', 'QUOTA', 'REGISTERED'],
      items.map((u) => [
        u.username,
        tty ? formatPermissions(u.permissions) : u.permissions.join(','),
        bytes(u.used, '-'),
        bytes(u.quota, u.quota === null ? 'none' : '-'),
        tty ? shortDate(u.register_date) : localIso(u.register_date),
      ]),
    );
    notePage(page, pageNumber);
  });

  users
    .command('show')
    .description("show one user's permissions and registration date")
    .argument('<name>', 'user name')
    .addHelpText('after', examples(['fshare users show bob', 'fshare users show bob --json']))
    .action(async (name: string, _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const user = await findUser(await session.client(), checkName(name));
      if (session.opts.json) return printJson(userShape(user));
      printDetails([
        ['user', user.username],
        ['permissions', formatPermissions(user.permissions)],
        ['used', user.used === undefined ? '-' : `${formatSize(user.used)} (${user.used} bytes)`],
        [
          'quota',
          user.quota === undefined
            ? '-'
            : user.quota === null
              ? 'none'
              : `${formatSize(user.quota)} (${user.quota} bytes)`,
        ],
        [
          'registered',
          process.stdout.isTTY ? shortDate(user.register_date) : localIso(user.register_date),
        ],
      ]);
    });

  users
    .command('add')
    .description('create a user (prompts for the password on a terminal)')
    .argument('<name>', 'user name')
    .option(
      '--perms <list>',
      'permissions, comma-separated: CREATE,MODIFY,DELETE,LOCK,LIST,ADMIN,READ',
      '',
    )
    .option('--password-stdin', 'read the password from the first line of standard input')
    .addHelpText(
      'after',
      examples([
        'fshare users add bob --perms CREATE,READ,LIST',
        'printf %s "$PW" | fshare users add ci --perms CREATE --password-stdin',
      ]),
    )
    .action(
      async (name: string, options: { perms: string; passwordStdin?: boolean }, cmd: Command) => {
        const session = openSession(cmd);
        if (!name.trim()) throw new UsageError('the user name must not be empty');
        const permissions = parsePermissionList([options.perms]);
        const password = await readNewPassword(Boolean(options.passwordStdin), 'Password');
        const client = await session.client();
        await createUser(client, { username: name, password, permissions });
        if (session.opts.json) printJson(userShape(await getUser(client, name)));
        else printLine(`Created user ${name} (${formatPermissions(permissions)})`);
      },
    );

  users
    .command('rm')
    .description('delete users')
    .argument('<names...>', 'user names')
    .addHelpText('after', examples(['fshare users rm bob', 'fshare users rm bob carol']))
    .action(async (names: string[], _options: object, cmd: Command) => {
      const session = openSession(cmd);
      names.forEach(checkName); // before any is deleted
      const client = await session.client();
      // Your own account goes last: its token ends with it, and the names after it got 401.
      const me =
        client.token === undefined
          ? undefined
          : ((await whoami(client).catch(() => undefined))?.username ?? undefined);
      const order = [...names.filter((n) => n !== me), ...names.filter((n) => n === me)];
      const done: { username: string; deleted: true }[] = [];
      try {
        for (const name of order) {
          await deleteUser(client, name).catch((err: unknown) => {
            // Of several, the line names the one that failed (as `rm` does).
            if (order.length > 1 && err instanceof Error) err.message = `${name}: ${err.message}`;
            throw err;
          });
          done.push({ username: name, deleted: true });
          if (!session.opts.json) printLine(`Deleted user ${name}`);
        }
      } finally {
        // Also when one failed: a script learns which users are gone (as `rm` tells its shares).
        if (session.opts.json) printJson(done);
      }
      if (me !== undefined && done.some((d) => d.username === me))
        warn(
          `fshare: that was your own account: this session ended with it; sign in as another user (fshare login)`,
        );
    });

  users
    .command('perms')
    .description("change a user's permissions: +PERM adds, -PERM removes, --set replaces")
    .argument('<name>', 'user name')
    .argument('[changes...]', '+PERM or -PERM, e.g. +READ -LIST')
    .option('--set <list>', 'the complete list, comma-separated (or "none")')
    .allowUnknownOption() // "-LIST" is a change, not an option
    .addHelpText(
      'after',
      examples([
        'fshare users perms bob +READ -LIST',
        'fshare users perms bob --set READ,LIST',
        'fshare users perms bob --set none',
      ]),
    )
    .action(async (name: string, changes: string[], options: { set?: string }, cmd: Command) => {
      const session = openSession(cmd);
      checkName(name);
      if (options.set !== undefined && changes.length)
        throw new UsageError('use either --set or +PERM/-PERM changes, not both');
      if (options.set === undefined && !changes.length)
        throw new UsageError('nothing to change: pass +PERM, -PERM or --set LIST');
      if (changes.length) applyPermissionChanges([], changes); // reject typos before any request
      const client = await session.client();
      let permissions: Permission[];
      if (options.set === undefined) permissions = await changePermissions(client, name, changes);
      else {
        permissions = parsePermissionList([options.set]);
        await patchUser(client, name, { permissions });
      }
      if (session.opts.json) printJson(userShape(await getUser(client, name)));
      else printLine(`${name}: ${formatPermissions(permissions)}`);
    });

  users
    .command('passwd')
    .description("set another user's password (as ADMIN)")
    .argument('<name>', 'user name')
    .option('--password-stdin', 'read the new password from the first line of standard input')
    .addHelpText(
      'after',
      examples([
        'fshare users passwd bob',
        'printf %s "$PW" | fshare users passwd bob --password-stdin',
      ]),
    )
    .action(async (name: string, options: { passwordStdin?: boolean }, cmd: Command) => {
      const session = openSession(cmd);
      checkName(name);
      const password = await readNewPassword(
        Boolean(options.passwordStdin),
        `New password for ${name}`,
      );
      const client = await session.client();
      // Your own name: the new password ends this session's token too, so the user is read
      // before (after, the read would be a 401 for a change that was made).
      const self = await isCaller(client, name);
      const before = self && session.opts.json ? await getUser(client, name) : undefined;
      await patchUser(client, name, { password });
      if (session.opts.json) printJson(userShape(before ?? (await getUser(client, name))));
      else printLine(`Password of ${name} changed`);
      if (self)
        warn(
          `fshare: that ended every session of ${name}, this one too: run \`fshare login\` with the new password (\`fshare passwd\` changes your own and keeps you signed in)`,
        );
    });

  users
    .command('quota')
    .description("set a user's storage quota (fshare serve): uploads past it get 413")
    .argument('<name>', 'user name')
    .argument('<size>', 'bytes the user may own: 10GiB, 500m, bytes; or "none"')
    .addHelpText('after', examples(['fshare users quota bob 10GiB', 'fshare users quota bob none']))
    .action(async (name: string, size: string, _options: object, cmd: Command) => {
      const session = openSession(cmd);
      checkName(name);
      const none = size.trim().toLowerCase() === 'none';
      const quota = none ? null : parseSize(size);
      if (!none && quota === null)
        throw new UsageError(`not a size: ${shownArgument(size)} (try 10GiB, 500m, bytes or none)`);
      const client = await session.client();
      // The reference server refuses the field it does not know (400 'Unknown field.').
      await setQuota(client, name, quota).catch((err: unknown) => {
        throw unknownFieldRefused(err, 'quota')
          ? new UnsupportedError(
              `${client.server} does not support user quotas (an fshare serve extension)`,
            )
          : err;
      });
      if (session.opts.json) printJson(userShape(await getUser(client, name)));
      else printLine(`${name}: quota ${quota === null ? 'none' : formatSize(quota)}`);
    });

  users
    .command('signout')
    .description('end every token of a user, on every machine (fshare serve; ADMIN or yourself)')
    .argument('<name>', 'user name')
    .addHelpText('after', examples(['fshare users signout bob']))
    .action(async (name: string, _options: object, cmd: Command) => {
      const session = openSession(cmd);
      const client = await session.client();
      const self = await isCaller(client, checkName(name));
      await revokeTokens(client, name).catch(async (err: unknown) => {
        // A 404 for a user who exists: the server has no such route (the reference server).
        if (!(err instanceof ApiError && (err.status === 404 || err.status === 405))) throw err;
        const exists = await getUser(client, name).then(
          () => true,
          () => false,
        );
        if (!exists) throw err;
        throw new UnsupportedError(
          `${client.server} does not offer signing a user out everywhere (an fshare serve extension): ${err.message}`,
        );
      });
      if (session.opts.json) printJson({ username: name, signed_out: true });
      else printLine(`Every token of ${name} was revoked`);
      if (self) warn('fshare: that ended this session too: run `fshare login`');
    });
}
