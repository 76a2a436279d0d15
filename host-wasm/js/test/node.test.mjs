// The inbox-wasm package in Node, imported the way a user imports it (the
// package installed from its npm tarball by scripts/test-wasm), on both
// stores that run outside a browser. Each test names the promise it pins.

import { test, describe, after } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

import { Inbox, runScript, runScriptOn } from "inbox-wasm";

const here = dirname(fileURLToPath(import.meta.url));
const corpus = join(here, "../../../tests/corpus");
const NOW = "2026-01-01T00:00:00Z";

// Scratch folders for the tests that share files with the CLI; they go when
// the file's tests end, so a run leaves the temporary folder as it found it.
const scratchDirs = [];
after(() => scratchDirs.forEach((dir) => rmSync(dir, { recursive: true, force: true })));

function scratchDir() {
  const dir = mkdtempSync(join(tmpdir(), "inbox-wasm-"));
  scratchDirs.push(dir);
  return dir;
}

/** The corpus: each script's file name, text and golden transcript. */
function corpusScripts() {
  const files = readdirSync(corpus).filter((f) => f.endsWith(".inbox")).sort();
  assert.ok(files.length >= 10, "the corpus went missing");
  return files.map((file) => {
    const name = file.replace(/\.inbox$/, "");
    const golden = readFileSync(join(corpus, "snapshots", `${name}.snap`), "utf8");
    // An insta snapshot: a YAML header between two `---` lines, then the text.
    const expected = golden.slice(golden.indexOf("\n---\n") + 5);
    return { file, name, text: readFileSync(join(corpus, file), "utf8"), expected };
  });
}

/** Checks a transcript against a script's golden one, naming the script and the store. */
function assertGolden(transcript, { file, expected }, where) {
  assert.deepEqual(transcript.failures, [], `${where}: ${file}`);
  assert.equal(transcript.text.trimEnd(), expected.trimEnd(), `${where}: ${file} differs from its golden transcript`);
}

/** The error a call throws, or a failure if it does not throw. */
function thrown(f) {
  try {
    f();
  } catch (error) {
    return error;
  }
  assert.fail("expected the call to throw an InboxError");
}

/** The rejection of a promise, or a failure if it resolves. */
async function rejected(promise) {
  try {
    await promise;
  } catch (error) {
    return error;
  }
  assert.fail("expected the promise to reject with an InboxError");
}

/** Every key path of a JSON value, to compare shapes field for field. */
function shape(value, path = "") {
  if (Array.isArray(value)) {
    return value.length ? shape(value[0], `${path}[]`) : [`${path}[]`];
  }
  if (value && typeof value === "object") {
    return Object.keys(value)
      .sort()
      .flatMap((key) => [`${path}.${key}`, ...shape(value[key], `${path}.${key}`)]);
  }
  return [];
}

for (const store of ["memory", "sqlite"]) {
  describe(`store ${store}`, () => {
    test("a full worker loop: send, claim next, progress, question, waitReply woken by the answer, done", async () => {
      const inbox = await Inbox.open({ store });
      assert.equal(inbox.store, store);
      const sent = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Add login" });
      assert.equal(sent.ok, true);
      assert.equal(sent.command, "send");
      const id = sent.thread.thread_id;
      assert.match(id, /^thr_/);

      assert.equal(inbox.fetch({ agent: "worker" }).threads.length, 1);
      const { lease } = inbox.claim({ agent: "worker", next: true });
      assert.equal(lease.thread_id, id);
      assert.equal(lease.lease_token, 1);
      inbox.update({ agent: "worker", thread_id: id, lease_token: 1, status: "in_progress", summary: "Reading the code" });
      inbox.update({ agent: "worker", thread_id: id, lease_token: 1, status: "blocked", summary: "Which provider?" });

      const waiting = inbox.waitReply({ agent: "worker", thread_id: id, lease_token: 1, timeout_seconds: 30 });
      assert.equal(inbox.pendingWaits, 1);
      const started = performance.now();
      setTimeout(() => inbox.reply({ from_agent: "lead", thread_id: id, kind: "answer", summary: "GitHub" }), 20);
      const answer = await waiting;
      assert.equal(answer.woke, true);
      assert.equal(answer.message.summary, "GitHub");
      assert.equal(answer.message.kind, "answer");
      assert.ok(performance.now() - started < 5000, "the answer woke the wait, not its timeout");
      assert.equal(inbox.pendingWaits, 0);

      const done = inbox.done({ agent: "worker", thread_id: id, lease_token: 1, summary: "Login works" });
      assert.equal(done.thread.status, "done");
      const history = inbox.show({ thread_id: id });
      assert.deepEqual(
        history.messages.map((m) => m.kind),
        ["task", "progress", "question", "answer", "result"],
      );
      inbox.close();
    });

    test("orch as methods: a plan, a dispatch, orchWait woken by the worker's done, accept, and a cycle refused", async () => {
      const inbox = await Inbox.open({ store });
      inbox.orchRunCreate({ agent: "lead", run_id: "r", goal: "Ship it" });
      const plan = inbox.orchPlan({
        agent: "lead",
        run_id: "r",
        tasks: [
          { task_id: "a", title: "First", assignee: "worker", review: true },
          { task_id: "b", title: "Second", assignee: "worker", needs: ["a"] },
        ],
      });
      assert.deepEqual(plan.tasks.map((t) => t.status), ["ready", "pending"]);
      const cycle = thrown(() => inbox.orchTaskAdd({ agent: "lead", run_id: "r", task: { task_id: "c", title: "C", assignee: "worker", needs: ["c"] } }));
      assert.equal(cycle.code, "dependency_cycle");
      assert.equal(cycle.exitCode, 30);

      const { dispatched } = inbox.orchDispatch({ agent: "lead", run_id: "r", all_ready: true });
      assert.equal(dispatched.length, 1);
      const thread = dispatched[0].attempt.thread_id;
      const { lease } = inbox.claim({ agent: "worker", next: true });
      assert.equal(lease.thread_id, thread);

      const waiting = inbox.orchWait({ run_id: "r", after_event: plan.event_id, timeout_seconds: 30 });
      inbox.done({ agent: "worker", thread_id: thread, lease_token: lease.lease_token, summary: "First done" });
      const woke = await waiting;
      assert.equal(woke.woke, true);
      assert.deepEqual(woke.actionable.map((t) => [t.task_id, t.status]), [["a", "review"]]);

      const accepted = inbox.orchAccept({ agent: "lead", run_id: "r", task_id: "a" });
      assert.equal(accepted.task.status, "done");
      assert.deepEqual(accepted.affected.map((t) => [t.task_id, t.status]), [["b", "ready"]]);
      const status = inbox.orchStatus({ run_id: "r" });
      assert.equal(status.run.counts.done, 1);
      assert.equal(status.run.counts.ready, 1);
      inbox.close();
    });

    test("watch resolves on a later command's commit and times out with woke: false", async () => {
      const inbox = await Inbox.open({ store });
      const watching = inbox.watch({ agent: "worker", timeout_seconds: 30 });
      inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Task" });
      const woke = await watching;
      assert.equal(woke.woke, true);
      assert.equal(woke.events[0].event_type, "thread_created");

      const started = performance.now();
      const quiet = await inbox.watch({ agent: "worker", after_event: woke.next_event_id, timeout_seconds: 1 });
      const waited = performance.now() - started;
      assert.equal(quiet.woke, false);
      assert.ok(waited >= 900 && waited < 4000, `timed out after ${waited} ms, not about 1 s`);
      inbox.close();
    });

    test("a refusal throws an InboxError with the CLI's code and exit code, and changes nothing", async () => {
      const inbox = await Inbox.open({ store });
      const { thread } = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Task" });
      inbox.claim({ agent: "worker", thread_id: thread.thread_id });
      const before = JSON.stringify(inbox.show({ thread_id: thread.thread_id }));

      const conflict = thrown(() => inbox.claim({ agent: "worker", thread_id: thread.thread_id }));
      assert.ok(conflict instanceof Error);
      assert.equal(conflict.name, "InboxError");
      assert.equal(conflict.code, "lease_conflict");
      assert.equal(conflict.exitCode, 20);
      assert.equal(conflict.command, "claim");
      assert.match(conflict.message, /is held by worker/);
      assert.deepEqual(conflict.response.error.code, "lease_conflict");

      const cases = [
        [() => inbox.claim({ agent: "worker", thread_id: "thr_nope" }), "thread_not_found", 40],
        [() => inbox.claim({ agent: "other", thread_id: thread.thread_id }), "not_assigned", 30],
        [() => inbox.send({ from_agent: "lead", to_agent: "worker" }), "missing_field", 30],
        [() => inbox.send({ from_agent: "lead", to_agent: "worker", subject: "s", priority: "urgent" }), "invalid_request", 30],
        [() => inbox.send({ from_agent: "lead", to_agent: "worker", subject: "s", colour: "red" }), "invalid_request", 30],
        [() => inbox.send({ from_agent: "lead", to_agent: "worker", subject: "s", payload: [1] }), "invalid_payload", 30],
        [() => inbox.send({ from_agent: "lead", to_agent: "worker", subject: "x".repeat(1_100_000) }), "too_long", 30],
        [() => inbox.send("not an object"), "invalid_request", 30],
        [() => inbox.send({ command: "claim", agent: "worker" }), "invalid_request", 30],
        [() => inbox.send({ from_agent: "lead", to_agent: "worker", subject: "s", max_attempts: 10n }), "invalid_request", 30],
        [() => inbox.done({ agent: "worker", thread_id: thread.thread_id, lease_token: 99, summary: "s" }), "invalid_value", 30],
      ];
      for (const [call, code, exitCode] of cases) {
        const error = thrown(call);
        assert.equal(error.code, code, `${call}: ${error.message}`);
        assert.equal(error.exitCode, exitCode, `${call}`);
      }
      assert.equal(JSON.stringify(inbox.show({ thread_id: thread.thread_id })), before);
      assert.equal(inbox.list({}).threads.length, 1);
      inbox.close();
    });

    test("'nothing to do' is not an error: empty fetch, claim next on an empty queue", async () => {
      const inbox = await Inbox.open({ store });
      assert.deepEqual(inbox.fetch({ agent: "worker" }).threads, []);
      const claim = inbox.claim({ agent: "worker", next: true });
      assert.equal(claim.ok, true);
      assert.equal(claim.lease, null);
    });

    test("execute speaks the wire format and returns failures instead of throwing", async () => {
      const inbox = await Inbox.open({ store });
      const sent = inbox.execute({ command: "send", from_agent: "lead", to_agent: "worker", subject: "Task" });
      assert.equal(sent.ok, true);
      const text = inbox.execute('{"command":"show","thread_id":"' + sent.thread.thread_id + '"}');
      assert.equal(text.thread.subject, "Task");
      assert.deepEqual(inbox.execute({ command: "fly" }).error.code, "invalid_request");
      assert.deepEqual(inbox.execute("{not json").error.code, "invalid_request");
      const missing = inbox.execute({ command: "claim", agent: "worker", thread_id: "thr_x" });
      assert.deepEqual(missing, {
        ok: false,
        command: "claim",
        error: {
          code: "thread_not_found",
          message: "thread thr_x not found; check the id (thread ids start with thr_) and the database",
        },
      });
    });

    test("a closed inbox throws, and its pending waits reject", async () => {
      const inbox = await Inbox.open({ store });
      const waiting = inbox.watch({ agent: "lead", timeout_seconds: 30 });
      inbox.close();
      const error = await rejected(waiting);
      assert.equal(error.code, "storage_error");
      assert.equal(error.exitCode, 50);
      assert.equal(thrown(() => inbox.list({})).code, "storage_error");
      assert.equal((await rejected(inbox.watch({ agent: "lead" }))).code, "storage_error");
    });

    test("every corpus script gives the native golden transcript, byte for byte (runScript and runScriptOn)", async () => {
      for (const script of corpusScripts()) {
        assertGolden(runScript(script.text, store), script, `runScript ${store}`);
        assertGolden(await runScriptOn(script.text, { store }), script, `runScriptOn ${store}`);
      }
    });
  });
}

describe("store file: the corpus through Node's own SQLite", () => {
  test("every corpus script, each in a new database file, gives the native golden transcript, byte for byte", async () => {
    const dir = scratchDir();
    const scripts = corpusScripts();
    for (const script of scripts) {
      const path = join(dir, `${script.name}.db`);
      assertGolden(await runScriptOn(script.text, { store: "file", path }), script, `runScriptOn file ${path}`);
      // The database stays, for the CLI to look at; its WAL is gone with
      // the connection.
      assert.ok(statSync(path).size > 0, `${path} is empty`);
    }
    assert.deepEqual(
      readdirSync(dir).sort(),
      scripts.map((s) => `${s.name}.db`).sort(),
      "one database per script, and no -wal or -shm left behind",
    );
    rmSync(dir, { recursive: true, force: true });
  });

  test("a path that holds a database (or a journal of one) is refused and left as it is; an empty file is taken", async () => {
    const dir = scratchDir();
    const script = "send from_agent=lead to_agent=worker subject=Task => ok";
    const real = join(dir, "real.db");
    const inbox = await Inbox.open({ store: "file", path: real });
    const { thread } = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Real work" });
    inbox.close();
    const before = readFileSync(real);
    const refused = await rejected(runScriptOn(script, { store: "file", path: real }));
    assert.equal(refused.code, "storage_error");
    assert.equal(refused.exitCode, 50);
    assert.match(refused.message, /real\.db already exists, and a script starts from an empty database; pass a new path/);
    assert.deepEqual(readFileSync(real), before, "the refused file was not touched");
    const again = await Inbox.open({ store: "file", path: real });
    assert.deepEqual(again.list({}).threads.map((t) => t.thread_id), [thread.thread_id]);
    again.close();

    // A WAL beside an empty file is a database too.
    const walOnly = join(dir, "wal-only.db");
    writeFileSync(walOnly, "");
    writeFileSync(`${walOnly}-wal`, "not empty");
    assert.match((await rejected(runScriptOn(script, { store: "file", path: walOnly }))).message, /wal-only\.db-wal already exists/);

    const empty = join(dir, "empty.db");
    writeFileSync(empty, "");
    const ran = await runScriptOn(script, { store: "file", path: empty });
    assert.deepEqual(ran.failures, []);
    assert.ok(statSync(empty).size > 0);
    // Now it holds the script's database, so a second run is refused.
    assert.equal((await rejected(runScriptOn(script, { store: "file", path: empty }))).code, "storage_error");
  });

  test("bad options are refused with invalid_request and say what to pass", async () => {
    const cases = [
      [{ store: "file" }, /store "file" needs `path`, a new database file/],
      [{ store: "opfs" }, /store "opfs" needs `path`/],
      [{ store: "sqlite", path: "x.db" }, /`path` names a database file and goes with store: "opfs" or "file"/],
      [{ store: "postgres" }, /`store` must be "memory", "sqlite", "opfs" or "file", not "postgres"/],
      [{ store: "file", path: "" }, /`path` must be a non-empty file name/],
      [{ store: "sqlite", now: "2026-01-01T00:00:00Z" }, /unknown option `now`; runScriptOn takes store, path/],
      [{ store: "sqlite", bytes: new Uint8Array(4) }, /unknown option `bytes`/],
      ["sqlite", /runScriptOn takes an options object/],
    ];
    for (const [options, message] of cases) {
      const error = await rejected(runScriptOn("list", options));
      assert.equal(error.code, "invalid_request", JSON.stringify(options));
      assert.match(error.message, message);
    }
    const sync = thrown(() => runScript("list", "file"));
    assert.equal(sync.code, "invalid_request");
    assert.match(sync.message, /runScript runs on store "memory" or "sqlite", not "file"; runScriptOn/);
    const parse = await rejected(runScriptOn("list =>", { store: "sqlite" }));
    assert.equal(parse.code, "invalid_request");
    assert.match(parse.message, /^line 1: /);
    const opfs = await rejected(runScriptOn("list", { store: "opfs", path: "script.db" }));
    assert.equal(opfs.code, "storage_error");
    assert.match(opfs.message, /dedicated Web Worker/);
    assert.ok(!existsSync("script.db"));
  });
});

describe("idempotency keys and the registry", () => {
  test("a send retried with its idempotency_key is answered once, replayed; a conflicting key throws", async () => {
    const inbox = await Inbox.open({ store: "sqlite" });
    const first = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Once", idempotency_key: "k1" });
    assert.equal(first.replayed, undefined);
    const again = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Once", idempotency_key: "k1" });
    assert.equal(again.replayed, true);
    assert.equal(again.thread.thread_id, first.thread.thread_id);
    assert.equal(inbox.list({}).threads.length, 1);
    const error = thrown(() => inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Other", idempotency_key: "k1" }));
    assert.equal(error.code, "idempotency_conflict");
    assert.equal(error.exitCode, 30);
    const wire = inbox.execute({ command: "list", idempotency_key: "k2" });
    assert.equal(wire.ok, false);
    assert.equal(wire.error.code, "invalid_value");
    const waited = await rejected(inbox.watch({ agent: "lead", timeout_seconds: 0, idempotency_key: "k3" }));
    assert.equal(waited.code, "invalid_value");
  });

  test("a role's pool, a broadcast and the mailbox through the package's methods", async () => {
    const inbox = await Inbox.open({ store: "memory" });
    inbox.agentRegister({ agent: "w1", roles: ["crew"] });
    inbox.agentRegister({ agent: "w2", roles: ["crew"] });
    const pooled = inbox.send({ from_agent: "lead", to_agent: "role:crew", subject: "Pooled" });
    assert.equal(pooled.route.members, 2);
    inbox.send({ from_agent: "lead", to_agent: "broadcast", subject: "Notice" });
    const claimed = inbox.claim({ agent: "w2", next: true });
    assert.equal(claimed.thread.thread_id, pooled.thread.thread_id);
    const mail = inbox.read({ agent: "w1" });
    assert.deepEqual(mail.messages.map((m) => m.to_agent), ["role:crew", "broadcast"]);
    inbox.markRead({ agent: "w1", through_event: mail.next_event_id });
    assert.equal(inbox.read({ agent: "w1" }).messages.length, 0);
    const agents = inbox.agentList({});
    assert.deepEqual(agents.agents.map((a) => [a.name, a.holds.length]), [["w1", 0], ["w2", 1]]);
    assert.equal(agents.roles[0].members, 2);
  });
});

describe("agent tokens and retention", () => {
  test("with tokens required, a registered agent acts only with the token it was given once", async () => {
    const inbox = await Inbox.open({ store: "sqlite" });
    assert.equal(inbox.settings({ agent_tokens: "required" }).settings.agent_tokens, "required");
    // The first agent joins on its own; every later one is vouched for by
    // a registered agent's token.
    const lead = inbox.agentRegister({ agent: "lead" }).agent_token;
    assert.match(lead, /^tok_[0-9a-f]{64}$/);
    assert.equal(thrown(() => inbox.agentRegister({ agent: "w1" })).code, "agent_token_required");
    const token = inbox.agentRegister({ agent: "w1", agent_token: lead }).agent_token;
    assert.notEqual(inbox.agentRegister({ agent: "w2", agent_token: lead }).agent_token, token);
    // A name nobody registered may not act.
    const anonymous = thrown(() => inbox.send({ from_agent: "mallory", to_agent: "w1", subject: "Tokened" }));
    assert.equal(anonymous.code, "agent_not_registered");
    assert.equal(anonymous.exitCode, 30);
    const sent = inbox.send({ from_agent: "lead", to_agent: "w1", subject: "Tokened", agent_token: lead });
    const id = sent.thread.thread_id;
    assert.equal(thrown(() => inbox.claim({ agent: "w1", thread_id: id })).code, "agent_token_required");
    assert.equal(thrown(() => inbox.claim({ agent: "w1", thread_id: id, agent_token: "tok_x" })).code, "agent_token_invalid");
    assert.equal(inbox.claim({ agent: "w1", thread_id: id, agent_token: token }).lease.agent, "w1");
    const waited = await rejected(inbox.waitReply({ agent: "w1", thread_id: id, timeout_seconds: 0 }));
    assert.equal(waited.code, "agent_token_required");
    const quiet = await inbox.waitReply({ agent: "w1", thread_id: id, timeout_seconds: 0, agent_token: token });
    assert.equal(quiet.woke, false);
  });

  test("with registration required, an address nobody registered is refused, naming the closest registered names", async () => {
    const inbox = await Inbox.open({ store: "memory" });
    inbox.agentRegister({ agent: "lead" });
    inbox.agentRegister({ agent: "bob", roles: ["crew"] });
    assert.equal(inbox.settings({ agent_registration: "required" }).settings.agent_registration, "required");
    const typo = thrown(() => inbox.send({ from_agent: "lead", to_agent: "bbo", subject: "Lost" }));
    assert.equal(typo.code, "unknown_recipient");
    assert.equal(typo.exitCode, 40);
    assert.match(typo.message, /closest registered agents: bob;/);
    assert.equal(thrown(() => inbox.send({ from_agent: "lead", to_agent: "role:crw", subject: "Lost" })).code, "unknown_recipient");
    assert.equal(thrown(() => inbox.send({ from_agent: "mallory", to_agent: "bob", subject: "Hi" })).code, "agent_not_registered");
    assert.equal(inbox.list({}).threads.length, 0);
    assert.equal(inbox.send({ from_agent: "lead", to_agent: "bob", subject: "Found" }).thread.assigned_to, "bob");
  });

  test("gc removes finished threads by the limits, and a dry run removes nothing", async () => {
    const inbox = await Inbox.open({ store: "memory" });
    const sent = inbox.send({ from_agent: "lead", to_agent: "w", subject: "Finish me" });
    inbox.claim({ agent: "w", thread_id: sent.thread.thread_id });
    inbox.done({ agent: "w", thread_id: sent.thread.thread_id, summary: "ok" });
    inbox.send({ from_agent: "lead", to_agent: "w", subject: "Open" });
    const dry = inbox.gc({ keep_messages: 0, dry_run: true });
    assert.deepEqual(dry.removed.map((r) => [r.thread_id, r.reason]), [[sent.thread.thread_id, "count"]]);
    assert.equal(inbox.list({}).threads.length, 2);
    const done = inbox.gc({ keep_messages: 0 });
    assert.equal(done.removed_messages, 2);
    assert.equal(done.messages_left, 1);
    assert.equal(inbox.list({}).threads.length, 1);
  });
});

describe("open options", () => {
  test("bad options are refused with invalid_request and say what to pass", async () => {
    const cases = [
      [{ store: "postgres" }, /`store` must be "memory", "sqlite", "opfs" or "file"/],
      [{ stor: "sqlite" }, /unknown option `stor`/],
      [{ store: "memory", path: "x.db" }, /`path` names a database file and goes with store: "opfs" or "file"/],
      [{ store: "sqlite", bytes: "abc" }, /`bytes` must be a Uint8Array/],
      [{ store: "memory", bytes: new Uint8Array(4) }, /goes with store: "sqlite"/],
      [{ now: "yesterday" }, /`now` is not a timestamp/],
      ["sqlite", /takes an options object/],
    ];
    for (const [options, message] of cases) {
      const error = await rejected(Inbox.open(options));
      assert.equal(error.code, "invalid_request", JSON.stringify(options));
      assert.equal(error.exitCode, 30);
      assert.match(error.message, message);
    }
  });

  test("opfs outside a browser's dedicated worker fails with storage_error and says where it runs", async () => {
    const error = await rejected(Inbox.open({ store: "opfs" }));
    assert.equal(error.code, "storage_error");
    assert.match(error.message, /dedicated Web Worker/);
  });

  test("now starts the clock at the given instant", async () => {
    const inbox = await Inbox.open({ now: NOW });
    const sent = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Task" });
    assert.ok(sent.thread.created_at.startsWith("2026-01-01T00:00:0"), sent.thread.created_at);
  });
});

describe("database bytes", () => {
  test("exportBytes round-trips through Inbox.open({bytes})", async () => {
    const inbox = await Inbox.open({ store: "sqlite" });
    const { thread } = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Persist me" });
    const bytes = inbox.exportBytes();
    assert.ok(bytes instanceof Uint8Array);
    const again = await Inbox.open({ store: "sqlite", bytes });
    assert.equal(again.show({ thread_id: thread.thread_id }).thread.subject, "Persist me");
    // The copy is independent of the original.
    again.send({ from_agent: "lead", to_agent: "worker", subject: "Only in the copy" });
    assert.equal(inbox.list({}).threads.length, 1);
    assert.equal(again.list({}).threads.length, 2);
    assert.equal((await Inbox.open({ store: "sqlite", bytes: bytes.buffer.slice(0) })).list({}).threads.length, 1);
  });

  test("the memory store has no bytes to export", async () => {
    const inbox = await Inbox.open({ store: "memory" });
    const error = thrown(() => inbox.exportBytes());
    assert.equal(error.code, "invalid_request");
    assert.match(error.message, /needs an SQLite store/);
  });

  test("bytes that are not an inbox database are refused, and nothing is opened", async () => {
    const notSqlite = await rejected(Inbox.open({ store: "sqlite", bytes: new TextEncoder().encode("hello") }));
    assert.equal(notSqlite.code, "storage_error");
    assert.match(notSqlite.message, /not an SQLite database/);

    const good = (await Inbox.open({ store: "sqlite" })).exportBytes();
    const truncated = await rejected(Inbox.open({ store: "sqlite", bytes: good.slice(0, 3000) }));
    assert.equal(truncated.exitCode, 50, truncated.message);

    const inbox = await Inbox.open({ store: "sqlite" });
    inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Task" });
    const newer = inbox.exportBytes();
    const foreign = await Inbox.open({ store: "sqlite", bytes: newer });
    assert.equal(foreign.list({}).threads.length, 1);
  });

  const cli = process.env.INBOX_BIN;
  test("the native CLI opens an exported database, and wasm opens one the CLI wrote", { skip: !cli && "INBOX_BIN is not set (scripts/test-wasm sets it)" }, async () => {
    const dir = scratchDir();
    const inbox = await Inbox.open({ store: "sqlite" });
    const { thread } = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "From wasm" });
    const exported = join(dir, "exported.db");
    const bytes = inbox.exportBytes();
    // A self-contained copy: rollback-journal header, as `inbox export` writes.
    assert.deepEqual([bytes[18], bytes[19]], [1, 1]);
    writeFileSync(exported, bytes, { mode: 0o600 });
    const listed = JSON.parse(execFileSync(cli, ["--db", exported, "--json", "list"], { encoding: "utf8" }));
    assert.equal(listed.threads[0].thread_id, thread.thread_id);
    // The CLI switched it to WAL, like any inbox database, and writes to it.
    assert.deepEqual([...readFileSync(exported).subarray(18, 20)], [2, 2]);
    execFileSync(cli, ["--db", exported, "--json", "claim", "--agent", "worker", "--thread", thread.thread_id]);

    // A file the CLI is using is opened as a file, not as bytes.
    const native = join(dir, "native.db");
    execFileSync(cli, ["--db", native, "init"]);
    const sent = JSON.parse(
      execFileSync(cli, ["--db", native, "--json", "send", "--from", "lead", "--to", "worker", "--subject", "From the CLI"], { encoding: "utf8" }),
    );
    const shared = await Inbox.open({ store: "file", path: native });
    assert.equal(shared.store, "file");
    assert.equal(shared.show({ thread_id: sent.thread.thread_id }).thread.subject, "From the CLI");
    shared.close();
    const after = await Inbox.open({ store: "file", path: exported });
    assert.equal(after.show({ thread_id: thread.thread_id }).thread.status, "claimed");
    after.close();
  });

  test("responses have the CLI's fields, exactly", { skip: !cli && "INBOX_BIN is not set" }, async () => {
    const dir = scratchDir();
    const db = join(dir, "shape.db");
    execFileSync(cli, ["--db", db, "init"]);
    const run = (...args) => JSON.parse(execFileSync(cli, ["--db", db, "--json", ...args], { encoding: "utf8" }));
    const nativeSend = run("send", "--from", "lead", "--to", "worker", "--subject", "Task");
    const nativeClaim = run("claim", "--agent", "worker", "--thread", nativeSend.thread.thread_id);
    const nativeShow = run("show", "--thread", nativeSend.thread.thread_id);

    const inbox = await Inbox.open({ store: "sqlite" });
    const send = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Task" });
    const claim = inbox.claim({ agent: "worker", thread_id: send.thread.thread_id });
    const show = inbox.show({ thread_id: send.thread.thread_id });
    assert.deepEqual(shape(send), shape(nativeSend));
    assert.deepEqual(shape(claim), shape(nativeClaim));
    assert.deepEqual(shape(show), shape(nativeShow));
  });
});
