// A database file used by Node tools, the inbox CLI and other SQLite
// programs at the same time: real processes, a real file, real SIGKILLs.
// The `file` store opens the file with Node's own SQLite, so every byte is
// SQLite's: every write a caller was told happened is in the file at the
// end, SQLite finds the file intact, and a wait in each program wakes on
// the others' commits. What is unsafe (the bytes of a live database, a
// copy written over one) fails loudly before anything is lost.

import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { execFile, execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";

import { Inbox } from "inbox-wasm";

const cli = process.env.INBOX_BIN;
const skip = !cli && "INBOX_BIN is not set (scripts/test-wasm sets it)";
const here = dirname(fileURLToPath(import.meta.url));
const nodeRound = join(here, "..", "fixtures", "node-round.mjs");
const nodeWriter = join(here, "..", "fixtures", "node-writer.mjs");
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

/** The Node named by INBOX_OLD_NODE when it is older than 22.16, else null. */
function oldNode() {
  const old = process.env.INBOX_OLD_NODE;
  if (!old) return null;
  const [major, minor] = execFileSync(old, ["--version"], { encoding: "utf8" }).trim().slice(1).split(".").map(Number);
  return major < 22 || (major === 22 && minor < 16) ? old : null;
}

/** A Python program that commits COUNT rows to its own table, one
 * transaction each, and prints each row as soon as it is committed. */
const pythonWriter = [
  "import sqlite3, sys",
  "db, writer, count = sys.argv[1], sys.argv[2], int(sys.argv[3])",
  "c = sqlite3.connect(db, timeout=30, isolation_level=None)",
  "for n in range(count):",
  "    c.execute('BEGIN IMMEDIATE')",
  "    c.execute('INSERT INTO py_log (writer, n) VALUES (?, ?)', (writer, n))",
  "    c.execute('COMMIT')",
  "    print(f'{writer} {n}', flush=True)",
].join("\n");

/** A process in its own process group whose stdout lines are collected:
 * `done` resolves with them when it exits (killed or not), `ready` at its
 * first line, and `killAfter(n)` sends SIGKILL to the whole group as soon
 * as n lines have come (resolving once it is sent). */
function writer(command, args) {
  const child = spawn(command, args, { detached: true, stdio: ["ignore", "pipe", "inherit"] });
  let out = "";
  const watchers = [];
  const lines = () => out.split("\n").length - 1;
  child.stdout.on("data", (chunk) => {
    out += chunk;
    for (const w of watchers.filter((w) => lines() >= w.n)) w.reached();
  });
  const when = (n) => new Promise((reached) => (lines() >= n ? reached() : watchers.push({ n, reached })));
  const done = new Promise((resolve) => child.on("close", () => resolve(out.split("\n").filter(Boolean))));
  const killAfter = async (n) => {
    await when(n);
    process.kill(-child.pid, "SIGKILL");
  };
  return { ready: when(1), done, killAfter };
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

  test("the CLI, Node and Python write the file at once, some killed mid-run: every acknowledged write is there and the file is intact", async () => {
    const db = scratch();
    inbox(db, "init");
    execFileSync("python3", ["-c", "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); c.execute('CREATE TABLE py_log (writer TEXT, n INTEGER)'); c.commit()", db]);
    const writers = [
      ...[0, 1, 2].map((w) => writer("bash", ["-c", `for i in $(seq 1 120); do "$0" --db "$1" send --from lead --to worker --subject "cli $2 $i" --json | tr -d '\\n'; echo; done`, cli, db, String(w)])),
      ...[0, 1, 2].map((n) => writer(process.execPath, [nodeWriter, db, `node ${n}`, "300"])),
      ...[0, 1, 2].map((p) => writer("python3", ["-c", pythonWriter, db, `py ${p}`, "400"])),
    ];
    // One of each kind is killed with SIGKILL mid-run, once it has
    // acknowledged 40 writes: its whole process group (a CLI command in
    // flight dies with its loop).
    await Promise.all([writers[0], writers[3], writers[6]].map((victim) => victim.killAfter(40)));
    const outputs = await Promise.all(writers.map((w) => w.done));

    // A CLI loop killed while a command printed may leave that last line
    // cut short: that command was never acknowledged.
    const parsed = (lines, killed) => lines.flatMap((line, i) => {
      try {
        return [JSON.parse(line)];
      } catch (error) {
        if (killed && i === lines.length - 1) return [];
        throw error;
      }
    });
    const cliIds = outputs.slice(0, 3).flatMap((lines, i) => parsed(lines, i === 0)).map((r) => (assert.equal(r.ok, true), r.thread.thread_id));
    const nodeIds = outputs.slice(3, 6).flat();
    const pyRows = outputs.slice(6, 9).flat();
    for (const [i, lines] of outputs.entries()) {
      const killed = i % 3 === 0;
      const full = [120, 300, 400][Math.floor(i / 3)];
      assert.ok(killed ? lines.length < full : lines.length === full, `writer ${i}: ${lines.length} acknowledged of ${full}`);
    }
    assert.ok(cliIds.length >= 200 && nodeIds.length >= 500 && pyRows.length >= 700, "hundreds of commits of each kind");

    const state = inspect(db);
    assert.equal(state.ok, "ok");
    const threads = new Set(state.ids);
    for (const id of [...cliIds, ...nodeIds]) assert.ok(threads.has(id), `acknowledged thread ${id} is in the file`);
    assert.deepEqual(state.events, state.events.map((_, i) => i + 1), "one event sequence, no gaps");
    const rows = JSON.parse(execFileSync("python3", ["-c", "import json, sqlite3, sys; c = sqlite3.connect(sys.argv[1]); print(json.dumps([f'{w} {n}' for w, n in c.execute('SELECT writer, n FROM py_log')]))", db], { encoding: "utf8" }));
    const stored = new Set(rows);
    for (const row of pyRows) assert.ok(stored.has(row), `Python's acknowledged commit ${row} is in the file`);
    // The CLI and Node read everything everyone wrote.
    assert.equal(inbox(db, "list", "--limit", "1000", "--status", "pending").threads.length >= 200, true);
    const reader = await Inbox.open({ store: "file", path: db });
    for (const id of [...cliIds.slice(-3), ...nodeIds.slice(-3)]) assert.equal(reader.show({ thread_id: id }).thread.thread_id, id);
    reader.close();
  });

  test("a Python program waiting on the file wakes on a Node commit, and Node's watch wakes on a CLI commit", async () => {
    const db = scratch();
    inbox(db, "init");
    // Python's wait: PRAGMA data_version changes when another connection commits.
    const waiter = writer("python3", ["-c", [
      "import sqlite3, sys, time",
      "c = sqlite3.connect(sys.argv[1], isolation_level=None)",
      "v = c.execute('PRAGMA data_version').fetchone()[0]",
      "print('ready', flush=True)",
      "deadline = time.time() + 20",
      "while c.execute('PRAGMA data_version').fetchone()[0] == v and time.time() < deadline: time.sleep(0.01)",
      "print(c.execute('SELECT subject FROM threads').fetchone()[0], flush=True)",
    ].join("\n"), db]);
    await waiter.ready;
    const node = await Inbox.open({ store: "file", path: db });
    node.send({ from_agent: "lead", to_agent: "worker", subject: "For Python to see" });
    assert.deepEqual(await waiter.done, ["ready", "For Python to see"]);

    const watching = node.watch({ agent: "worker", timeout_seconds: 20 });
    setTimeout(() => inbox(db, "send", "--from", "lead", "--to", "worker", "--subject", "From the CLI"), 200);
    const woke = await watching;
    assert.equal(woke.woke, true);
    node.close();
  });

  test("exportBytes of a file store is a self-contained copy that SQLite wrote", async () => {
    const db = scratch();
    inbox(db, "init");
    const sent = inbox(db, "send", "--from", "lead", "--to", "worker", "--subject", "Copied").thread.thread_id;
    const node = await Inbox.open({ store: "file", path: db });
    const bytes = node.exportBytes();
    node.close();
    assert.deepEqual([bytes[18], bytes[19]], [1, 1]);
    const copy = await Inbox.open({ store: "sqlite", bytes });
    assert.equal(copy.show({ thread_id: sent }).thread.subject, "Copied");
  });

  test("a Node without node:sqlite is refused with the minimum named, and nothing is written", { skip: !oldNode() && "no Node older than 22.16 here (scripts/test-wasm passes the machine's own as INBOX_OLD_NODE)" }, async () => {
    const db = scratch();
    const script = `import { Inbox } from "inbox-wasm"; Inbox.open({ store: "file", path: process.argv[1] }).then(() => console.log("opened"), (e) => console.log(JSON.stringify({ code: e.code, message: e.message })));`;
    const { stdout } = await run(oldNode(), ["--input-type=module", "-e", script, db], { cwd: join(here, "..") });
    const refused = JSON.parse(stdout);
    assert.equal(refused.code, "storage_error");
    assert.match(refused.message, /Node 22\.16 or later/);
    assert.throws(() => statSync(db), /ENOENT/, "no file was made");
  });
});
