#!/usr/bin/env node
// dist/bundle/ is dist/cli/ bundled (scripts/bundle.mjs): the same code in fewer files, faster to load.
import '../dist/bundle/main.js';
