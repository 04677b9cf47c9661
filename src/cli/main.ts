import { fstatSync } from 'node:fs';
import type { Writable } from 'node:stream';
import { CommanderError } from 'commander';
import { closeConnections, onRetry } from '../client/http.js';
import { writeFullySync } from '../shared/copy.js';
import {
  EXIT,
  debugEnabled,
  debugLine,
  outputErrorText,
  outputFailuresAreFatal,
  outputIsADownload,
  reportError,
} from './output.js';
import { buildProgram } from './program.js';

const program = buildProgram();

/** Commander's own exits: help and --version are success, anything else is a usage error. */
function commanderExit(err: CommanderError): number {
  if (err.code === 'commander.helpDisplayed' || err.code === 'commander.version') return EXIT.ok;
  if (err.code === 'commander.help' || err.code === 'commander.executeSubCommandAsync')
    return err.exitCode === 0 ? EXIT.ok : EXIT.usage;
  return EXIT.usage;
}

// Standard output or error redirected to a file: Node writes each piece with one writeSync and
// does not look at the count, so a disk that fills up in the middle of a piece loses its tail
// without an error. Standard output is written in full or fails (ENOSPC, reported by the handler
// below). Standard error is the log: a line that cannot be written is dropped, and the command
// (above all `serve`) goes on; lines are written again once there is room. So is `serve`'s
// standard output.
if (isRegularFile(1)) writeThrough(process.stdout, 1, outputFailuresAreFatal);
if (isRegularFile(2)) writeThrough(process.stderr, 2, () => false);

function writeThrough(stream: Writable, fd: number, failLoudly: () => boolean): void {
  stream._write = (chunk: Buffer, _encoding, done) => {
    try {
      writeFullySync(fd, chunk, null);
    } catch (err) {
      if (failLoudly()) {
        done(err as Error);
        return;
      }
    }
    done();
  };
}

function isRegularFile(fd: number): boolean {
  try {
    // bigint: a plain stat of a pipe (standard error under systemd or docker) is left in a buffer
    // that Node's realpath reads, and then no symbolic link was followed to a package (pnpm's
    // layout): `serve` imported jsonwebtoken and content-disposition as empty objects
    // (nodejs/node#51142; found from outside). Every stat in fshare is made so.
    return fstatSync(fd, { bigint: true }).isFile();
  } catch {
    return false;
  }
}

// Reading a listing into `head` must end quietly, not with an EPIPE trace. A download into
// `head` (`get -o - | head -c 100`) was cut short and never verified: one line and exit 1, as
// curl fails there too. Any other failure to write the output (a full disk under `> file`) is one
// line and exit 1, never a silent success with the output cut short.
process.stdout.on('error', (err: NodeJS.ErrnoException) => {
  if (!outputFailuresAreFatal()) return; // `serve` goes on serving
  if (err.code === 'EPIPE' && !outputIsADownload()) process.exit(process.exitCode ?? 0);
  if (err.code === 'EPIPE') {
    process.stderr.write(
      'fshare: standard output was closed before the download ended; the download was cut short and not verified\n',
    );
    process.exit(EXIT.failure);
  }
  process.stderr.write(`fshare: cannot write to standard output: ${outputErrorText(err)}\n`);
  process.exit(EXIT.failure);
});
// A log (standard error) that cannot be written at all, its reader gone, is not worth a crash
// either: the command goes on without it.
process.stderr.on('error', () => undefined);

if (debugEnabled()) onRetry(debugLine);

try {
  await program.parseAsync(process.argv);
} catch (err) {
  process.exitCode = err instanceof CommanderError ? commanderExit(err) : reportError(err);
} finally {
  closeConnections();
}
