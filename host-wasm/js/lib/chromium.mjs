// What the browser test and the benchmark share: where Debian's Chromium is,
// the flags it needs on these machines, and a static file server for pages
// that import the package's web build.

import { readFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import path from 'node:path';

/** Debian's Chromium (`apt install chromium`), or $CHROMIUM. */
export const executablePath = process.env.CHROMIUM || '/usr/bin/chromium';

/**
 * `--no-sandbox`: the tests run as root. The rest keep Chromium from
 * reaching for Google's services, which this machine's closed network
 * refuses many times a second otherwise.
 */
export const CHROMIUM_ARGS = [
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const CONTENT_TYPES = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.wasm': 'application/wasm',
  '.json': 'application/json',
  '.css': 'text/css; charset=utf-8',
};

/**
 * A static server on 127.0.0.1 (a free port): each URL prefix of `roots`
 * (`{'/pkg/': dir, '/': dir}`, longest first wins) is served from its folder,
 * `index` for a bare folder path, nothing outside the folders. Every request
 * is recorded in `served` ({path, status}) for failure messages.
 */
export function serveStatic(roots, served = [], index = 'index.html') {
  const prefixes = Object.keys(roots).sort((a, b) => b.length - a.length);
  const server = createServer(async (request, response) => {
    const urlPath = new URL(request.url, 'http://localhost').pathname;
    const prefix = prefixes.find((p) => urlPath.startsWith(p));
    const root = prefix && path.resolve(roots[prefix]);
    let rest = prefix ? '/' + decodeURIComponent(urlPath.slice(prefix.length)) : '';
    if (rest.endsWith('/')) rest += index;
    const file = root && path.resolve(root, '.' + path.posix.normalize(rest));
    const type = file && file.startsWith(root + path.sep) && CONTENT_TYPES[path.extname(file)];
    try {
      if (!type || request.method !== 'GET') throw new Error('not served');
      const body = await readFile(file);
      response.writeHead(200, { 'Content-Type': type, 'Content-Length': body.length, 'Cache-Control': 'no-store' });
      response.end(body);
      served.push({ path: urlPath, status: 200, type });
    } catch {
      response.writeHead(404, { 'Content-Type': 'text/plain' });
      response.end(`not found: ${urlPath}\n`);
      served.push({ path: urlPath, status: 404 });
    }
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => resolve(server));
  });
}
