import { createInterface } from 'node:readline';
import { InterruptedError, UsageError } from './output.js';

/**
 * Reads `count` lines from standard input (for --password-stdin). Never waits on a terminal
 * without telling the user, and fails clearly when stdin ends early.
 */
export async function readStdinLines(count: number, what: string): Promise<string[]> {
  const stdin = process.stdin;
  if (stdin.isTTY) process.stderr.write(`(reading ${what} from standard input)\n`);
  const lines: string[] = [];
  const rl = createInterface({ input: stdin, crlfDelay: Infinity, terminal: false });
  try {
    for await (const line of rl) {
      lines.push(line);
      if (lines.length >= count) break;
    }
  } finally {
    rl.close();
    if (!stdin.isTTY) stdin.destroy(); // lets the process exit without waiting for EOF
  }
  if (lines.length < count || lines.some((l) => l === ''))
    throw new UsageError(
      count === 1
        ? `expected ${what} on the first line of standard input`
        : `expected ${what} on ${count} lines of standard input`,
    );
  return lines;
}

function requireTerminal(what: string, flag: string): void {
  if (!process.stdin.isTTY || !process.stderr.isTTY)
    throw new UsageError(`no terminal to ask for ${what}; use ${flag}`);
}

/** Asks for a secret on the terminal without echoing it. */
export async function promptHidden(question: string, flag = '--password-stdin'): Promise<string> {
  requireTerminal('a password', flag);
  const stdin = process.stdin;
  process.stderr.write(question);
  stdin.setRawMode(true);
  stdin.setEncoding('utf8');
  stdin.resume();
  try {
    return await new Promise<string>((resolve, reject) => {
      let value = '';
      const onData = (data: string) => {
        for (const ch of data) {
          if (ch === '\r' || ch === '\n' || ch === '\u0004') {
            stdin.off('data', onData);
            resolve(value);
            return;
          }
          if (ch === '\u0003') {
            stdin.off('data', onData);
            reject(new InterruptedError('interrupted'));
            return;
          }
          if (ch === '\u007f' || ch === '\b') value = [...value].slice(0, -1).join('');
          else if (ch >= ' ') value += ch;
        }
      };
      stdin.on('data', onData);
    });
  } finally {
    stdin.setRawMode(false);
    stdin.pause();
    process.stderr.write('\n');
  }
}

/** Asks for a visible answer (a user name) on the terminal. */
export async function promptLine(question: string, what: string, flag: string): Promise<string> {
  requireTerminal(what, flag);
  const rl = createInterface({ input: process.stdin, output: process.stderr });
  try {
    return await new Promise<string>((resolve, reject) => {
      rl.once('SIGINT', () => reject(new InterruptedError('interrupted')));
      rl.question(question, (answer) => resolve(answer.trim()));
    });
  } finally {
    rl.close();
  }
}

/** A new password, typed twice on a terminal, or one line of stdin. */
export async function readNewPassword(fromStdin: boolean, label = 'New password'): Promise<string> {
  if (fromStdin) return (await readStdinLines(1, 'the password'))[0]!;
  const first = await promptHidden(`${label}: `);
  if (!first) throw new UsageError('the password must not be empty');
  const second = await promptHidden(`Repeat ${label.toLowerCase()}: `);
  if (first !== second) throw new UsageError('the passwords do not match');
  return first;
}
