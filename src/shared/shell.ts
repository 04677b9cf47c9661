/**
 * A word a POSIX shell reads back as `text`: as it is when it holds nothing the shell would read
 * otherwise, else in single quotes. For the commands fshare prints to run next (found from
 * outside: `to resume: fshare replace ID my big file` pasted as printed was "too many arguments").
 */
export function shellWord(text: string): string {
  return /^[\w./:@%+=,-]+$/.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}
