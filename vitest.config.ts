import { configDefaults, defineConfig } from 'vitest/config';

/**
 * Test files of the server suite that are about the embedded store and file storage
 * themselves (its journal, fsync order, data-directory layout, full disks, fshare 0.1 data
 * directories, killed `fshare serve` processes on a data directory) or that test the other
 * backends directly; every other server test also runs on PostgreSQL + S3 and on two servers.
 */
const EMBEDDED_ONLY = [
  'test/server/journal.test.ts',
  'test/server/fsync-order.test.ts',
  'test/server/disk-full.test.ts',
  'test/server/migration.test.ts',
  'test/server/crash.test.ts',
  'test/server/crash-points.test.ts',
  'test/server/link-crash.test.ts',
  'test/server/postgres-store.test.ts',
  'test/server/s3-storage.test.ts',
  'test/server/two-servers.test.ts',
  'test/server/s3-crash.test.ts',
  'test/server/handover-crash.test.ts',
  'test/server/backend-down.test.ts',
  'test/server/restore.test.ts',
];

/** Test files of the server suite that only mean something on PostgreSQL and S3. */
const SHARED_BACKEND_ONLY = [
  'test/server/lost-answer.test.ts',
  'test/server/lost-lock-objects.test.ts',
];

/** The server suite on PostgreSQL (a throwaway cluster) and s3rver, started by the setup. */
const sharedBackend = (name: string, alsoExclude: string[] = []) => ({
  extends: true as const,
  test: {
    name,
    include: ['test/server/**/*.test.ts'],
    exclude: [...EMBEDDED_ONLY, ...alsoExclude],
    globalSetup: ['test/helpers/backends-setup.ts'],
    env: {
      FSHARE_TEST_BACKEND: name,
      AWS_ACCESS_KEY_ID: 'S3RVER',
      AWS_SECRET_ACCESS_KEY: 'S3RVER',
      AWS_REGION: 'us-east-1',
    },
  },
});

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    setupFiles: ['test/helpers/tmp-per-file.ts'],
    pool: 'forks',
    projects: [
      {
        extends: true,
        test: {
          name: 'embedded',
          include: ['test/**/*.test.ts'],
          // Tests of what only a shared PostgreSQL can do (a connection's answer lost), which
          // the shared-backend projects run.
          exclude: [...configDefaults.exclude, ...SHARED_BACKEND_ONLY],
        },
      },
      sharedBackend('postgres-s3'),
      // Behind the balancer the servers must trust its X-Forwarded-For, which the test of an
      // untrusted X-Forwarded-For checks they do not do by default.
      sharedBackend('two-servers', ['test/server/trust-proxy.test.ts']),
    ],
  },
});
