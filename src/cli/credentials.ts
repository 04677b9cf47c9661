/**
 * Where the CLI keeps bearer tokens (CLI.md, "Finding the server and the credentials"):
 * `FSHARE_TOKEN` > the OS keychain (service `fshare`, one account per server and user) > a 0600
 * fallback file `<configDir>/credentials.json`, used only when no keychain answers, with a
 * one-line warning. `FSHARE_KEYRING=off` skips the keychain and uses the file without a warning
 * (for tests and boxes where a keychain prompt would be unwelcome).
 *
 * Tokens never reach a log line, an error message or stdout from this module.
 */
import { chmod, lstat, open, rename, unlink, type FileHandle } from 'node:fs/promises';
import { connect } from 'node:net';
import { join } from 'node:path';
import type { AsyncEntry } from '@napi-rs/keyring';
import { withFileLock } from '../shared/filelock.js';
import { ownedTempName } from '../shared/owned-temp.js';
import { naming, systemErrorText } from '../shared/syserr.js';
import { normalizeServer } from '../client/http.js';
import { UsageError } from './output.js';
import { makeDirs } from '../shared/mkdirs.js';

/**
 * FSHARE_TOKEN as a CI secret often arrives: with a line break at the end (read from a file) or
 * pasted with its "Bearer " in front. Both are taken off; what is left must be one word.
 */
export function envToken(): string | undefined {
  const raw = process.env.FSHARE_TOKEN;
  if (raw === undefined) return undefined;
  const token = raw.trim().replace(/^Bearer\s+/i, '');
  if (token === '') return undefined;
  if (/[\s\u0000-\u001f\u007f]/.test(token))
    throw new UsageError('FSHARE_TOKEN is not a token: it has spaces or line breaks inside');
  if (!isTokenText(token))
    throw new UsageError(
      'FSHARE_TOKEN is not a token: it has characters other than printable ASCII inside',
    );
  return token;
}

/**
 * What an HTTP header can carry as a bearer token: printable ASCII, no spaces. Anything else
 * stored as a token (a damaged keychain entry or credentials.json) failed every request with
 * undici's `Invalid character in header content ["authorization"]`.
 */
function isTokenText(token: string): boolean {
  return /^[\x21-\x7e]+$/.test(token);
}

export interface CredentialStore {
  /**
   * Token for server+user: FSHARE_TOKEN env first (unless `stored` asks for the stored one only),
   * then keychain, then the 0600 fallback file; undefined if none.
   */
  getToken(
    server: string,
    username: string | undefined,
    options?: { stored?: boolean },
  ): Promise<string | undefined>;
  /** Saves in the keychain; falls back to the 0600 file with a one-line stderr warning (via `warn`). Returns where it went. */
  /** The user whose stored token getToken finds for `server` (FSHARE_TOKEN aside), if any. */
  storedUser(server: string, username: string | undefined): Promise<string | undefined>;
  saveToken(server: string, username: string, token: string): Promise<'keychain' | 'file'>;
  /**
   * Removes the stored token (keychain and file); TokenNotRemovedError when a copy stays. With
   * `only`, an entry holding another token (a login run meanwhile stored a new one) is kept:
   * 'kept' says so.
   */
  deleteToken(server: string, username: string, only?: string): Promise<'removed' | 'kept'>;
}

/** Keychain service name shared by every fshare entry. */
export const KEYCHAIN_SERVICE = 'fshare';

/** File name of the fallback store inside the config directory. */
export const CREDENTIALS_FILE = 'credentials.json';

/** A Secret Service that never answers must not hang `fshare login`; give up after this long. */
const KEYCHAIN_TIMEOUT_MS = 3_000;

/** How long the D-Bus session bus gets to answer the first byte of its handshake. */
const BUS_TIMEOUT_MS = 1_500;

/** Map from keychain account to token: the fallback file's whole content. */
type TokenFile = Record<string, string>;

type KeyringModule = typeof import('@napi-rs/keyring');

/**
 * Keychain account for a server and user: `<username>@<server URL normalised>`, so that
 * `HTTP://Host:80/` and `http://host` name the same entry.
 */
export function keychainAccount(server: string, username: string): string {
  return `${username}@${normalizeServer(server)}`;
}

export function createCredentialStore(
  configDir: string,
  warn: (line: string) => void,
): CredentialStore {
  const file = join(configDir, CREDENTIALS_FILE);
  const keychainOff = (): boolean => process.env.FSHARE_KEYRING?.toLowerCase() === 'off';

  let damageTold = false;

  /** The file's tokens; a damaged file is said once (one line) and holds none for the command. */
  async function readFileTokens(): Promise<TokenFile> {
    const read = await loadFileTokens();
    if ('tokens' in read) return read.tokens;
    if (!damageTold)
      warn(
        `fshare: the credentials file ${file} is damaged (${read.damage}); no token in it is used until it is fixed or moved away`,
      );
    damageTold = true;
    return {};
  }

  async function loadFileTokens(): Promise<{ tokens: TokenFile } | { damage: string }> {
    let handle: FileHandle;
    try {
      handle = await open(file, 'r');
    } catch (err) {
      if (isErrno(err, 'ENOENT')) return { tokens: {} };
      throw naming(err, file);
    }
    try {
      const text = await handle.readFile('utf8');
      await keepPrivate(handle);
      return parseTokenFile(text);
    } catch (err) {
      throw naming(err, file); // a read's EISDIR carries no path
    } finally {
      await handle.close();
    }
  }

  let looseTold = false;

  /**
   * The file is made 0600 again when it is found open to others (restored from a backup, copied
   * with `cp -r` or synced as a dotfile under a umask of 022): found from outside, it was used
   * as it was, tokens readable by every user of the machine. Said once per command.
   */
  async function keepPrivate(handle: FileHandle): Promise<void> {
    const { mode } = await handle.stat();
    if ((mode & 0o077) === 0) return;
    const was = (mode & 0o777).toString(8);
    const fixed = await handle.chmod(0o600).then(
      async () => ((await handle.stat()).mode & 0o077) === 0,
      () => false,
    );
    if (looseTold) return;
    looseTold = true;
    warn(
      fixed
        ? `fshare: the credentials file ${file} was open to other users (mode ${was}); it is 0600 again, but its tokens may have been read: fshare logout --everywhere ends every token of yours on a server`
        : `fshare: the credentials file ${file} is open to other users (mode ${was}) and could not be made 0600, so its tokens can be read: move it into a private FSHARE_CONFIG_DIR`,
    );
  }

  /**
   * Moves a damaged file out of the way, never over an earlier one, and says where: it may hold
   * the tokens of other servers, which a new file would otherwise have overwritten.
   */
  async function setAside(damage: string): Promise<void> {
    const stamp = new Date()
      .toISOString()
      .replace(/[-:]/g, '')
      .replace(/\.\d+Z$/, 'Z');
    let aside = `${file}.damaged-${stamp}`;
    for (let n = 2; await exists(aside); n++) aside = `${file}.damaged-${stamp}-${n}`;
    await rename(file, aside);
    await chmod(aside, 0o600).catch(() => undefined); // it holds tokens: never readable by others
    warn(
      `fshare: the credentials file ${file} was damaged (${damage}); it was moved to ${aside} and a new one started`,
    );
  }

  /** Replaces the file atomically (0600 temp file + rename); an empty map removes it. */
  async function writeFileTokens(tokens: TokenFile): Promise<void> {
    if (Object.keys(tokens).length === 0) {
      await unlink(file).catch((err: unknown) => {
        if (!isErrno(err, 'ENOENT')) throw err;
      });
      return;
    }
    await makeDirs(configDir);
    // Named by its writer (pid, host): a killed write's temp, which may hold a token, is swept by
    // the next command (sweepConfigTemps), never a live one's.
    const tmp = ownedTempName(file);
    // 'wx' + 0600: the temp file is never readable by others, not even for an instant.
    // Failures name the file being written, not its temporary stand-in.
    const handle = await open(tmp, 'wx', 0o600).catch((err: unknown) => {
      throw renaming(err, file);
    });
    try {
      await handle.chmod(0o600); // a umask can only narrow the mode; this pins it exactly
      // A file system that keeps no permissions (exFAT, a Windows drive under WSL) takes the
      // chmod and shows every file to every user: no token is written there.
      const { mode } = await handle.stat();
      if ((mode & 0o077) !== 0)
        throw new Error(
          `${configDir} is on a file system that keeps no file permissions (a file made 0600 ` +
            `there is ${(mode & 0o777).toString(8)}), so other users could read the token: none ` +
            `was stored; set FSHARE_CONFIG_DIR to a directory on another file system`,
        );
      await handle.writeFile(`${JSON.stringify(tokens, null, 2)}\n`, 'utf8');
      await handle.sync();
    } catch (err) {
      await handle.close();
      await unlink(tmp).catch(() => undefined);
      throw naming(err, file);
    }
    await handle.close();
    try {
      await rename(tmp, file);
    } catch (err) {
      await unlink(tmp).catch(() => undefined);
      throw renaming(err, file);
    }
  }

  /**
   * Reads, changes and writes the token file under its lock (commands run at once take turns).
   * A damaged file is set aside first when `change` adds a token, and left alone otherwise.
   */
  async function changeFileTokens(
    change: (tokens: TokenFile) => boolean,
    adds: boolean,
  ): Promise<void> {
    await makeDirs(configDir).catch(() => undefined);
    await withFileLock(`${file}.lock`, async () => {
      const read = await loadFileTokens();
      let tokens: TokenFile;
      if ('tokens' in read) tokens = read.tokens;
      else if (!adds) return;
      else {
        await setAside(read.damage);
        tokens = {};
      }
      if (change(tokens)) await writeFileTokens(tokens);
    });
  }

  /**
   * Throws TokenNotRemovedError when a copy is there and cannot be removed. With `only`, the entry
   * goes only while it holds that token (checked under the lock); false when it held another.
   */
  async function removeFromFile(account: string, only?: string): Promise<boolean> {
    let kept = false;
    try {
      // Most often there is nothing to remove (the keychain holds the tokens): no lock for that.
      if (!Object.hasOwn(await readFileTokens(), account)) return true;
      await changeFileTokens((tokens) => {
        if (!Object.hasOwn(tokens, account)) return false;
        if (only !== undefined && tokens[account] !== only) return !(kept = true);
        return delete tokens[account];
      }, false);
    } catch (err) {
      throw new TokenNotRemovedError(file, err);
    }
    return !kept;
  }

  /** A keychain entry that is not a token (the file's entries are checked as it is read). */
  function damagedEntry(account: string): void {
    warn(
      `fshare: the OS keychain's entry ${JSON.stringify(account)} (service ${KEYCHAIN_SERVICE}) is damaged (it is not a token) and is not used; fshare login replaces it`,
    );
  }

  /** Without a username, the token of the server's only account, if exactly one is stored. */
  async function findSoleToken(server: string): Promise<string | undefined> {
    const sole = await findSoleAccount(server);
    if (sole && !isTokenText(sole.token)) {
      damagedEntry(keychainAccount(server, sole.username));
      return undefined;
    }
    return sole?.token;
  }

  async function findSoleAccount(
    server: string,
  ): Promise<{ username: string; token: string } | undefined> {
    const suffix = `@${normalizeServer(server)}`;
    const found = new Map<string, string>();
    if (!keychainOff()) {
      const credentials = await withKeyring((keyring, signal) =>
        keyring.findCredentialsAsync(KEYCHAIN_SERVICE, null, signal),
      ).catch(() => []);
      for (const { account, password } of credentials) {
        if (account.endsWith(suffix)) found.set(account, password);
      }
    }
    for (const [account, token] of Object.entries(await readFileTokens())) {
      if (account.endsWith(suffix) && !found.has(account)) found.set(account, token);
    }
    // An account of a server whose URL ends in `@<this server>` (a path such as
    // `/x@http://host`) ends with the same suffix: its "user name" holds a URL, which no user
    // name does. Found from outside: that server's token went to this one.
    for (const account of found.keys())
      if (account.slice(0, -suffix.length).includes('://')) found.delete(account);
    if (found.size !== 1) return undefined;
    const [account, token] = [...found][0]!;
    return { username: account.slice(0, -suffix.length), token };
  }

  return {
    async getToken(server, username, { stored = false } = {}) {
      const fromEnv = stored ? undefined : envToken();
      if (fromEnv) return fromEnv;

      if (username === undefined) return findSoleToken(server);

      const account = keychainAccount(server, username);
      if (!keychainOff()) {
        // An unreachable or failing keychain is not an error here: the file may hold the token.
        const fromKeychain = await keychain(
          (entry, signal) => entry.getPassword(signal),
          account,
        ).catch(() => null);
        if (fromKeychain && isTokenText(fromKeychain)) return fromKeychain;
        if (fromKeychain) damagedEntry(account);
      }
      return (await readFileTokens())[account];
    },

    async storedUser(server, username) {
      return username ?? (await findSoleAccount(server))?.username;
    },

    async saveToken(server, username, token) {
      const account = keychainAccount(server, username);
      if (!keychainOff()) {
        const saved = await keychain((entry, signal) => entry.setPassword(token, signal), account)
          .then(() => true)
          .catch(() => false);
        if (saved) {
          // A copy left from an earlier keychain-less login would outlive this one on disk.
          await removeFromFile(account).catch((err: TokenNotRemovedError) =>
            warn(
              `fshare: the token is in the OS keychain, but an older copy could not be removed from ${err.where} (${err.reason})`,
            ),
          );
          return 'keychain';
        }
      }
      await changeFileTokens((tokens) => {
        tokens[account] = token;
        return true;
      }, true);
      if (!keychainOff()) {
        warn(`fshare: no OS keychain available; token saved to ${file} (mode 0600)`);
      }
      return 'file';
    },

    async deleteToken(server, username, only) {
      const account = keychainAccount(server, username);
      let kept = false;
      if (!keychainOff()) {
        // A token stored meanwhile by another command (a login) is not the one to forget.
        const current =
          only === undefined
            ? null
            : await keychain((entry, signal) => entry.getPassword(signal), account).catch(
                () => null,
              );
        if (current && current !== only) kept = true;
      }
      if (!keychainOff() && !kept) {
        const deleted = await keychain(
          (entry, signal) => entry.deletePassword(signal),
          account,
        ).catch(() => false);
        if (!deleted) {
          // A failed delete looks like an unreachable keychain; only a token still readable is an error.
          const left = await keychain((entry, signal) => entry.getPassword(signal), account).catch(
            () => null,
          );
          if (left)
            throw new TokenNotRemovedError(
              'the OS keychain',
              new Error(`its entry ${account} is still there`),
            );
        }
      }
      if (!(await removeFromFile(account, only))) kept = true;
      return kept ? 'kept' : 'removed';
    },
  };
}

let keyringModule: Promise<KeyringModule> | undefined;

/** Loaded on first use: a missing native binding must leave the file fallback working. */
function loadKeyring(): Promise<KeyringModule> {
  keyringModule ??= import('@napi-rs/keyring');
  return keyringModule;
}

/** Runs one keychain call on the entry for `account`, rejecting on any failure or after the timeout. */
function keychain<T>(
  call: (entry: AsyncEntry, signal: AbortSignal) => Promise<T>,
  account: string,
): Promise<T> {
  return withKeyring((keyring, signal) => {
    // Pinned to the Secret Service on Linux: the default would fall back to the kernel keyring,
    // which forgets the token at logout, so a headless box would "save" it and lose it.
    const entry = new keyring.AsyncEntry(KEYCHAIN_SERVICE, account, {
      linux: { store: 'secret-service' },
    });
    return call(entry, signal);
  });
}

async function withKeyring<T>(
  call: (keyring: KeyringModule, signal: AbortSignal) => Promise<T>,
): Promise<T> {
  if (!(await sessionBusAnswers())) throw new Error('D-Bus session bus did not answer');
  const keyring = await loadKeyring();
  const controller = new AbortController();
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => {
      controller.abort();
      reject(new Error(`OS keychain did not answer within ${KEYCHAIN_TIMEOUT_MS} ms`));
    }, KEYCHAIN_TIMEOUT_MS);
  });
  try {
    // The constructor throws synchronously when there is no D-Bus session: inside the async body.
    return await Promise.race([call(keyring, controller.signal), timeout]);
  } finally {
    clearTimeout(timer);
  }
}

let busCheck: Promise<boolean> | undefined;

/**
 * False only when a D-Bus session bus accepts a connection but stays silent: libdbus would then
 * block the main thread inside the synchronous `AsyncEntry` constructor, beyond any JS timeout.
 * Anything else (no bus, odd address, macOS, Windows) is left for the keyring library to judge.
 */
function sessionBusAnswers(): Promise<boolean> {
  busCheck ??= new Promise((resolve) => {
    const path = sessionBusSocket();
    if (path === undefined) return resolve(true);
    const socket = connect(path);
    const done = (answered: boolean): void => {
      socket.destroy();
      resolve(answered);
    };
    socket.setTimeout(BUS_TIMEOUT_MS, () => done(false));
    socket.on('error', () => done(true));
    // A bare AUTH always gets an immediate REJECTED line listing the mechanisms.
    socket.once('connect', () => socket.write('\0AUTH\r\n'));
    socket.once('data', () => done(true));
  });
  return busCheck;
}

/** Socket path of the session bus where libdbus would look for it (Secret Service platforms only). */
function sessionBusSocket(): string | undefined {
  if (process.platform === 'darwin' || process.platform === 'win32') return undefined;
  const address = process.env.DBUS_SESSION_BUS_ADDRESS;
  if (!address) {
    const runtime = process.env.XDG_RUNTIME_DIR;
    return runtime ? join(runtime, 'bus') : undefined;
  }
  // Only the first address is probed; libdbus tries them in order and the first usually wins.
  const [transport, params = ''] = (address.split(';')[0] ?? '').split(/:(.*)/s);
  if (transport !== 'unix') return undefined;
  const values = new Map(
    params.split(',').map((pair) => {
      const [key = '', value = ''] = pair.split(/=(.*)/s);
      return [key, decodeDbusValue(value)] as const;
    }),
  );
  // Abstract sockets are left out: libuv cannot name them exactly, so a probe would prove nothing.
  return values.get('path');
}

/** D-Bus address values escape bytes as %XX. */
function decodeDbusValue(value: string): string {
  return value.replace(/%([0-9a-fA-F]{2})/g, (_, hex: string) =>
    String.fromCharCode(parseInt(hex, 16)),
  );
}

/** The file's tokens, or what is wrong with it (it holds nothing but account → token strings). */
function parseTokenFile(text: string): { tokens: TokenFile } | { damage: string } {
  if (text.trim() === '') return { damage: 'it is empty' };
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { damage: 'it is not valid JSON' };
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value))
    return { damage: 'it is not a JSON object' };
  for (const [account, token] of Object.entries(value)) {
    if (typeof token !== 'string' || !isTokenText(token))
      return { damage: `the entry ${JSON.stringify(account)} is not a token` };
  }
  return { tokens: value as TokenFile };
}

async function exists(path: string): Promise<boolean> {
  return lstat(path).then(
    () => true,
    (err: unknown) => !isErrno(err, 'ENOENT'),
  );
}

/**
 * The local copy of a token could not be removed: `where` is the file (or the keychain), `reason`
 * what stopped it, in words without the path.
 */
export class TokenNotRemovedError extends Error {
  override readonly name = 'TokenNotRemovedError';
  readonly reason: string;
  constructor(
    readonly where: string,
    cause: unknown,
  ) {
    const e = cause as NodeJS.ErrnoException | null;
    const reason =
      systemErrorText(e?.syscall ? { ...e, path: undefined, dest: undefined } : e) ??
      (cause instanceof Error ? cause.message : String(cause));
    super(`could not remove the token from ${where} (${reason})`, { cause });
    this.reason = reason;
  }
}

/** A system error about a temporary file, made to name the file it stands in for. */
function renaming(err: unknown, path: string): unknown {
  if (err && typeof err === 'object' && 'path' in err) (err as { path?: string }).path = path;
  return naming(err, path);
}

function isErrno(err: unknown, code: string): boolean {
  return err instanceof Error && (err as NodeJS.ErrnoException).code === code;
}
