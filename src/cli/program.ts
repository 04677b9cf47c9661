import { createRequire } from 'node:module';
import { Command } from 'commander';
import { registerArtifacts } from './commands/artifacts.js';
import { registerAuth } from './commands/auth.js';
import { registerCompletion } from './commands/completion.js';
import { registerFiles } from './commands/files.js';
import { registerLinks } from './commands/links.js';
import { registerTransfers } from './commands/transfers.js';
import { registerServe } from './commands/serve.js';
import { registerAdmin } from './commands/admin.js';
import { registerSettings } from './commands/settings.js';
import { registerUsers } from './commands/users.js';
import { sweepConfigTemps } from './config.js';

// package.json sits two levels above dist/cli/ and dist/bundle/ (scripts/bundle.mjs), in the
// repository and in an installed package.
const { version } = createRequire(import.meta.url)('../../package.json') as { version: string };

/** The whole command tree, parsed by main.ts and read by the man page and completion generators. */
export function buildProgram(): Command {
  const program = new Command();
  program
    .name('fshare')
    .description('Share files from the terminal, and run the share server they live on.')
    .version(version)
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
    .option(
      '--debug',
      'show each retry and its wait, and on failure the underlying error and its stack (FSHARE_DEBUG=1)',
    )
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
    )
    // Every command: a killed fshare's temporary copies of config.json, credentials.json or
    // push-hashes.json are removed (a sweep of a few names, once per command).
    .hook('preAction', () => sweepConfigTemps());

  registerAuth(program);
  registerTransfers(program);
  registerFiles(program);
  registerLinks(program);
  registerArtifacts(program);
  registerUsers(program);
  registerSettings(program);
  registerServe(program);
  registerAdmin(program);
  registerCompletion(program);
  return program;
}
