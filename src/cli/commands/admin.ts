import { mkdtemp, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import type { Command } from 'commander';
import { backendOptions, describeBackends } from '../backends.js';
import { readNewPassword } from '../input.js';
import { NotFoundError, UsageError, examples, printJson, printLine, warn } from '../output.js';

interface BackendOpts {
  database?: string;
  storage?: string;
  s3Endpoint?: string;
  s3ForcePathStyle?: boolean;
  dataDir?: string;
}

/**
 * A directory that does not exist yet or is empty: an export never mixes with other data. An
 * fshare data directory passes, for the copy to decide: one that an export cut short left is
 * started over, any other is refused as holding users or shares.
 */
async function mustBeEmpty(dir: string): Promise<void> {
  try {
    const names = await readdir(dir);
    if (names.length > 0 && !names.some((n) => METADATA_FILES.includes(n)))
      throw new UsageError(`${dir} is not empty; export into a new directory`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
}

/** What makes a directory an fshare data directory. */
const METADATA_FILES = ['db.json', 'db.journal'];

/**
 * The PostgreSQL/S3 side of a copy. `--data-dir` holds whichever of metadata and content is
 * not in PostgreSQL or S3; with both given, only temporary files are needed.
 */
async function sharedSide(opts: BackendOpts) {
  if (!opts.database && !opts.storage)
    throw new UsageError('give --database, --storage or both (or FSHARE_DATABASE, FSHARE_STORAGE)');
  if (!(opts.database && opts.storage) && !opts.dataDir)
    throw new UsageError(
      `give --data-dir for the ${opts.database ? 'content' : 'metadata'} that is not in ${opts.database ? 'PostgreSQL' : 'S3'}`,
    );
  const temp = opts.dataDir ? undefined : await mkdtemp(join(tmpdir(), 'fshare-copy-'));
  return {
    backend: {
      dataDir: opts.dataDir ? resolve(opts.dataDir) : temp!,
      database: opts.database,
      storage: opts.storage,
      s3Endpoint: opts.s3Endpoint,
      s3ForcePathStyle: opts.s3ForcePathStyle,
    },
    cleanup: async () => {
      if (temp) await rm(temp, { recursive: true, force: true });
    },
  };
}

function withBackendOptions(cmd: Command): Command {
  return cmd
    .addOption(backendOptions.database())
    .addOption(backendOptions.storage())
    .addOption(backendOptions.s3Endpoint())
    .addOption(backendOptions.s3ForcePathStyle())
    .option(
      '--data-dir <dir>',
      'with only one of --database and --storage: where the other part lives',
    );
}

export function registerAdmin(program: Command): void {
  const admin = program
    .command('admin')
    .description(
      'server-side administration without a server: move its data between a data directory and PostgreSQL + S3, set a password',
    )
    .addHelpText(
      'after',
      examples([
        'fshare admin import ./fshare-data --database postgres://fshare@db/fshare --storage s3://bucket/fshare',
        'fshare admin export ./restored --database postgres://fshare@db/fshare --storage s3://bucket/fshare',
      ]),
    );

  const run = async (
    direction: 'import' | 'export',
    dir: string,
    opts: BackendOpts,
    cmd: Command,
  ) => {
    const json = (cmd.optsWithGlobals() as { json?: boolean }).json;
    const local: BackendOpts & { dataDir: string } = { dataDir: resolve(dir) };
    const shared = await sharedSide(opts);
    if (direction === 'export') await mustBeEmpty(local.dataDir);
    else if (
      !(await readdir(local.dataDir).catch(() => [] as string[])).some((n) =>
        METADATA_FILES.includes(n),
      )
    )
      throw new UsageError(`${local.dataDir} is not an fshare data directory (no db.json)`);
    const [source, target] =
      direction === 'import' ? [local, shared.backend] : [shared.backend, local];
    const { copyServerData } = await import('../../server/copy.js');
    try {
      const report = await copyServerData(
        source,
        target,
        (line) => {
          if (!json) warn(line);
        },
        { by: `fshare admin ${direction}`, from: describeBackends(source, source.dataDir) },
      );
      if (json) return printJson({ ...report, verified: 'sha256' });
      printLine(
        `Copied ${report.users} users, ${report.shares} shares (${report.bytes} bytes, every one checked by sha256) and ${report.links} links`,
      );
      printLine(`  from ${describeBackends(source, source.dataDir)}`);
      printLine(`  to   ${describeBackends(target, target.dataDir)}`);
      printLine(
        'Users sign in again on the new server: tokens issued before the copy are not accepted.',
      );
    } finally {
      await shared.cleanup();
    }
  };

  admin
    .command('passwd')
    .description(
      "set a user's password in the server's metadata, for an administrator who cannot sign in (embedded store: with the server stopped)",
    )
    .argument('<name>', 'user name')
    .option('--password-stdin', 'read the new password from the first line of standard input')
    .addOption(backendOptions.database())
    .option(
      '--data-dir <dir>',
      'the data directory of the stopped fshare serve (default $FSHARE_DATA_DIR or ./fshare-data)',
    )
    .addHelpText(
      'after',
      examples([
        'fshare admin passwd admin --data-dir ./fshare-data',
        'printf %s "$PW" | fshare admin passwd admin --database postgres://fshare@db/fshare --password-stdin',
      ]),
    )
    .action(
      async (
        name: string,
        opts: { passwordStdin?: boolean; database?: string; dataDir?: string },
        cmd: Command,
      ) => {
        const json = (cmd.optsWithGlobals() as { json?: boolean }).json;
        const dataDir = resolve(opts.dataDir ?? process.env.FSHARE_DATA_DIR ?? './fshare-data');
        // A directory without fshare's metadata would get a new, empty store.
        if (
          !opts.database &&
          !(await readdir(dataDir).catch(() => [] as string[])).some((n) =>
            METADATA_FILES.includes(n),
          )
        )
          throw new UsageError(`${dataDir} is not an fshare data directory (no db.json)`);
        const password = await readNewPassword(
          Boolean(opts.passwordStdin),
          `New password for ${name}`,
        );
        const { PasswordRefusedError, setPassword } =
          await import('../../server/admin-password.js');
        const { DamagedMetadataError, MissingRecordError } =
          await import('../../server/store/index.js');
        const set = await setPassword(
          { database: opts.database, dataDir },
          name,
          password,
          (line) => warn(line),
        ).catch((err: unknown) => {
          if (err instanceof MissingRecordError)
            throw new NotFoundError(`no user ${name} in ${describeBackends(opts, dataDir)}`);
          if (err instanceof PasswordRefusedError) throw new UsageError(err.message);
          // One line with the way out, not a stack trace (as fshare serve says it).
          if (err instanceof DamagedMetadataError) throw new Error(err.message);
          throw err;
        });
        if (json) return printJson({ username: set.username, sessions_ended: true });
        printLine(`Password of ${set.username} set; every session of ${set.username} was ended`);
      },
    );

  withBackendOptions(
    admin
      .command('import')
      .description('copy an embedded data directory into PostgreSQL and S3')
      .argument('<dir>', 'the data directory of a stopped fshare serve'),
  )
    .addHelpText(
      'after',
      examples([
        'fshare admin import ./fshare-data --database postgres://fshare@db/fshare --storage s3://bucket/fshare',
      ]),
    )
    .action((dir: string, opts: BackendOpts, cmd: Command) => run('import', dir, opts, cmd));

  withBackendOptions(
    admin
      .command('export')
      .description('copy the data in PostgreSQL and S3 into a new embedded data directory')
      .argument('<dir>', 'a new (or empty) directory'),
  )
    .addHelpText(
      'after',
      examples([
        'fshare admin export ./fshare-data --database postgres://fshare@db/fshare --storage s3://bucket/fshare',
      ]),
    )
    .action((dir: string, opts: BackendOpts, cmd: Command) => run('export', dir, opts, cmd));
}
