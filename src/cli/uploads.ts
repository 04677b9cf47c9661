import { createHash } from 'node:crypto';
import { open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { hostname } from 'node:os';
import { join } from 'node:path';
import { busyElsewhere, type ResumeStore, type UploadRecord } from '../client/upload.js';
import { withFileLock } from '../shared/filelock.js';
import { ownedTempName, removeStaleTemps } from '../shared/owned-temp.js';
import { naming, systemErrorText } from '../shared/syserr.js';
import { makeDirs } from '../shared/mkdirs.js';

/** A record file that cannot be used: cut short by a crash, not JSON, or not an upload record. */
export interface DamagedRecord {
  /** The record file's path. */
  file: string;
  reason: string;
}

export interface UploadRecordStore extends ResumeStore {
  /** The usable records (as list()) and the damaged record files beside them. */
  scan(): Promise<{ records: UploadRecord[]; damaged: DamagedRecord[] }>;
  /** The file that holds (or would hold) this record. */
  fileOf(record: UploadRecord): string;
  /** Removes a damaged record file. */
  removeDamaged(record: DamagedRecord): Promise<void>;
}

/** The one line an upload, replace or push says about a damaged record it met (once each). */
export function damagedNotice(d: DamagedRecord): string {
  return `fshare: damaged upload record (${d.reason}), not used: ${d.file}; fshare uploads clean removes it`;
}

/** The record, or why the parsed JSON is not one (a newer version's extra fields are fine). */
function asRecord(value: unknown): UploadRecord | string {
  const r = value as Partial<Record<keyof UploadRecord, unknown>> | null;
  if (typeof r !== 'object' || r === null || Array.isArray(r)) return 'not an upload record';
  const strings = ['server', 'dzuuid', 'path', 'file_name', 'started'] as const;
  const numbers = ['size', 'mtimeMs', 'ino', 'chunk_size'] as const;
  if (
    strings.some((k) => typeof r[k] !== 'string') ||
    // No share id yet: written before the create, which its key finds again.
    !(
      typeof r.share_id === 'string' ||
      (r.share_id === null && typeof r.create_key === 'string')
    ) ||
    (r.create_key !== undefined && typeof r.create_key !== 'string') ||
    numbers.some((k) => typeof r[k] !== 'number') ||
    (r.mode !== 'create' && r.mode !== 'replace')
  )
    return 'not an upload record';
  // Added later, and only ever a reason to start over: one that is not a number counts as
  // absent (an older record's), so the record, and the share it names, are still known.
  if (r.ctimeMs !== undefined && typeof r.ctimeMs !== 'number') delete r.ctimeMs;
  return r as UploadRecord;
}

/**
 * Unfinished uploads of this client, one small 0600 JSON file each under
 * `<config dir>/uploads/`, so that running the same `fshare upload` again resumes it, and
 * `fshare uploads` can list and clean them. Several fshare processes may use it at once: each
 * record is its own file, written whole (temp file, then rename).
 */
export function uploadRecords(
  configDir: string,
  options: { onDamaged?: (record: DamagedRecord) => void } = {},
): UploadRecordStore {
  const dir = join(configDir, 'uploads');
  // Named by the create's key when it has one: the same file before and after the share id is known.
  const fileOf = (r: UploadRecord) =>
    join(
      dir,
      `${createHash('sha256')
        .update(`${r.server}\0${r.create_key ?? r.share_id}\0${r.path}\0${r.mode}`)
        .digest('hex')
        .slice(0, 32)}.json`,
    );
  const told = new Set<string>();
  const scan = async () => {
    // A record write killed before its rename left NAME.json.<pid>-….tmp: nothing else removes it.
    removeStaleTemps(dir);
    let names: string[];
    try {
      // Records are files fshare wrote: a directory or a symbolic link there is not one (a
      // directory was listed as damaged, and `uploads clean` then failed on it with EISDIR).
      names = (await readdir(dir, { withFileTypes: true }))
        .filter((e) => e.isFile() && e.name.endsWith('.json'))
        .map((e) => e.name);
    } catch {
      return { records: [], damaged: [] };
    }
    const records: UploadRecord[] = [];
    const damaged: DamagedRecord[] = [];
    for (const name of names.sort()) {
      const file = join(dir, name);
      let text: string;
      try {
        text = await readFile(file, 'utf8');
      } catch (err) {
        // removed meanwhile by another fshare (done, or cleaned): nothing to say
        if ((err as NodeJS.ErrnoException).code === 'ENOENT') continue;
        const why = systemErrorText({ ...(err as object), path: undefined });
        damaged.push({ file, reason: `unreadable (${why ?? String(err)})` });
        continue;
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(text);
      } catch {
        damaged.push({ file, reason: text.length === 0 ? 'empty' : 'not JSON, or cut short' });
        continue;
      }
      const record = asRecord(parsed);
      if (typeof record === 'string') damaged.push({ file, reason: record });
      else records.push(record);
    }
    records.sort((a, b) => a.started.localeCompare(b.started));
    return { records, damaged };
  };
  const save = async (record: UploadRecord) => {
    const target = fileOf(record);
    const tmp = ownedTempName(target);
    try {
      await makeDirs(dir);
      const handle = await open(tmp, 'wx', 0o600);
      try {
        await handle.writeFile(JSON.stringify(record, null, 2));
      } finally {
        await handle.close();
      }
      await rename(tmp, target);
    } catch (err) {
      await rm(tmp, { force: true });
      throw naming(err, target);
    }
  };
  return {
    scan,
    fileOf,
    // A damaged record is never used, and never silently: whoever meets one is told once.
    async list() {
      const { records, damaged } = await scan();
      for (const d of damaged)
        if (!told.has(d.file)) {
          told.add(d.file);
          options.onDamaged?.(d);
        }
      return records;
    },
    async removeDamaged(record) {
      await rm(record.file, { force: true });
    },
    save,
    async remove(record) {
      await rm(fileOf(record), { force: true });
    },
    claim(record) {
      // Under one lock for the records (uploads.lock beside them, as config.json.lock is beside
      // config.json): the record is read again and taken only if it is
      // still free, so of two runs that found it free, one resumes it and the other starts anew.
      return withFileLock(join(configDir, 'uploads.lock'), async () => {
        const file = fileOf(record);
        let current: UploadRecord | string;
        try {
          current = asRecord(JSON.parse(await readFile(file, 'utf8')));
        } catch {
          return undefined; // gone (finished or cleaned by its holder), or damaged: not resumed
        }
        if (typeof current === 'string' || busyElsewhere(current)) return undefined;
        const mine = { ...current, pid: process.pid, host: hostname() };
        await save(mine);
        return mine;
      });
    },
  };
}
