// Writes dist/man/fshare.1 from the built command tree, so the page says what --help says.
// Run after tsc (npm run build does both).
import { mkdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';

const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..');
const OUT = join(ROOT, 'dist', 'man', 'fshare.1');

// Defaults read from the environment (serve --data-dir) must show their built-in value.
for (const key of Object.keys(process.env)) if (key.startsWith('FSHARE_')) delete process.env[key];

const dist = (path) => import(pathToFileURL(join(ROOT, 'dist', 'cli', path)).href);
const { buildProgram } = await dist('program.js');
const { EXIT } = await dist('output.js');

/** docs/CLI.md "Environment variables", in the order a user meets them. */
const ENVIRONMENT = [
  ['FSHARE_SERVER', 'Server URL when --server is not given.'],
  [
    'FSHARE_TOKEN',
    'Bearer token to use; wins over any stored token. Never written anywhere by fshare.',
  ],
  [
    'FSHARE_CONFIG_DIR',
    'The config directory (settings, the fallback token file, upload records). Default: $XDG_CONFIG_HOME/fshare, else ~/.config/fshare on Linux; ~/Library/Preferences/fshare on macOS; %APPDATA%\\fshare\\Config on Windows.',
  ],
  [
    'FSHARE_KEYRING',
    'off (any case): never use the OS keychain; tokens go to credentials.json (mode 0600) in the config directory, without a warning.',
  ],
  [
    'FSHARE_DEBUG',
    '1: an error line is followed by the error and every cause under it, with their stacks.',
  ],
  ['FSHARE_DATA_DIR', 'serve: default of --data-dir (else ./fshare-data).'],
  [
    'FSHARE_ADMIN_USER',
    'serve: the administrator created on the first start, when --admin-user is not given (else admin).',
  ],
  [
    'FSHARE_ADMIN_PASSWORD',
    'serve: its password, when --admin-password is not given (preferred: a command line is visible in ps). Else a random one, printed once.',
  ],
  [
    'FSHARE_SECRET',
    'serve: the JWT signing secret. Default: generated once into <data-dir>/secret (mode 0600).',
  ],
];

/** docs/CLI.md "Errors and exit codes", by the names of EXIT in src/cli/output.ts. */
const EXIT_MEANING = {
  ok: 'Success (also --help and --version).',
  failure:
    'Any other failure: HTTP 400, 408, 413, 429, 5xx (after retries), 507; an incomplete download; an existing file; a file that changed while uploading.',
  usage:
    'Usage: a bad or missing argument or flag, a bad size or range, a bad share id or URL, a local file that is missing or not a regular file, no terminal to prompt on.',
  auth: 'Not signed in or not allowed: HTTP 401 or 403, or no token where one is needed (checked before any request).',
  notFound: 'Not found: HTTP 404.',
  conflict: 'Locked or conflict: HTTP 423 or 409.',
  network: 'Network failure after retries (refused, reset, timed out, host not found).',
  verification:
    'Not verified: a sha256 mismatch, HTTP 422 (the server refused the declared digest), an upload the server did not confirm.',
  interrupted:
    'Interrupted: Ctrl-C at a prompt or during a transfer (a transfer keeps what it sent: run it again to go on).',
};

/** Text safe inside a roff line: backslashes, hyphens (so flags copy as ASCII) and non-ASCII. */
function esc(text) {
  return text
    .replace(/\\/g, '\\e')
    .replace(/-/g, '\\-')
    .replace(
      /[^\x20-\x7e]/gu,
      (c) => `\\[u${c.codePointAt(0).toString(16).toUpperCase().padStart(4, '0')}]`,
    );
}

/** A text line: one starting with . or ' would be read as a request. */
function text(line) {
  const escaped = esc(line);
  return /^[.']/.test(escaped) ? `\\&${escaped}` : escaped;
}

/** `<value>` and `[value]` in italics; the words between them in bold for flags, else roman. */
function term(line, bold = true) {
  return line
    .split(/(<[^>]*>|\[[^\]]*\])/)
    .map((part, i) =>
      i % 2
        ? `\\fI${esc(part)}\\fR`
        : part
            .split(/(,?\s+)/)
            .map((word) =>
              !bold || !word || /^,?\s+$/.test(word) ? esc(word) : `\\fB${esc(word)}\\fR`,
            )
            .join(''),
    )
    .join('');
}

/** The command's addHelpText('after') text, as commander writes it under --help. */
function afterHelp(cmd) {
  let out = '';
  cmd.emit('afterHelp', { error: false, command: cmd, write: (s) => (out += s) });
  return out;
}

/**
 * Help text paragraphs: "Examples:" and its indented lines stay as they are, the rest is filled.
 * `section` is the title a man page section already gives (EXAMPLES), so not repeated.
 */
function helpText(raw, section = '') {
  const lines = [];
  for (const paragraph of raw.split(/\n\s*\n/).map((p) => p.replace(/^\n+|\s+$/g, ''))) {
    if (!paragraph) continue;
    const [first, ...rest] = paragraph.split('\n');
    if (/^\S.*:$/.test(first) && rest.length && rest.every((l) => /^\s/.test(l))) {
      const indent = Math.min(...rest.map((l) => /^\s*/.exec(l)[0].length));
      if (first.toUpperCase() !== `${section}:`) lines.push('.PP', text(first));
      lines.push('.RS 4', '.nf', ...rest.map((l) => text(l.slice(indent))));
      lines.push('.fi', '.RE');
    } else lines.push('.PP', ...paragraph.split('\n').map((l) => text(l.trim())));
  }
  return lines;
}

function commandPath(cmd) {
  return cmd.parent ? `${commandPath(cmd.parent)} ${cmd.name()}` : cmd.name();
}

function argumentTerm(arg) {
  const name = `${arg.name()}${arg.variadic ? '...' : ''}`;
  return arg.required ? `<${name}>` : `[${name}]`;
}

function options(help, cmd) {
  return help
    .visibleOptions(cmd)
    .filter((o) => o.long !== '--help')
    .flatMap((o) => ['.TP', term(help.optionTerm(o)), text(help.optionDescription(o))]);
}

/** One subsection per command and subcommand, in the order --help lists them. */
function commandSections(help, cmd) {
  return cmd.commands.flatMap((sub) => {
    const path = commandPath(sub);
    return [
      `.SS "${esc(path)}"`,
      `\\fB${esc(path)}\\fR ${term(sub.usage(), false)}`,
      '.PP',
      text(help.commandDescription(sub)),
      ...help
        .visibleArguments(sub)
        .flatMap((a) => [
          '.TP',
          `\\fI${esc(argumentTerm(a))}\\fR`,
          text(help.argumentDescription(a)),
        ]),
      ...options(help, sub),
      ...helpText(afterHelp(sub)),
      ...commandSections(help, sub),
    ];
  });
}

function date() {
  const epoch = Number(process.env.SOURCE_DATE_EPOCH); // reproducible builds set it
  return new Date(Number.isFinite(epoch) && epoch > 0 ? epoch * 1000 : Date.now())
    .toISOString()
    .slice(0, 10);
}

function page() {
  const program = buildProgram();
  const help = program.createHelp();
  const name = program.description().replace(/\.$/, '');
  const exitCodes = Object.entries(EXIT).map(([key, code]) => {
    if (!EXIT_MEANING[key]) throw new Error(`scripts/man.mjs: no meaning for exit code ${key}`);
    return ['.TP', `\\fB${code}\\fR`, text(EXIT_MEANING[key])];
  });
  // The top-level "Exit codes:" paragraph of --help is what EXIT STATUS says at length.
  const examples = afterHelp(program)
    .split(/\n\s*\n/)
    .filter((p) => !/^\s*Exit codes:/.test(p))
    .join('\n\n');
  return [
    `.TH FSHARE 1 ${date()} "fshare ${esc(program.version())}" "User Commands"`,
    // Flags and paths must not be hyphenated or stretched: they are copied into a shell.
    '.nh',
    '.ad l',
    '.SH NAME',
    `fshare \\- ${esc(name[0].toLowerCase() + name.slice(1))}`,
    '.SH SYNOPSIS',
    '\\fBfshare\\fR [\\fIoptions\\fR] \\fIcommand\\fR [\\fIcommand options\\fR] [\\fIarguments\\fR]',
    '.br',
    '\\fBfshare\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR',
    '.br',
    '\\fBfshare completion\\fR \\fIbash\\fR|\\fIzsh\\fR|\\fIfish\\fR',
    '.SH DESCRIPTION',
    text(program.description()),
    text('One executable for both sides of a file share: a client for any server that speaks the'),
    text('fshare HTTP API, and'),
    '\\fBfshare serve\\fR,',
    text('which runs such a server on a local data directory.'),
    '.PP',
    text('Global options go before or after the command name.'),
    text('An error is one line on standard error,'),
    '\\fBfshare:\\fR \\fImessage\\fR,',
    text('with an exit status from EXIT STATUS below.'),
    '\\fB\\-\\-json\\fR',
    text('prints exactly one JSON document on standard output.'),
    '.SH OPTIONS',
    ...help
      .visibleOptions(program)
      .flatMap((o) => ['.TP', term(help.optionTerm(o)), text(help.optionDescription(o))]),
    '.SH COMMANDS',
    ...commandSections(help, program),
    '.SH EXAMPLES',
    ...helpText(examples, 'EXAMPLES'),
    '.SH ENVIRONMENT',
    ...ENVIRONMENT.flatMap(([key, meaning]) => ['.TP', `\\fB${esc(key)}\\fR`, text(meaning)]),
    '.SH EXIT STATUS',
    ...exitCodes.flat(),
    '.PP',
    text(
      "Commands that act on several items report each failure on its own line and exit with the first failure's code.",
    ),
    '.SH SEE ALSO',
    '\\fBfshare\\fR \\fIcommand\\fR \\fB\\-\\-help\\fR;',
    '\\fBfshare completion\\fR for shell completion.',
    text('The complete reference, with output formats, JSON shapes and retries, is docs/CLI.md'),
    text('in the fshare sources; the HTTP API is docs/API.md.'),
    '',
  ].join('\n');
}

await mkdir(dirname(OUT), { recursive: true });
await writeFile(OUT, page());
