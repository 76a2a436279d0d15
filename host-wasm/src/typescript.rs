//! TypeScript declarations the derives in the engine cannot write: the
//! types the engine serializes by hand (timestamps, JSON objects, the
//! response envelope) and the shapes of this package's own arguments. The
//! request and output records and the vocabularies (error codes included)
//! are generated from the Rust types (`inbox-engine`'s `typescript`
//! feature, with `tsify`), and the command methods from the command table,
//! so none of them can drift from the wire format.

use wasm_bindgen::prelude::*;

#[wasm_bindgen(typescript_custom_section)]
const DECLARATIONS: &'static str = r#"
/** An instant in UTC, RFC 3339 with milliseconds: "2026-01-01T00:00:00.000Z". */
export type Timestamp = string;

/** Any JSON object: a `payload` or an artifact's `metadata`. */
export type JsonObject = Record<string, unknown>;

/** A successful response to `command`: what `inbox <command> --json` prints. `replayed` is
 * true when a write retried with its `idempotency_key` was answered with its first outcome. */
export type Success<C extends Output["command"]> = { ok: true; replayed?: true } & Extract<Output, { command: C }>;

/** Who the call is, given beside a write's or a wait's own fields. */
export interface Credentials {
  /**
   * The acting agent's token, when the database requires agent tokens (`settings` with
   * `agent_tokens: "required"`): the one `agentRegister` returned once as `agent_token`.
   * Without it a registered agent's write or wait is refused with `agent_token_required`,
   * and one acting as a name nobody registered with `agent_not_registered`.
   */
  agent_token?: string;
}

/** Fields about the call rather than the command, given beside a write's own fields. */
export interface Envelope extends Credentials {
  /**
   * Makes the write safe to retry: repeated with the same key and the same request, it
   * returns its first outcome (`replayed: true`) and changes nothing; the same key with
   * another request is refused with `idempotency_conflict`. Reads and waits take none.
   */
  idempotency_key?: string;
}

/** A refused command, as `execute` returns it (typed methods throw instead). */
export interface Failure {
  ok: false;
  command: string | null;
  error: { code: ErrorCode; message: string };
}

/** Any response of the wire format. */
export type Response = ({ ok: true; replayed?: true } & Output) | Failure;

/** What a typed method, a wait or `Inbox.open` throws. */
export interface InboxError extends Error {
  name: "InboxError";
  code: ErrorCode;
  /** The CLI's exit code for the same refusal (30 bad input, 20 lease, 40 not found, 50 storage, ...). */
  exitCode: number;
  command: string | null;
  response: Failure;
}

/** Options of `Inbox.open`. */
export interface OpenOptions {
  /**
   * "memory" (default), "sqlite" (SQLite in wasm memory), "opfs" (SQLite in
   * OPFS; dedicated workers only) or "file" (Node: a database file shared
   * safely with the `inbox` CLI and other processes; Linux).
   */
  store?: "memory" | "sqlite" | "opfs" | "file";
  /** The database file: in OPFS (store "opfs"; default "inbox.db"), or on disk (store "file"; required). */
  path?: string;
  /** A self-contained database to start from (store "sqlite"): the bytes of `exportBytes()` or `inbox export --sqlite FILE`. */
  bytes?: Uint8Array | ArrayBuffer;
  /** Start the clock at this instant instead of the wall clock (tests; not with store "file", whose leases other processes judge by the machine's clock). */
  now?: string;
}

/**
 * Options of `runScriptOn`: the store a script runs on, always a new, empty database. "opfs"
 * (dedicated workers only) and "file" (Node 22.16 or later) need `path`, a name that holds no
 * database yet: one that does is refused and left as it is.
 */
export type ScriptOptions =
  | { store?: "memory" | "sqlite"; path?: undefined }
  | {
      store: "opfs" | "file";
      /** The new database: a name in OPFS (removed after the run), or a path on disk (kept). */
      path: string;
    };

/** What `runScript` and `runScriptOn` return. */
export interface Transcript {
  /** Every step's response and the changes it made, as text. */
  text: string;
  /** Expectations that did not hold, one line each. */
  failures: string[];
}
"#;
