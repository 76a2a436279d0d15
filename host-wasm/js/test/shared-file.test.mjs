// A database file used by Node tools and by the inbox CLI at the same time
// (issue 13): real processes, a real file. Every write a caller was told
// happened is in the file at the end, and SQLite finds the file intact;
// what is unsafe (the bytes of a live database, a copy written over one)
// fails loudly before anything is lost.

import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { hostname, tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Inbox } from "inbox-wasm";

const cli = process.env.INBOX_BIN;
const skip = !cli && "INBOX_BIN is not set (scripts/test-wasm sets it)";
const here = dirname(fileURLToPath(import.meta.url));
const nodeRound = join(here, "..", "fixtures", "node-round.mjs");
const run = promisify(execFile);

/** `inbox --db DB ARGS --json`, parsed; throws with the output on failure. */
function inbox(db, ...args) {
  return JSON.parse(execFileSync(cli, ["--db", db, ...args, "--json"], { encoding: "utf8" }));
}

/** `inbox` as a process that may fail: its exit code and parsed stdout. */
function inboxStatus(db, ...args) {
  try {
    return { code: 0, json: inbox(db, ...args) };
  } catch (error) {
    return { code: error.status, json: JSON.parse(error.stdout) };
  }
}

/** SQLite's own verdict on the file, and the thread ids it holds. */
function inspect(db) {
  const script = [
    "import json, sqlite3, sys",
    "c = sqlite3.connect(sys.argv[1])",
    "ok = c.execute('PRAGMA integrity_check').fetchone()[0]",
    "ids = [r[0] for r in c.execute('SELECT thread_id FROM threads')]",
    "events = [r[0] for r in c.execute('SELECT event_id FROM events ORDER BY event_id')]",
    "print(json.dumps({'ok': ok, 'ids': ids, 'events': events}))",
  ].join("\n");
  return JSON.parse(execFileSync("python3", ["-c", script, db], { encoding: "utf8" }));
}

// Every scratch folder goes when the file's tests end: CI machines are
// short of disk, and a run must leave the temporary folder as it found it.
const scratchDirs = [];
after(() => scratchDirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

function scratch() {
  const dir = mkdtempSync(join(tmpdir(), "inbox-shared-"));
  scratchDirs.push(dir);
  return join(dir, "team.inbox.db");
}

/** Writes `db`'s writer lock as process `pid` of this host and namespace left it. */
function leaveLock(db, pid, by) {
  let pidNs = null;
  try {
    pidNs = execFileSync("readlink", ["/proc/self/ns/pid"], { encoding: "utf8" }).trim();
  } catch {}
  const holder = { pid, pid_ns: pidNs, host: hostname(), nonce: "left-behind", by };
  writeFileSync(`${db}-lock`, JSON.stringify(holder), { mode: 0o600 });
}

describe("a database file shared by Node and the CLI", { skip }, () => {
  test("the README sequence, CLI and Node processes in turn for five rounds, loses nothing", async () => {
    const db = scratch();
    const acknowledged = [];
    for (let round = 0; round < 5; round++) {
      const { stdout } = await run(process.execPath, [nodeRound, db, `node round ${round}`, "4"]);
      acknowledged.push(...JSON.parse(stdout));
      for (let i = 0; i < 3; i++) {
        acknowledged.push(inbox(db, "send", "--from", "lead", "--to", "worker", "--subject", `cli round ${round} ${i}`).thread.thread_id);
      }
      // Each side sees everything so far.
      assert.equal(inbox(db, "list", "--limit", "1000").threads.length, acknowledged.length);
    }
    const mode = (path) => (statSync(path).mode & 0o777).toString(8);
    assert.equal(mode(db), "600");
    assert.equal(mode(`${db}-wal`), "600");
    assert.ok(!existsSync(`${db}-lock`), "no lock left behind");
    const state = inspect(db);
    assert.equal(state.ok, "ok");
    assert.deepEqual(state.ids.sort(), [...acknowledged].sort());
    // One event sequence, no gaps: every write of either side is in it.
    assert.deepEqual(state.events, state.events.map((_, i) => i + 1));
  });

  test("Node and several CLI processes writing at the same time lose nothing", async () => {
    const db = scratch();
    inbox(db, "init");
    const writers = [0, 1, 2].map((w) =>
      run("bash", ["-c", `for i in $(seq 1 25); do "$0" --db "$1" send --from lead --to worker --subject "cli $2 $i" --json; echo; done`, cli, db, String(w)]),
    );
    const nodes = [0, 1].map((n) => run(process.execPath, [nodeRound, db, `node ${n}`, "25"]));
    const acknowledged = [];
    for (const { stdout } of await Promise.all(writers)) {
      for (const line of stdout.split("\n").filter(Boolean)) {
        const response = JSON.parse(line);
        assert.equal(response.ok, true, line);
        acknowledged.push(response.thread.thread_id);
      }
    }
    for (const { stdout } of await Promise.all(nodes)) {
      acknowledged.push(...JSON.parse(stdout));
    }
    assert.equal(acknowledged.length, 3 * 25 + 2 * 25);
    const state = inspect(db);
    assert.equal(state.ok, "ok");
    assert.deepEqual(state.ids.sort(), acknowledged.sort());
  });

  test("waits cross the boundary: a CLI wait-reply woken by Node, a Node waitReply woken by the CLI", async () => {
    const db = scratch();
    inbox(db, "init");
    const node = await Inbox.open({ store: "file", path: db });
    const { thread } = node.send({ from_agent: "lead", to_agent: "worker", subject: "Question time" });
    const { lease } = inbox(db, "claim", "--agent", "worker", "--thread", thread.thread_id);
    inbox(db, "update", "--agent", "worker", "--thread", thread.thread_id, "--lease-token", String(lease.lease_token), "--status", "blocked", "--summary", "Which one?");

    // The CLI worker waits, keeping its lease alive, while Node writes.
    const waiter = spawn(cli, ["--db", db, "wait-reply", "--agent", "worker", "--thread", thread.thread_id, "--lease-token", String(lease.lease_token), "--timeout-seconds", "20", "--json"]);
    let out = "";
    waiter.stdout.on("data", (chunk) => (out += chunk));
    const exited = new Promise((resolve) => waiter.on("exit", resolve));
    await new Promise((resolve) => setTimeout(resolve, 300));
    for (let i = 0; i < 5; i++) node.send({ from_agent: "lead", to_agent: "other", subject: `Noise ${i}` });
    node.reply({ from_agent: "lead", thread_id: thread.thread_id, kind: "answer", summary: "The second" });
    assert.equal(await exited, 0, out);
    const woke = JSON.parse(out);
    assert.equal(woke.woke, true);
    assert.equal(woke.message.summary, "The second");

    // And the other way round.
    const second = node.send({ from_agent: "lead", to_agent: "worker", subject: "Node waits" }).thread;
    const claimed = node.claim({ agent: "worker", thread_id: second.thread_id }).lease;
    node.update({ agent: "worker", thread_id: second.thread_id, lease_token: claimed.lease_token, status: "blocked", summary: "Go?" });
    const started = performance.now();
    const waiting = node.waitReply({ agent: "worker", thread_id: second.thread_id, lease_token: claimed.lease_token, timeout_seconds: 20 });
    setTimeout(() => inbox(db, "reply", "--from", "lead", "--thread", second.thread_id, "--kind", "answer", "--summary", "Go"), 200);
    const answer = await waiting;
    assert.equal(answer.woke, true);
    assert.equal(answer.message.summary, "Go");
    assert.ok(performance.now() - started < 5000, "woken within a few polls");
    node.close();
    assert.equal(inspect(db).ok, "ok");
  });

  test("the bytes of a live database are refused, and a copy written over one is refused by the CLI, before anything is lost", async () => {
    const db = scratch();
    inbox(db, "init");
    const first = inbox(db, "send", "--from", "lead", "--to", "worker", "--subject", "In the log").thread.thread_id;
    assert.ok(statSync(`${db}-wal`).size > 32, "the commit is in the -wal, as the CLI leaves it");

    // The README's old example: the file's bytes miss what is in its -wal.
    const refused = await Inbox.open({ store: "sqlite", bytes: readFileSync(db) }).then(
      () => assert.fail("bytes of a WAL-mode file must be refused"),
      (error) => error,
    );
    assert.equal(refused.code, "storage_error");
    assert.match(refused.message, /\{store: "file", path\}/);

    // A copy written over the live file: the CLI refuses to mix it with the
    // -wal of the database it replaced, and the -wal is left as it was.
    const copy = await Inbox.open({ store: "sqlite" });
    copy.send({ from_agent: "lead", to_agent: "worker", subject: "In the copy" });
    const wal = readFileSync(`${db}-wal`);
    writeFileSync(db, copy.exportBytes());
    const { code, json } = inboxStatus(db, "list");
    assert.equal(code, 50);
    assert.equal(json.error.code, "storage_error");
    assert.match(json.error.message, /written over by a copy/);
    assert.deepEqual(readFileSync(`${db}-wal`), wal);
    assert.ok(wal.includes(Buffer.from(first)), "the commit is still in the -wal");
  });

  test("a lock left by a process that died stops no one", async () => {
    const db = scratch();
    inbox(db, "init");
    const me = process.getuid();
    // A holder that no longer runs, on this host and namespace.
    const dead = spawn(process.execPath, ["-e", ""]);
    await new Promise((resolve) => dead.on("exit", resolve));
    leaveLock(db, dead.pid, "a crashed Node tool");
    assert.equal(statSync(`${db}-lock`).uid, me);
    const started = performance.now();
    assert.equal(inbox(db, "send", "--from", "lead", "--to", "w", "--subject", "CLI").ok, true);
    const node = await Inbox.open({ store: "file", path: db });
    assert.equal(node.send({ from_agent: "lead", to_agent: "w", subject: "Node" }).ok, true);
    node.close();
    assert.ok(performance.now() - started < 3000, "neither waited out the lock");
    assert.equal(inspect(db).ids.length, 2);
  });

  test("a lock left by a killed process that is not reaped yet stops no one", async () => {
    const db = scratch();
    inbox(db, "init");
    // A parent that forks a child which exits at once, and never reaps it:
    // the child stays a zombie, which a signal-0 probe still finds.
    const parent = spawn("python3", ["-c", [
      "import os, sys, time",
      "pid = os.fork()",
      "if pid == 0: os._exit(0)",
      "print(pid, flush=True)",
      "time.sleep(60)",
    ].join("\n")], { stdio: ["ignore", "pipe", "inherit"] });
    try {
      const zombie = Number(await new Promise((resolve) => parent.stdout.once("data", resolve)));
      while (!/\) Z /.test(readFileSync(`/proc/${zombie}/stat`, "utf8"))) {
        await new Promise((resolve) => setTimeout(resolve, 5));
      }
      leaveLock(db, zombie, "a killed Node tool");
      const started = performance.now();
      const node = await Inbox.open({ store: "file", path: db });
      assert.equal(node.send({ from_agent: "lead", to_agent: "w", subject: "Node" }).ok, true);
      node.close();
      assert.equal(inbox(db, "send", "--from", "lead", "--to", "w", "--subject", "CLI").ok, true);
      assert.ok(performance.now() - started < 3000, "neither waited out the zombie's lock");
      assert.equal(inspect(db).ids.length, 2);
    } finally {
      parent.kill();
    }
  });

  test("store: \"file\" needs a path, keeps the machine's clock, and refuses a database of another program", async () => {
    const missing = await Inbox.open({ store: "file" }).then(() => assert.fail("no path"), (e) => e);
    assert.equal(missing.code, "invalid_request");
    // A clock of its own would let this process expire the CLI agents' leases.
    const clocked = await Inbox.open({ store: "file", path: scratch(), now: "2099-01-01T00:00:00Z" })
      .then(() => assert.fail("a file store with a clock of its own"), (e) => e);
    assert.equal(clocked.code, "invalid_request");
    assert.match(clocked.message, /machine's time/);
    const db = scratch();
    execFileSync("python3", ["-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('PRAGMA journal_mode=WAL'); c.execute('CREATE TABLE x (y)'); c.commit()", db]);
    const foreign = await Inbox.open({ store: "file", path: db }).then(() => assert.fail("another program's database"), (e) => e);
    assert.equal(foreign.code, "storage_error");
    assert.match(foreign.message, /another program/);
  });
});
