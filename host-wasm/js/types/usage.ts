// Compiled with `tsc --strict` against the installed package's declarations
// (generated from the Rust types): correct use type-checks, and each
// `@ts-expect-error` line is a mistake the declarations must catch (tsc
// fails if one of them compiles).

import { Inbox, runScript, runScriptOn } from "inbox-wasm";
import type { AgentRegistration, AgentTokens, ErrorCode, InboxError, ScriptOptions, Success, Thread, Status, Response, Transcript } from "inbox-wasm";

export async function workerLoop(): Promise<Thread> {
  const inbox: Inbox = await Inbox.open({ store: "sqlite" });
  const sent: Success<"send"> = inbox.send({ from_agent: "lead", to_agent: "worker", subject: "Add login", priority: "high" });
  const id: string = sent.thread.thread_id;
  const claim = inbox.claim({ agent: "worker", next: true });
  const token: number | undefined = claim.lease?.lease_token;
  inbox.update({ agent: "worker", thread_id: id, lease_token: token, status: "blocked", summary: "Which provider?" });
  const answer = await inbox.waitReply({ agent: "worker", thread_id: id, timeout_seconds: 60 });
  const woke: boolean = answer.woke;
  const kind: string | undefined = answer.message?.kind;
  const done = inbox.done({ agent: "worker", thread_id: id, lease_token: token, summary: `woke ${woke} ${kind}` });
  const status: Status = done.thread.status;
  const events = (await inbox.watch({ agent: "lead", after_event: 0, timeout_seconds: 1 })).events;
  const firstType: string | undefined = events[0]?.event_type;
  const bytes: Uint8Array = inbox.exportBytes();
  const wire: Response = inbox.execute({ command: "list", status: ["done", status] });
  if (!wire.ok) {
    const code: ErrorCode = wire.error.code;
    throw new Error(code + firstType + bytes.length);
  }
  const once: Success<"send"> = inbox.send({ from_agent: "lead", to_agent: "role:crew", subject: "Pooled", idempotency_key: "k1" });
  const replayed: true | undefined = once.replayed;
  inbox.agentRegister({ agent: "worker", roles: ["crew"], description: "Builds" });
  const present: string = inbox.agentList({}).agents[0]?.presence ?? "gone";
  const unread = inbox.read({ agent: "worker" }).messages.length;
  inbox.markRead({ agent: "worker", through_event: 10 });
  const tokens: AgentTokens = inbox.settings({ agent_tokens: "required" }).settings.agent_tokens;
  const registration: AgentRegistration = inbox.settings({ agent_registration: "required" }).settings.agent_registration;
  const secret: string | undefined = inbox.agentRegister({ agent: "w2" }).agent_token;
  inbox.claim({ agent: "w2", next: true, agent_token: secret });
  await inbox.waitReply({ agent: "w2", thread_id: id, timeout_seconds: 0, agent_token: secret });
  const removed: number = inbox.gc({ keep_days: 1, dry_run: true }).removed.length;
  void replayed; void present; void unread; void tokens; void registration; void removed;
  const transcript = runScript("send from_agent=a to_agent=b subject=s", "memory");
  const failures: string[] = transcript.failures;
  const onOpfs: Transcript = await runScriptOn("list", { store: "opfs", path: "script.db" });
  const options: ScriptOptions = { store: "file", path: "/tmp/script.db" };
  const onFile: string = (await runScriptOn("list", options)).text;
  const inMemory: string[] = (await runScriptOn("list", { store: "sqlite" })).failures;
  void failures; void onOpfs; void onFile; void inMemory;
  return inbox.show({ thread_id: id }).thread;
}

export function handle(error: unknown): number {
  const e = error as InboxError;
  const code: ErrorCode = e.code;
  const refused: ErrorCode[] = ["unknown_recipient", "agent_not_registered"];
  return code === "lease_conflict" || refused.includes(code) ? e.exitCode : 0;
}

export async function mistakes(inbox: Inbox): Promise<void> {
  // @ts-expect-error: the field is from_agent, not from
  inbox.send({ from: "lead", to_agent: "worker", subject: "s" });
  // @ts-expect-error: "urgent" is not a priority
  inbox.send({ from_agent: "lead", to_agent: "worker", subject: "s", priority: "urgent" });
  // @ts-expect-error: lease tokens are numbers
  inbox.done({ agent: "worker", thread_id: "thr_1", lease_token: "1" });
  // @ts-expect-error: a claim's lease can be null (claim next on an empty queue)
  const token: number = inbox.claim({ agent: "worker", next: true }).lease.lease_token;
  // @ts-expect-error: "finished" is not a status
  const status: Status = "finished";
  // @ts-expect-error: no such store
  await Inbox.open({ store: "indexeddb" });
  // @ts-expect-error: a script on OPFS needs the path of its new database
  await runScriptOn("list", { store: "opfs" });
  // @ts-expect-error: a script's memory store has no file
  await runScriptOn("list", { store: "memory", path: "x.db" });
  // @ts-expect-error: a script brings its own clock
  await runScriptOn("list", { store: "sqlite", now: "2026-01-01T00:00:00Z" });
  // @ts-expect-error: not an error code
  const code: ErrorCode = "oops";
  // @ts-expect-error: the key is a string
  inbox.send({ from_agent: "lead", to_agent: "worker", subject: "s", idempotency_key: 7 });
  // @ts-expect-error: reads take no idempotency key
  inbox.list({ idempotency_key: "k" });
  // @ts-expect-error: waits take no idempotency key either, only a token
  await inbox.watch({ agent: "lead", idempotency_key: "k" });
  // @ts-expect-error: "on" is not an agent_tokens setting
  inbox.settings({ agent_tokens: "on" });
  // @ts-expect-error: "on" is not an agent_registration setting
  inbox.settings({ agent_registration: "on" });
  void token; void status; void code;
}
