import { Router } from 'express';
import type { Context } from '../context.js';
import { route } from '../http.js';

export function whoamiRoutes(_ctx: Context): Router {
  const router = Router();
  // Always 200: who the caller is, and what they may do (anonymous: default_permissions).
  route(router, '/whoami', {
    get: (req, res) => {
      res.json({ username: req.caller.username, permissions: req.caller.permissions });
    },
  });
  return router;
}
