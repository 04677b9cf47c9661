// Data directories written by fshare 0.1 (test/fixtures, made by make-v0.1-data.mjs from that
// version) open and migrate without loss (issue 9): every user, password, permission, share,
// owner, setting and revocation is there; 0.1's tokens keep working for the users they name,
// but never for a new user who takes a deleted or renamed user's name.
import { cp, mkdtemp, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import jwt from 'jsonwebtoken';
import { describe, expect, it } from 'vitest';
import {
  createUser,
  expectFail,
  expectStatus,
  get,
  getShare,
  patch,
  post,
  verifyAllContent,
} from '../helpers/http.js';
import { ADMIN, login, startServer } from '../helpers/server.js';

const FIXTURES = join(dirname(fileURLToPath(import.meta.url)), '..', 'fixtures');

interface Fixture {
  secret: string;
  tokens: Record<string, string>;
  shares: Record<string, string>;
}

async function open(name: string) {
  const dataDir = await mkdtemp(join(tmpdir(), `fshare-migrate-${name}-`));
  await cp(join(FIXTURES, name), dataDir, { recursive: true });
  const info = JSON.parse(await readFile(join(FIXTURES, `${name}.json`), 'utf8')) as Fixture;
  // The fixture's tokens were issued on the day it was made: the server's clock is set an hour
  // after that, so they are neither expired nor from the future whenever this test runs.
  const issued = (jwt.decode(info.tokens.admin!) as { iat: number }).iat;
  const clock = () => (issued + 3600) * 1000;
  const notices: string[] = [];
  const start = () =>
    startServer({ dataDir, secret: info.secret, clock, notice: (l) => notices.push(l) });
  return { dataDir, info, start, notices };
}

for (const name of ['v0.1-clean', 'v0.1-crashed']) {
  describe(`${name} (fshare 0.1)`, () => {
    it('keeps every user, password, permission, owner, setting and revocation', async () => {
      const { info, start, notices } = await open(name);
      const srv = await start();
      try {
        expect(notices.join('\n')).toMatch(/metadata of fshare 0\.1 carried over/);
        const admin = await login(srv.url, ADMIN.username, ADMIN.password);
        const users = await get(srv.url, '/users?per_page=100', { token: admin });
        const byName = Object.fromEntries(
          users.body.data.map((u: { username: string; permissions: string[] }) => [
            u.username,
            u.permissions,
          ]),
        );
        expect(byName).toEqual({
          admin: ['CREATE', 'MODIFY', 'DELETE', 'LOCK', 'LIST', 'ADMIN', 'READ'],
          alice: ['CREATE', 'MODIFY', 'LIST', 'READ'],
          bob: ['READ'],
          carol: ['CREATE', 'MODIFY', 'READ'], // renamed from carol0 in 0.1
        });
        for (const user of ['alice', 'bob']) await login(srv.url, user, `${user}-pw`);
        await login(srv.url, 'carol', 'carol0-pw');
        const settings = await get(srv.url, '/admin/settings', { token: admin });
        expect(settings.body).toEqual({
          default_permissions: ['READ'],
          max_expiry: null,
          max_downloads: null,
        });

        const owner = async (id: string) => (await getShare(srv.url, admin, id)).owner_name;
        expect(await owner(info.shares.placed!)).toBe('alice');
        expect(await owner(info.shares.anonymous!)).toBeNull();
        expect(await owner(info.shares.carol!)).toBe('carol');
        expect(await owner(info.shares.dave!)).toBe('dave (deleted)');
        expect((await getShare(srv.url, admin, info.shares.locked!)).locked).toBe(true);
        expect((await getShare(srv.url, admin, info.shares.empty!)).initialized).toBe(false);
        await verifyAllContent(srv.url, admin);
        // Alice still owns hers; carol hers, under the new name.
        const alice = await login(srv.url, 'alice', 'alice-pw');
        expectStatus(
          await patch(srv.url, `/files/${info.shares.placed}`, {
            token: alice,
            json: { file_name: 'renamed.bin' },
          }),
          200,
        );
      } finally {
        await srv.close(false);
      }
    });

    it("0.1's tokens work for the users they name, until those users' tokens are ended", async () => {
      const { info, start } = await open(name);
      const srv = await start();
      try {
        const whoami = (token: string) => get(srv.url, '/whoami', { token });
        expect((await whoami(info.tokens.alice!)).body.username).toBe('alice');
        expect((await whoami(info.tokens.bob!)).body.username).toBe('bob');
        // Revoked in 0.1: still revoked.
        expectFail(await whoami(info.tokens.alice_revoked!), 401);
        // Dave was deleted and carol0 renamed in 0.1: their tokens name nobody now.
        expectFail(await whoami(info.tokens.dave!), 401);
        expectFail(await whoami(info.tokens.carol0!), 401);
        // A new "dave" gets neither the old dave's token nor his share.
        const admin = await login(srv.url, ADMIN.username, ADMIN.password);
        const dave = await createUser(srv.url, admin, ['CREATE', 'MODIFY', 'READ'], 'dave');
        expectFail(await whoami(info.tokens.dave!), 401);
        expectFail(
          await patch(srv.url, `/files/${info.shares.dave}`, {
            token: dave.token,
            json: { file_name: 'mine now' },
          }),
          403,
        );
        // A password change ends alice's 0.1 token; bob's is untouched.
        expectStatus(
          await post(srv.url, '/users/password', {
            token: info.tokens.alice!,
            json: { old: 'alice-pw', new: 'alice-new-pw' },
          }),
          200,
        );
        expectFail(await whoami(info.tokens.alice!), 401);
        expect((await whoami(info.tokens.bob!)).body.username).toBe('bob');
        // Renaming bob ends his 0.1 token (it names him by his old name).
        expectStatus(
          await patch(srv.url, '/users/bob', { token: admin, json: { username: 'robert' } }),
          200,
        );
        expectFail(await whoami(info.tokens.bob!), 401);
      } finally {
        await srv.close(false);
      }
    });

    it('the migration is written once: ids, and tokens issued after it, survive restarts', async () => {
      const { start, dataDir } = await open(name);
      const first = await start();
      const token = await login(first.url, 'alice', 'alice-pw');
      await first.server.close();
      const db = JSON.parse(await readFile(join(dataDir, 'db.json'), 'utf8'));
      expect(db.version).toBe(2);
      // alice's 0.1 hash (scrypt N=2^14) was replaced at her sign-in, with the same password;
      // bob, who did not sign in, keeps his until he does.
      const hashOf = (u: string) =>
        db.users.find((x: { username: string }) => x.username === u).password_hash as string;
      expect(hashOf('alice')).toMatch(/^scrypt\$32768\$8\$1\$/);
      expect(hashOf('bob')).toMatch(/^scrypt\$16384\$8\$1\$/);
      expect(db.users.every((u: { id?: string }) => typeof u.id === 'string')).toBe(true);
      expect(await readFile(join(dataDir, 'db.journal'), 'utf8')).toBe('');
      const second = await start();
      try {
        expect((await get(second.url, '/whoami', { token })).body.username).toBe('alice');
        await login(second.url, 'alice', 'alice-pw'); // the new hash verifies
        const again = JSON.parse(await readFile(join(dataDir, 'db.json'), 'utf8'));
        expect(again.users.map((u: { id: string }) => u.id)).toEqual(
          db.users.map((u: { id: string }) => u.id),
        );
      } finally {
        await second.close();
      }
    });
  });
}
