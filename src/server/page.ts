import { createHash } from 'node:crypto';

/**
 * The share-link pages: server-rendered HTML, no script, one inline style allowed by its hash
 * (docs/API.md "Share links"). Every value from a user goes through `esc`.
 */

const CSS = `
:root{color-scheme:light dark;--fg:#1b1f24;--muted:#57606a;--bg:#f6f8fa;--card:#fff;--line:#d0d7de;--accent:#0969da}
@media (prefers-color-scheme:dark){:root{--fg:#e6edf3;--muted:#8d96a0;--bg:#0d1117;--card:#161b22;--line:#30363d;--accent:#4493f8}}
*{box-sizing:border-box}
body{margin:0;font:16px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);background:var(--bg)}
main{max-width:36rem;margin:2rem auto;padding:1.5rem;background:var(--card);border:1px solid var(--line);border-radius:12px}
@media (max-width:40rem){main{margin:0;border-radius:0;border-width:0 0 1px;min-height:100vh}}
h1{font-size:1.25rem;margin:0 0 1rem;overflow-wrap:anywhere}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.25rem 1rem;margin:0 0 1.5rem}
dt{color:var(--muted)}dd{margin:0;overflow-wrap:anywhere}
code{font:13px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace}
.button,button{display:inline-block;width:100%;padding:.75rem 1rem;font:inherit;font-weight:600;text-align:center;text-decoration:none;color:#fff;background:var(--accent);border:0;border-radius:8px;cursor:pointer}
input{width:100%;padding:.6rem;margin:0 0 .75rem;font:inherit;color:var(--fg);background:var(--bg);border:1px solid var(--line);border-radius:8px}
.error{color:#cf222e}
p.note{color:var(--muted);font-size:.875rem;margin:1rem 0 0}
`.trim();

const CSS_HASH = createHash('sha256').update(CSS).digest('base64');

/** Headers of every page: nothing may load or run but the one stylesheet above. */
export const PAGE_HEADERS = {
  'Content-Type': 'text/html; charset=utf-8',
  'Content-Security-Policy': `default-src 'none'; style-src 'sha256-${CSS_HASH}'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'`,
  'X-Content-Type-Options': 'nosniff',
  'X-Frame-Options': 'DENY',
  // The token is in the URL: it must not leave in a Referer header.
  'Referrer-Policy': 'no-referrer',
  'Cache-Control': 'no-store',
} as const;

/** Escapes text for HTML content and double-quoted attributes. */
export function esc(text: string): string {
  return text.replace(
    /[&<>"']/g,
    (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!,
  );
}

function layout(title: string, body: string): string {
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="robots" content="noindex, nofollow">
<title>${esc(title)}</title>
<style>${CSS}</style>
</head>
<body>
<main>
${body}
</main>
</body>
</html>
`;
}

/** 1536 → "1.5 KiB (1,536 bytes)". */
export function humanSize(bytes: number): string {
  const exact = `${bytes.toLocaleString('en-US')} byte${bytes === 1 ? '' : 's'}`;
  if (bytes < 1024) return exact;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]} (${exact})`;
}

export interface PageShare {
  fileName: string;
  size: number | null;
  sha256: string | null;
  /** The earlier of the link's and the share's expiry. */
  expires: string | null;
  downloadsLeft: number | null;
}

export function sharePage(s: PageShare): string {
  const rows: [string, string][] = [
    ['Size', s.size === null ? 'not uploaded yet' : esc(humanSize(s.size))],
    ['SHA-256', s.sha256 ? `<code>${esc(s.sha256)}</code>` : 'not known yet'],
    [
      'Expires',
      s.expires
        ? `<time datetime="${esc(s.expires)}">${esc(s.expires.replace('T', ' ').replace(/\.\d+Z$|Z$/, ' UTC'))}</time>`
        : 'never',
    ],
    ['Downloads left', s.downloadsLeft === null ? 'no limit' : String(s.downloadsLeft)],
  ];
  const list = rows.map(([k, v]) => `<dt>${k}</dt><dd>${v}</dd>`).join('\n');
  const button =
    s.size === null
      ? '<p>The file has not been uploaded yet.</p>'
      : // No `download` attribute: Content-Disposition already makes it a download, and a link
        // that ran out meanwhile then shows its 410 page instead of a failed download. The
        // sha256 shown is asked for: a share replaced since gives its 412 page, not other bytes.
        `<a class="button" id="download" href="?download${s.sha256 ? `&amp;sha256=${esc(s.sha256)}` : ''}">Download</a>`;
  return layout(
    s.fileName,
    `<h1 id="name">${esc(s.fileName)}</h1>
<dl>
${list}
</dl>
${button}
<p class="note">Shared with fshare. Check the download with <code>sha256sum</code>.</p>`,
  );
}

export function passwordPage(wrong: boolean): string {
  return layout(
    'Password needed',
    `<h1>This link needs a password</h1>
<form method="post">
<label for="password">Password</label>
<input id="password" name="password" type="password" autocomplete="current-password" required autofocus>
${wrong ? '<p class="error" id="wrong">That password is not right.</p>' : ''}
<button type="submit">Unlock</button>
</form>`,
  );
}

export function messagePage(title: string, text: string): string {
  return layout(title, `<h1>${esc(title)}</h1>\n<p id="message">${esc(text)}</p>`);
}
