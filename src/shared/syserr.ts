/**
 * A failure of the local system (a file that is missing, a directory, no permission, a full
 * disk) in words that name the path; undefined for anything else.
 */
export function systemErrorText(err: unknown): string | undefined {
  const e = err as NodeJS.ErrnoException | null;
  if (!e || typeof e !== 'object' || typeof e.code !== 'string' || typeof e.syscall !== 'string')
    return undefined;
  const path = e.path ?? (e as { dest?: string }).dest;
  const where = path ? `: ${path}` : '';
  switch (e.code) {
    case 'ENOENT':
      return `no such file or directory${where}`;
    case 'EACCES':
    case 'EPERM':
      return `permission denied${where}`;
    case 'EISDIR':
      return `is a directory, not a file${where}`;
    case 'ENOTDIR':
      return `not a directory${where}`;
    case 'EEXIST':
      return `already exists${where}`;
    case 'ENOSPC':
    case 'EDQUOT':
      return `no space left on the device${where}`;
    case 'EROFS':
      return `read-only file system${where}`;
    case 'EMFILE':
    case 'ENFILE':
      return 'too many open files (raise the limit with ulimit -n)';
    case 'ENAMETOOLONG':
      return `file name too long${where}`;
    case 'ELOOP':
      return `a symbolic link, which fshare never writes through${where}`;
    case 'EMLINK': // raised by fshare itself for a file with other names (see download.ts)
      return `a file with other names (a hard link), which fshare never writes through${where}`;
    case 'EIO':
      return `input/output error${where}`;
    case 'ENXIO': // a socket, or a device that is not there, opened as a file
      return `no such device or address${where}`;
    default:
      return undefined;
  }
}

/**
 * The error, naming `path` when it names no file: a write through a file handle (the one that
 * meets a full disk) carries no path, and "no space left on the device" alone does not say
 * which device.
 */
export function naming(err: unknown, path: string): unknown {
  if (err && typeof err === 'object' && typeof (err as { code?: unknown }).code === 'string')
    (err as { path?: string }).path ??= path;
  return err;
}
