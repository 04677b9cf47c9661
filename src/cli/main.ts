import { Command, CommanderError } from 'commander';
import { closeConnections } from '../client/http.js';
import { registerAuth } from './commands/auth.js';
import { registerFiles } from './commands/files.js';
import { registerTransfers } from './commands/transfers.js';
import { registerServe } from './commands/serve.js';
import { registerSettings } from './commands/settings.js';
import { registerUsers } from './commands/users.js';
import { EXIT, reportError } from './output.js';

const program = new Command();
program
  .name('fshare')
  .description('Share files from the terminal, and run the share server they live on.')
  .version('0.1.0')
  // Set before the commands are added: subcommands copy these settings.
  .exitOverride()
  .configureOutput({
    // Usage errors as one line, like every other error.
    outputError: (text, write) =>
      write(
        `fshare: ${text
          .replace(/^error: /, '')
          .trim()
          .replace(/\s*\n\s*/g, ' ')}\n`,
      ),
  })
  .option(
    '--server <url>',
    'server URL (default: $FSHARE_SERVER, the last login, http://127.0.0.1:5000)',
  )
  .option('--json', 'print exactly one JSON document on stdout')
  .option('--no-progress', 'never draw progress bars')
  .addHelpText(
    'after',
    `
Examples:
  fshare serve                      run a share server on http://127.0.0.1:5000
  fshare login -u alice             sign in and keep the token in the OS keychain
  fshare upload build.tar.gz        share a file; prints its id and URL
  fshare get <id or URL>            download it back

Exit codes: 0 ok, 1 failure, 2 usage, 3 not signed in or not allowed, 4 not found,
5 locked or conflict, 6 network failure after retries, 7 not verified (sha256 mismatch,
or an upload the server did not complete), 130 interrupted (Ctrl-C).`,
  );

registerAuth(program);
registerTransfers(program);
registerFiles(program);
registerUsers(program);
registerSettings(program);
registerServe(program);

/** Commander's own exits: help and --version are success, anything else is a usage error. */
function commanderExit(err: CommanderError): number {
  if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return EXIT.ok;
  if (err.code === 'commander.help' || err.code === 'commander.executeSubCommandAsync')
    return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  return EXIT.usage;
}

// Reading stdout into `head` must end quietly, not with an EPIPE trace.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
});

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.exitCode = err instanceof CommanderError ? commanderExit(err) : reportError(err);
} finally {
  closeConnections();
}
