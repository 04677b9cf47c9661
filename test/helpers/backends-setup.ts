import type { TestProject } from 'vitest/node';
import { startPostgres } from './postgres.js';
import { startS3 } from './s3.js';

/**
 * Global setup of the projects that run the server suite on PostgreSQL and S3 (vitest.config.ts):
 * one throwaway PostgreSQL cluster (Debian's postgresql, in a temp directory, on a free port)
 * and one s3rver, for the whole run; every test server gets its own database and bucket.
 */
export default async function setup(project: TestProject) {
  const pg = await startPostgres();
  let s3;
  try {
    s3 = await startS3();
  } catch (err) {
    await pg.stop();
    throw err;
  }
  project.provide('pgAdminUrl', pg.adminUrl);
  project.provide('s3Endpoint', s3.endpoint);
  return async () => {
    await s3.stop();
    await pg.stop();
  };
}

declare module 'vitest' {
  export interface ProvidedContext {
    pgAdminUrl: string;
    s3Endpoint: string;
  }
}
