// The board's idle cost: `inbox serve` with N open event streams (the
// connection every open board page holds) and nothing happening, measured
// as the CPU time the server process (all its threads) used over a window,
// from /proc/PID/schedstat (nanoseconds; Linux only). One follower serves
// every page, so this should not grow with N; the target is at most 1% of
// one core with 20 boards open.
//
//   node cli/tests/board/idle.mjs [--bin target/release/inbox] [--boards 20] [--seconds 10]
//
// Prints one JSON line: {"boards", "seconds", "cpu_ms", "core_percent"}.
// board.test.mjs runs it (5 s) and checks the target.

import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import http from 'node:http';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/** CPU time of every thread of `pid` so far, in ms. */
function cpuMs(pid) {
  let ns = 0;
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    ns += Number(readFileSync(`/proc/${pid}/task/${task}/schedstat`, 'utf8').split(' ')[0]);
  }
  return ns / 1e6;
}

/** Opens `count` event streams on the board at `url` (its token in the
 * fragment); resolves once each has its first event. */
function openStreams(url, count) {
  const requests = [];
  const token = new URL(url).hash.replace(/^#token=/, '');
  const headers = { Accept: 'text/event-stream', Authorization: `Bearer ${token}` };
  const opened = Array.from({ length: count }, () => new Promise((resolve, reject) => {
    const request = http.get(new URL('/api/events', url), { headers }, (response) => {
      if (response.statusCode !== 200) reject(new Error(`the event stream answered ${response.statusCode}`));
      response.once('data', () => resolve());
      response.on('error', () => {});
    });
    request.on('error', reject);
    requests.push(request);
  }));
  return Promise.all(opened).then(() => requests);
}

/** Measures an idle board with `boards` streams over `seconds`. */
export async function measureIdle({ bin, boards = 20, seconds = 10 }) {
  const dir = mkdtempSync(path.join(tmpdir(), 'inbox-board-idle-'));
  const env = { ...process.env, INBOX_DB: path.join(dir, 'coord.db') };
  for (const name of ['INBOX_AGENT', 'INBOX_AGENT_TOKEN', 'INBOX_NOW']) delete env[name];
  execFileSync(bin, ['init'], { env, stdio: 'ignore' });
  execFileSync(bin, ['send', '--from', 'lead', '--to', 'w1', '--subject', 'idle'], { env, stdio: 'ignore' });
  const server = spawn(bin, ['serve', '--port', '0'], { env, stdio: ['ignore', 'pipe', 'ignore'] });
  try {
    const url = await new Promise((resolve, reject) => {
      let out = '';
      server.stdout.on('data', (chunk) => {
        out += chunk;
        if (out.includes('\n')) resolve(out.split('\n')[0]);
      });
      server.on('exit', (code) => reject(new Error(`inbox serve exited with ${code}`)));
    });
    const streams = await openStreams(url, boards);
    // Let start-up work settle before the window opens.
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const before = cpuMs(server.pid);
    await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
    const used = cpuMs(server.pid) - before;
    for (const request of streams) request.destroy();
    return { boards, seconds, cpu_ms: Math.round(used * 10) / 10, core_percent: Math.round((used / (seconds * 1000)) * 10000) / 100 };
  } finally {
    server.kill();
    rmSync(dir, { recursive: true, force: true });
  }
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const args = process.argv.slice(2);
  const option = (name, fallback) => {
    const at = args.indexOf(`--${name}`);
    return at >= 0 ? args[at + 1] : fallback;
  };
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..', '..');
  const bin = path.resolve(option('bin', path.join(process.env.CARGO_TARGET_DIR || path.join(root, 'target'), 'release', 'inbox')));
  const result = await measureIdle({ bin, boards: Number(option('boards', 20)), seconds: Number(option('seconds', 10)) });
  console.log(JSON.stringify(result));
}
