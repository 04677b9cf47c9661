import { CommanderError } from 'commander';
import { closeConnections } from '../client/http.js';
import { EXIT, reportError } from './output.js';
import { buildProgram } from './program.js';

const program = buildProgram();

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
