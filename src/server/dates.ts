/**
 * Dates from clients, parsed strictly: a string that is not a real date in one of the accepted
 * forms is no date (NaN), never a nearby one (Date.parse reads "2030-02-30" as 2 March, and
 * "0" or "2099" as years).
 */

const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];

function daysIn(year: number, month: number): number {
  return new Date(Date.UTC(year, month, 0)).getUTCDate(); // month 1-12: day 0 of the next
}

/** Milliseconds since the epoch of a UTC time whose every part is in range, else NaN. */
function utc(
  year: number,
  month: number,
  day: number,
  hour: number,
  minute: number,
  second: number,
  ms = 0,
): number {
  if (month < 1 || month > 12 || day < 1 || day > daysIn(year, month)) return NaN;
  if (hour > 23 || minute > 59 || second > 59) return NaN;
  const d = new Date(0);
  d.setUTCFullYear(year, month - 1, day); // Date.UTC would read years 0-99 as 1900-1999
  d.setUTCHours(hour, minute, second, ms);
  return d.getTime();
}

const ISO =
  /^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d)(?::(\d\d)(?:\.(\d{1,9}))?)?(?:(Z)|([+-])(\d\d):(\d\d))$/i;

/**
 * An ISO 8601 time with a zone (`2026-12-01T12:00:00Z`, `…+02:00`, seconds and fractions
 * optional) that names a real time (no 30 February, no hour 24, no offset past ±23:59), in
 * milliseconds; NaN otherwise.
 */
export function parseIsoWithZone(text: string): number {
  const m = ISO.exec(text);
  if (!m) return NaN;
  const [, y, mo, d, h, mi, s, frac, z, sign, oh, om] = m;
  const ms = frac ? Math.floor(Number(`0.${frac}`) * 1000) : 0;
  const local = utc(+y!, +mo!, +d!, +h!, +mi!, s ? +s : 0, ms);
  if (z) return local;
  if (+oh! > 23 || +om! > 59) return NaN;
  const offset = (+oh! * 60 + +om!) * 60_000;
  return sign === '+' ? local - offset : local + offset;
}

const IMF_FIXDATE =
  /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun), (\d\d) ([A-Z][a-z]{2}) (\d{4}) (\d\d):(\d\d):(\d\d) GMT$/;
const RFC850 =
  /^(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), (\d\d)-([A-Z][a-z]{2})-(\d\d) (\d\d):(\d\d):(\d\d) GMT$/;
const ASCTIME =
  /^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) ([A-Z][a-z]{2}) ([ \d]\d) (\d\d):(\d\d):(\d\d) (\d{4})$/;

/**
 * An HTTP-date (RFC 9110 §5.6.7) in milliseconds: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`),
 * or the obsolete RFC 850 (`Sunday, 06-Nov-94 08:49:37 GMT`) and asctime
 * (`Sun Nov  6 08:49:37 1994`) forms, with a real date and time; NaN for anything else.
 */
export function parseHttpDate(text: string, now = Date.now()): number {
  let day: string, month: string, year: number, h: string, mi: string, s: string;
  let m: RegExpExecArray | null;
  if ((m = IMF_FIXDATE.exec(text))) {
    [day, month, h, mi, s] = [m[2]!, m[3]!, m[5]!, m[6]!, m[7]!];
    year = Number(m[4]);
  } else if ((m = RFC850.exec(text))) {
    [day, month, h, mi, s] = [m[2]!, m[3]!, m[5]!, m[6]!, m[7]!];
    // RFC 9110 §5.6.7: a two-digit year more than 50 years ahead is in the century before.
    const thisYear = new Date(now).getUTCFullYear();
    year = Math.floor(thisYear / 100) * 100 + Number(m[4]);
    if (year > thisYear + 50) year -= 100;
  } else if ((m = ASCTIME.exec(text))) {
    [month, day, h, mi, s] = [m[2]!, m[3]!.trim(), m[4]!, m[5]!, m[6]!];
    year = Number(m[7]);
  } else return NaN;
  const monthIndex = MONTHS.indexOf(month);
  if (monthIndex < 0) return NaN;
  return utc(year, monthIndex + 1, Number(day), Number(h), Number(mi), Number(s));
}
