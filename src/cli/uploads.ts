import { createHash, randomBytes } from 'node:crypto';
import { mkdir, open, readdir, readFile, rename, rm } from 'node:fs/promises';
import { join } from 'node:path';
import type { ResumeStore, UploadRecord } from '../client/upload.js';
import { naming } from '../shared/syserr.js';

/**
 * Unfinished uploads of this client, one small 0600 JSON file each under
 * `<config dir>/uploads/`, so that running the same `fshare upload` again resumes it, and
 * `fshare uploads` can list and clean them. Several fshare processes may use it at once: each
 * record is its own file, written whole (temp file, then rename).
 */
export function uploadRecords(configDir: string): ResumeStore {
  const dir = join(configDir, 'uploads');
  const fileOf = (r: UploadRecord) =>
    join(
      dir,
      `${createHash('sha256').update(`${r.server}\0${r.share_id}\0${r.path}\0${r.mode}`).digest('hex').slice(0, 32)}.json`,
    );
  return {
    async list() {
      let names: string[];
      try {
        names = await readdir(dir);
      } catch {
        return [];
      }
      const records: UploadRecord[] = [];
      for (const name of names.filter((n) => n.endsWith('.json'))) {
        try {
          records.push(JSON.parse(await readFile(join(dir, name), 'utf8')) as UploadRecord);
        } catch {
          // written by a newer version, or cut short by a crash: not ours to use
        }
      }
      return records.sort((a, b) => a.started.localeCompare(b.started));
    },
    async save(record) {
      const target = fileOf(record);
      const tmp = `${target}.${randomBytes(6).toString('hex')}.tmp`;
      try {
        await mkdir(dir, { recursive: true, mode: 0o700 });
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
    },
    async remove(record) {
      await rm(fileOf(record), { force: true });
    },
  };
}
