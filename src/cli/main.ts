import { fstatSync } from 'node:fs';
import type { Writable } from 'node:stream';
import { CommanderError } from 'commander';
import { closeConnections } from '../client/http.js';
import { writeFullySync } from '../shared/copy.js';
import { EXIT, outputErrorText, reportError } from './output.js';
import { buildProgram } from './program.js';

const program = buildProgram();

/** Commander's own exits: help and --version are success, anything else is a usage error. */
function commanderExit(err: CommanderError): number {
  if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return EXIT.ok;
  if (err.code === 'commander.help' || err.code === 'commander.executeSubCommandAsync')
    return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  return EXIT.usage;
}

// Standard output redirected to a file: Node writes each piece with one writeSync and does not
// look at the count, so a disk that fills up in the middle of a piece loses its tail without an
// error. Every byte is written, or the write fails (ENOSPC) and the handler below says so.
if (isRegularFile(1)) {
  (process.stdout as Writable)._write = (chunk: Buffer, _encoding, done) => {
    try {
      writeFullySync(1, chunk, null);
    } catch (err) {
      done(err as Error);
      return;
    }
    done();
  };
}

function isRegularFile(fd: number): boolean {
  try {
    return fstatSync(fd).isFile();
  } catch {
    return false;
  }
}

// Reading stdout into `head` must end quietly, not with an EPIPE trace. Any other failure to
// write the output (a full disk under `> file`) is one line and exit 1, never a silent success
// with the output cut short.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (err.code === 'EPIPE') process.exit(process.exitCode ?? 0);
  process.stderr.write(`fshare: cannot write to standard output: ${outputErrorText(err)}\n`);
  process.exit(EXIT.failure);
});

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.exitCode = err instanceof CommanderError ? commanderExit(err) : reportError(err);
} finally {
  closeConnections();
}
