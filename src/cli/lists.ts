import type { Command } from 'commander';
import { allPages, type PageQuery } from '../client/api.js';
import { parseIsoNoZone } from '../shared/dates.js';
import type { Page } from '../shared/types.js';
import { parsePositiveInt } from './args.js';

export interface PageOptions {
  page?: string;
  perPage?: string;
  all?: boolean;
}

/** The `ls` and `users ls` paging flags, shared so both behave alike. */
export function addPageOptions(cmd: Command): Command {
  return cmd
    .option('--page <n>', 'page number, from 1', '1')
    .option('--per-page <n>', 'items per page (at most 1000)', '15')
    .option('--all', 'every page, one after another');
}

/** One page, or with --all every item (and the page object when there is one). */
export async function listPaged<T>(
  options: PageOptions,
  fetchPage: (q: PageQuery) => Promise<Page<T>>,
): Promise<{ items: T[]; page?: Page<T>; pageNumber: number }> {
  if (options.all) {
    const items: T[] = [];
    for await (const item of allPages(fetchPage)) items.push(item);
    return { items, pageNumber: 1 };
  }
  const pageNumber = parsePositiveInt(options.page ?? '1', '--page');
  const perPage = parsePositiveInt(options.perPage ?? '15', '--per-page', 1000);
  const page = await fetchPage({ page: pageNumber, perPage });
  return { items: page.data, page, pageNumber };
}

/**
 * Says on stderr which page a list showed when it has more than one, on a terminal or not: piped
 * (`fshare ls | cut -f1` in a script) page 1 alone was taken for the whole list, silently.
 */
export function notePage(page: Page<unknown> | undefined, pageNumber: number): void {
  if (!page || page.pages <= 1) return;
  process.stderr.write(
    `(page ${pageNumber} of ${page.pages}${page.next ? `; next: --page ${page.next}` : ''}; --all lists every page)\n`,
  );
}

/**
 * "2026-11-21 21:05" in the user's local time zone, for tables. Servers print times without a
 * zone; both fshare serve and the reference server mean UTC (docs/CLI.md).
 */
export function shortDate(iso: string): string {
  const date = parseIsoNoZone(iso);
  if (Number.isNaN(date.getTime())) return iso;
  const pad = (n: number) => String(n).padStart(2, '0');
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}`;
}

/** A server's zone-less time as ISO 8601 with its offset (UTC, "Z"), for --json. */
export function isoWithZone(text: string): string {
  const date = parseIsoNoZone(text);
  return Number.isNaN(date.getTime()) ? text : date.toISOString();
}

/**
 * A server's zone-less time as ISO 8601 in the user's local zone with its offset
 * ("2026-11-21T22:05:31+01:00"): tables written to a pipe stay parseable and still local.
 */
export function localIso(text: string): string {
  const date = parseIsoNoZone(text);
  if (Number.isNaN(date.getTime())) return text;
  const pad = (n: number) => String(Math.trunc(Math.abs(n))).padStart(2, '0');
  const offset = -date.getTimezoneOffset();
  const zone = `${offset < 0 ? '-' : '+'}${pad(offset / 60)}:${pad(offset % 60)}`;
  return (
    `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}` +
    `T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}${zone}`
  );
}
