import type { Command } from 'commander';
import { changePassword, extend, login, logout, revokeTokens, whoami } from '../../client/api.js';
import { ApiError, UnsupportedError } from '../../client/errors.js';
import { createClient, type ApiClient } from '../../client/http.js';
import type { LoginResponse } from '../../shared/types.js';
import { openSession, type Session } from '../context.js';
import { envToken, TokenNotRemovedError } from '../credentials.js';
import { promptHidden, promptLine, readStdinLines } from '../input.js';
import {
  AuthError,
  UsageError,
  errorLine,
  examples,
  printJson,
  printLine,
  warn,
} from '../output.js';

const STORED = { keychain: 'the OS keychain', file: 'the config directory' } as const;

/**
 * Stores a freshly issued token and makes its server and user the defaults. `replaces` is the
 * stored account whose token asked for it (passwd, token extend): when the server now names that
 * user otherwise (an administrator renamed them), the old entry goes, as the new one takes its
 * place. Left behind, it kept a token passwd had ended, and two accounts stored for the server
 * left a command naming it with --server without either (anonymous).
 */
async function remember(
  session: Session,
  res: LoginResponse,
  replaces?: { username: string; token: string },
): Promise<'keychain' | 'file'> {
  const { server, credentials } = session;
  if (replaces === undefined) return rememberLogin(session, res);
  // A new token that cannot be kept is revoked: the one it was to replace still works, and a
  // token nothing on this machine holds is not left valid until it expires (a full disk).
  let where: 'keychain' | 'file';
  try {
    where = await credentials.saveToken(server, res.username, res.auth_token);
  } catch (err) {
    await revokeNew(server, res);
    throw err;
  }
  try {
    session.config.assign({ server, username: res.username });
  } catch (err) {
    // Only a user renamed meanwhile changes config.json: its new name's token goes again.
    await credentials.deleteToken(server, res.username, res.auth_token).catch(() => undefined);
    await revokeNew(server, res);
    throw err;
  }
  if (replaces.username !== res.username)
    await credentials
      .deleteToken(server, replaces.username, replaces.token)
      .catch((err: unknown) => {
        if (!(err instanceof TokenNotRemovedError)) throw err;
        warn(
          `fshare: the token stored for ${replaces.username} (now ${res.username}) could not be removed from ${err.where} (${err.reason})`,
        );
      });
  return where;
}

/**
 * A login's two local steps, so that a login that fails changes nothing: its server and user are
 * recorded in config.json first, then the token is stored; when either step fails, config.json
 * is put back (as far as the disk allows) and the new token is revoked on the server. Found from
 * outside: on a full disk the token was stored and config.json then refused, so a login that
 * said "no space left on the device" (exit 1) had signed the next commands in.
 */
async function rememberLogin(session: Session, res: LoginResponse): Promise<'keychain' | 'file'> {
  const { server, credentials } = session;
  const revoke = () => revokeNew(server, res);
  let before: { server?: string; username?: string };
  try {
    before = session.config.assign({ server, username: res.username });
  } catch (err) {
    await revoke();
    throw err;
  }
  try {
    return await credentials.saveToken(server, res.username, res.auth_token);
  } catch (err) {
    try {
      session.config.assign(before);
    } catch {
      // config.json keeps naming this server and user, for which no token is stored: the next
      // command says it is not signed in, which is so.
    }
    await revoke();
    throw err;
  }
}

/** Revokes a token just issued that this machine could not keep (best effort). */
async function revokeNew(server: string, res: LoginResponse): Promise<void> {
  await logout(createClient({ server, token: res.auth_token })).catch(() => undefined);
}

/** The stored account whose token `client` carries (undefined for FSHARE_TOKEN). */
async function storedAccount(
  session: Session,
  client: ApiClient,
): Promise<{ username: string; token: string } | undefined> {
  if (envToken() !== undefined || client.token === undefined) return undefined;
  const username = await session.credentials.storedUser(
    session.server,
    session.usernameFor(session.server),
  );
  return username === undefined ? undefined : { username, token: client.token };
}

/** Whether the client's token still signs requests in (false when that cannot be told). */
async function stillWorks(client: ApiClient): Promise<boolean> {
  return whoami(client).then(
    () => true,
    () => false,
  );
}

/** FSHARE_TOKEN holds something (even a malformed value, which later commands refuse). */
function envTokenSet(): boolean {
  try {
    return envToken() !== undefined;
  } catch {
    return true;
  }
}

/** Plain HTTP to another machine: what is sent can be read on the way (loopback cannot). */
export function travelsInClear(server: string): boolean {
  const url = new URL(server);
  if (url.protocol !== 'http:') return false;
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  return !(
    host === 'localhost' ||
    host.endsWith('.localhost') ||
    /^127\.\d+\.\d+\.\d+$/.test(host) ||
    host === '::1'
  );
}

export function registerAuth(program: Command): void {
  program
    .command('login')
    .description('sign in and store the token (OS keychain, or a 0600 file when there is none)')
    .option('-u, --username <user>', 'user name (default: the last one used on this server)')
    .option('--password-stdin', 'read the password from the first line of standard input')
    .addHelpText(
      'after',
      examples([
        'fshare login -u alice',
        'fshare --server https://files.example.com login -u alice',
        'printf %s "$PASSWORD" | fshare login -u ci --password-stdin',
      ]),
    )
    .action(async (options: { username?: string; passwordStdin?: boolean }, cmd: Command) => {
      const session = openSession(cmd, { savesLogin: true });
      const username =
        options.username ??
        session.usernameFor(session.server) ??
        (await promptLine('Username: ', 'a user name', '-u USER'));
      if (!username) throw new UsageError('a user name is needed (-u USER)');
      if (travelsInClear(session.server))
        warn(
          `fshare: ${session.server} is plain HTTP: the password and the token cross the network unencrypted; use https:// unless a trusted network carries it`,
        );
      const password = options.passwordStdin
        ? (await readStdinLines(1, 'the password'))[0]!
        : await promptHidden(`Password for ${username} on ${session.server}: `);
      const res = await login(session.anonymousClient(), username, password).catch(
        (err: unknown) => {
          if (err instanceof ApiError && err.status === 401) err.hint = null; // this was the login
          throw err;
        },
      );
      const where = await remember(session, res);
      if (session.opts.json)
        printJson({ server: session.server, username: res.username, stored: where });
      else
        printLine(
          `Signed in to ${session.server} as ${res.username} (token kept in ${STORED[where]})`,
        );
      // FSHARE_TOKEN wins over the token just stored: every next command would be someone else.
      if (envTokenSet())
        warn(
          `FSHARE_TOKEN is set, and commands to ${session.server} use it, not the token of ${res.username} stored now, until it is unset`,
        );
    });

  program
    .command('logout')
    .description('revoke the token on the server, then forget it locally')
    .option('--everywhere', 'revoke every token of yours, on every machine (fshare serve)')
    .addHelpText(
      'after',
      examples([
        'fshare logout',
        'fshare logout --everywhere',
        'fshare --server http://10.0.0.5:5000 logout',
      ]),
    )
    .action(async (options: { everywhere?: boolean }, cmd: Command) => {
      const session = openSession(cmd);
      const fromEnv = envToken() !== undefined;
      const client = await session.client();
      if (!client.token) throw new AuthError(`not signed in to ${session.server}`);
      // The account whose copy goes: the last login's user here, else the server's only one.
      const lastUser = session.usernameFor(session.server);
      // FSHARE_TOKEN's user is not known from what is stored here (only --everywhere asks).
      let username = fromEnv
        ? undefined
        : await session.credentials.storedUser(session.server, lastUser);
      let serverError: unknown;
      try {
        if (options.everywhere) {
          const me = await whoami(client);
          if (!me.username) throw new AuthError(`not signed in to ${session.server}`);
          if (fromEnv) username = me.username;
          await revokeTokens(client, me.username).catch((err: unknown) => {
            // A 404 or 405 for the caller, who exists: the server has no such route (the
            // reference server). Nothing was revoked, so nothing is signed out here either.
            if (err instanceof ApiError && (err.status === 404 || err.status === 405))
              throw new UnsupportedError(
                `${client.server} does not offer signing out everywhere (an fshare serve extension): nothing was revoked, and you are still signed in (\`fshare logout\` ends this session)`,
              );
            throw err;
          });
        } else await logout(client, client.token);
      } catch (err) {
        if (err instanceof UnsupportedError) throw err;
        serverError = err;
      }
      // The local copy goes even when the server could not be told (issue 3).
      // Only the token revoked: a login run meanwhile stored a new one, which stays.
      let kept: TokenNotRemovedError | undefined;
      let newer = false;
      if (username && !fromEnv)
        newer =
          (await session.credentials
            .deleteToken(session.server, username, client.token)
            .catch((err: unknown) => {
              if (!(err instanceof TokenNotRemovedError)) throw err;
              kept = err;
            })) === 'kept';
      const copy =
        kept && `its local copy could not be removed from ${kept.where} (${kept.reason})`;
      const gone = serverError instanceof ApiError && [400, 401].includes(serverError.status);
      // Found from outside: a token of another server (or a mistyped one) in FSHARE_TOKEN was
      // said to be revoked, exit 0, while it still worked where it came from.
      if (gone && fromEnv)
        throw new AuthError(
          `${session.server} does not accept the token in FSHARE_TOKEN (HTTP ${(serverError as ApiError).status}), so nothing was revoked: it had ended already, or it is another server's (then it still works there: \`fshare --server URL logout\` with that server's URL revokes it)`,
        );
      if (serverError && !gone) {
        if (serverError instanceof Error && !fromEnv)
          serverError.message = copy
            ? `the server did not revoke the token (${serverError.message}), and ${copy}`
            : `signed out locally, but the server did not revoke the token: ${serverError.message}`;
        throw serverError;
      }
      if (copy)
        throw new Error(
          gone
            ? `the server had already ended the token, but ${copy}`
            : `the token was revoked on the server (so it no longer works), but ${copy}`,
        );
      if (gone) warn('the server had already ended that token');
      if (newer)
        warn(
          `a newer token of ${username} was stored meanwhile (another login); it is kept, and still signs you in`,
        );
      if (fromEnv) warn('the token in FSHARE_TOKEN is revoked; unset the variable');
      if (session.opts.json)
        printJson({ server: session.server, username: username ?? null, revoked: !gone });
      else printLine(`Signed out of ${session.server}`);
    });

  program
    .command('whoami')
    .description('show who you are on the server (or anonymous) and your permissions')
    .addHelpText('after', examples(['fshare whoami', 'fshare whoami --json | jq -r .username']))
    .action(async (_options: object, cmd: Command) => {
      const session = openSession(cmd);
      const me = await whoami(await session.client());
      if (session.opts.json) return printJson(me);
      printLine(`${me.username ?? 'anonymous'} on ${session.server}`);
      printLine(`permissions: ${me.permissions.length ? me.permissions.join(', ') : 'none'}`);
    });

  const token = program
    .command('token')
    .description('print the current token (for CI secrets); `token extend` renews it')
    .addHelpText(
      'after',
      examples([
        'fshare token | gh secret set FSHARE_TOKEN',
        'fshare token extend',
        'FSHARE_TOKEN=$(fshare token) fshare ls',
      ]),
    )
    .action(async (_options: object, cmd: Command) => {
      const session = openSession(cmd);
      const { token: current } = await session.client();
      if (!current) throw new AuthError(`not signed in to ${session.server}; run fshare login`);
      if (session.opts.json) printJson({ token: current }, 'secret');
      else printLine(current, 'secret');
    });

  token
    .command('extend')
    .description('get a fresh token for the same user and store it (the old one stays valid)')
    .addHelpText(
      'after',
      examples(['fshare token extend', 'FSHARE_TOKEN=… fshare token extend > new-token']),
    )
    .action(async (_options: object, cmd: Command) => {
      const session = openSession(cmd, { savesLogin: envToken() === undefined });
      const client = await session.client();
      if (!client.token)
        throw new AuthError(`not signed in to ${session.server}; run fshare login`);
      const account = await storedAccount(session, client);
      const res = await extend(client);
      if (envToken() !== undefined) {
        // A token from the environment cannot be updated in place: hand the new one back.
        if (session.opts.json)
          printJson({ username: res.username, token: res.auth_token }, 'secret');
        else printLine(res.auth_token, 'secret');
        return;
      }
      const where = await remember(session, res, account);
      if (session.opts.json)
        printJson({ server: session.server, username: res.username, stored: where });
      else printLine(`Token renewed for ${res.username} (kept in ${STORED[where]})`);
    });

  program
    .command('passwd')
    .description('change your own password')
    .option(
      '--password-stdin',
      'read the current password from the first line of standard input and the new one from the second',
    )
    .addHelpText(
      'after',
      examples([
        'fshare passwd',
        'printf "%s\\n%s\\n" "$OLD" "$NEW" | fshare passwd --password-stdin',
      ]),
    )
    .action(async (options: { passwordStdin?: boolean }, cmd: Command) => {
      const session = openSession(cmd, { savesLogin: envToken() === undefined });
      const client = await session.client();
      if (!client.token)
        throw new AuthError(`not signed in to ${session.server}; run fshare login`);
      const account = await storedAccount(session, client);
      let oldPassword: string;
      let newPassword: string;
      if (options.passwordStdin) {
        [oldPassword, newPassword] = (await readStdinLines(
          2,
          'the current and the new password',
        )) as [string, string];
      } else {
        oldPassword = await promptHidden('Current password: ');
        newPassword = await promptHidden('New password: ');
        if (!newPassword) throw new UsageError('the password must not be empty');
        if ((await promptHidden('Repeat new password: ')) !== newPassword)
          throw new UsageError('the passwords do not match');
      }
      const res = await changePassword(client, oldPassword, newPassword);
      // fshare serve ended every other token and sent a new one: keep it.
      let stored: 'keychain' | 'file' | undefined;
      /** Why the new token could not be kept, the password being changed all the same. */
      let notKept: unknown;
      if (res.auth_token && res.username && envToken() === undefined) {
        try {
          stored = await remember(session, res as LoginResponse, account);
        } catch (err) {
          notKept = err;
        }
        // The token it replaces still works (the server keeps the caller's): nothing on this
        // machine holds it any more, so it is revoked rather than left valid until it expires.
        // A server that ended it already refuses this, which changes nothing.
        if (stored) await logout(client).catch(() => undefined);
        // The new one was revoked (remember): a server that ended the caller's token too leaves
        // this machine signed out, which is said as the command's failure.
        else if (!(await stillWorks(client)))
          throw new AuthError(
            `the password was changed, but the new token could not be kept (${errorLine(notKept).replace(/^fshare: /, '')}) and the old one was ended: run fshare login`,
          );
      }
      // The variable's token goes on on a server that keeps the caller's token (fshare serve
      // since 0.2, the reference server); an older fshare serve ended it too, and the new one is
      // not printed (stdout goes to CI logs). Asked, not assumed: "every other session" would
      // say the variable's goes on.
      const envEnded =
        res.auth_token !== undefined && envToken() !== undefined && !(await stillWorks(client));
      if (session.opts.json)
        printJson({ status: res.status, message: res.message, stored: stored ?? null });
      else
        printLine(
          res.auth_token && !envEnded
            ? `Password changed; every other session was signed out${stored ? ` (new token kept in ${STORED[stored]})` : ''}`
            : 'Password changed',
        );
      if (notKept !== undefined)
        warn(
          `the new token could not be kept (${errorLine(notKept).replace(/^fshare: /, '')}): the token kept before goes on`,
        );
      if (envEnded)
        warn(
          'every session was signed out, the token in FSHARE_TOKEN too: set it to a new one (fshare login, then fshare token)',
        );
    });
}
