// The board's behaviour: what it loads from the API, when, and what a
// person's clicks send. It holds no polling loop: it loads once, then again
// only when the server's event stream (Server-Sent Events, /api/events)
// says something changed; it reconnects by itself with the last event id it
// saw, and the server sends what was missed. Every call, the event stream's
// too, carries the board's token in a header: the token comes from the
// URL's fragment (never sent in a request line; read once, then removed
// from the address bar and the history so it is not shown or copied by
// accident). The stream is read with fetch, not EventSource, which cannot
// send a header.
// Drawing is views.js's, which never puts agents' text in as HTML.

import * as views from "./views.js";

const FINISHED = ["done", "failed", "cancelled"];
const TOKEN_KEY = "inbox-board-token";

const state = {
  token: null,
  write: false,
  as: "human",
  view: "board",
  threads: [],
  questions: new Map(), // thread_id -> [last_event_id, question]
  agents: { agents: [], roles: [] },
  runs: [],
  filters: { search: "", agent: "", role: "", run: "", statuses: new Set(views.COLUMNS.map(([s]) => s)) },
  openThread: null,
  panel: null, // "thread" | "send" | null
  chosenRun: null,
};

const $ = (id) => document.getElementById(id);

/** The headers every call carries: the token. */
function authorized(headers = {}) {
  return { ...headers, Authorization: `Bearer ${state.token}` };
}

/** A response's JSON answer; a refusal throws with its code and message. */
async function answerOf(response, what) {
  const answer = await response.json().catch(() => ({}));
  if (!answer.ok) {
    const error = new Error(answer.error?.message ?? `${what} failed (HTTP ${response.status})`);
    error.code = answer.error?.code;
    error.status = response.status;
    throw error;
  }
  return answer;
}

/** One API call; a refusal throws with the engine's code and message. */
async function api(command, body = {}) {
  const headers = authorized({ "Content-Type": "application/json" });
  const response = await fetch(`/api/${command}`, { method: "POST", headers, body: JSON.stringify(body) });
  return answerOf(response, command);
}

function toast(text, error = false) {
  const box = $("toast");
  box.textContent = text;
  box.className = error ? "toast error" : "toast";
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => (box.hidden = true), error ? 6000 : 2500);
}

// ---- loading ------------------------------------------------------------

/** The threads: every open one, and the newest finished ones. */
async function loadThreads() {
  const [open, finished] = await Promise.all([
    api("list", { status: ["pending", "claimed", "in_progress", "blocked"], limit: 1000 }),
    api("list", { status: FINISHED, limit: 300 }),
  ]);
  state.threads = [...open.threads, ...finished.threads];
  await loadQuestions();
}

/** Each blocked thread's question: its newest `question` message. */
async function loadQuestions() {
  const blocked = state.threads.filter((t) => t.status === "blocked");
  await Promise.all(
    blocked.map(async (t) => {
      const known = state.questions.get(t.thread_id);
      if (known && known[0] === t.last_event_id) return;
      const show = await api("show", { thread_id: t.thread_id, limit: 1000 });
      const asked = show.messages.filter((m) => m.kind === "question").pop();
      state.questions.set(t.thread_id, [t.last_event_id, asked ? asked.summary : ""]);
    }),
  );
}

async function loadContext() {
  const [agents, runs] = await Promise.all([api("agent-list"), api("orch-run-list", { limit: 200 })]);
  state.agents = agents;
  state.runs = runs.runs;
}

/** A run whole: its status, ready queue, and every task reachable from them. */
async function loadRun(runId) {
  const [status, ready, threads] = await Promise.all([
    api("orch-status", { run_id: runId, limit: 1000 }),
    api("orch-ready", { run_id: runId, limit: 1000 }),
    api("list", { run_id: runId, limit: 1000 }),
  ]);
  // orch has no "every task" read: the graph is found from the lists and
  // the threads, then by following needs and needed_by.
  const tasks = new Map();
  let next = new Set([
    ...[...status.actionable, ...status.in_flight, ...status.waiting].flatMap((t) => [t.task_id, ...t.waiting_on]),
    ...threads.threads.map((t) => t.task_id).filter(Boolean),
  ]);
  while (next.size > 0) {
    const shown = await Promise.all([...next].map((id) => api("orch-task-show", { run_id: runId, task_id: id }).catch(() => null)));
    next = new Set();
    for (const show of shown.filter(Boolean)) {
      tasks.set(show.task.task_id, show.task);
      for (const id of [...show.task.needs, ...show.needed_by]) if (!tasks.has(id)) next.add(id);
    }
    for (const id of tasks.keys()) next.delete(id);
  }
  return { status, ready: ready.tasks, tasks: [...tasks.values()].sort((a, b) => a.seq - b.seq) };
}

// ---- drawing ------------------------------------------------------------

function visibleThreads() {
  const f = state.filters;
  const q = f.search.trim().toLowerCase();
  const members = f.role ? new Set(state.agents.agents.filter((a) => a.roles.includes(f.role)).map((a) => a.name)) : null;
  return state.threads.filter((t) => {
    if (!f.statuses.has(views.columnOf(t.status))) return false;
    if (f.run && t.run_id !== f.run) return false;
    const holder = t.lease?.agent;
    if (f.agent && t.assigned_to !== f.agent && t.created_by !== f.agent && holder !== f.agent) return false;
    if (members && t.assigned_to !== `role:${f.role}` && !members.has(t.assigned_to) && !members.has(holder)) return false;
    if (!q) return true;
    return [t.subject, t.thread_id, t.assigned_to, t.created_by, holder, t.run_id, t.task_id]
      .some((v) => v && String(v).toLowerCase().includes(q));
  });
}

/** Redraws `container` with `content`, keeping what a person was typing. */
function replace(container, content) {
  const typed = new Map();
  let focused = null;
  for (const input of container.querySelectorAll(".answer input")) {
    const key = input.closest("[data-thread]")?.dataset.thread;
    if (key && input.value) typed.set(key, input.value);
    if (key && document.activeElement === input) focused = key;
  }
  container.replaceChildren(content);
  for (const input of container.querySelectorAll(".answer input")) {
    const key = input.closest("[data-thread]")?.dataset.thread;
    if (typed.has(key)) input.value = typed.get(key);
    if (key === focused) input.focus();
  }
}

function drawBoard() {
  const questions = new Map([...state.questions].map(([id, [, q]]) => [id, q]));
  replace($("view"), views.columns(visibleThreads(), { questions, canWrite: state.write, onOpen: openThread, onAnswer: answer }));
}

function drawFilters() {
  const options = (select, values, label = (v) => v) => {
    const chosen = select.value;
    select.replaceChildren(views.el("option", { value: "" }, "any"), ...values.map((v) => views.el("option", { value: v }, label(v))));
    select.value = values.includes(chosen) ? chosen : "";
  };
  const names = new Set(state.agents.agents.map((a) => a.name));
  for (const t of state.threads) {
    if (!t.assigned_to.includes(":") && t.assigned_to !== "broadcast") names.add(t.assigned_to);
    names.add(t.created_by);
  }
  options($("f-agent"), [...names].sort());
  options($("f-role"), state.agents.roles.map((r) => r.role));
  const goals = new Map(state.runs.map((r) => [r.run_id, r.goal]));
  options($("f-run"), state.runs.map((r) => r.run_id), (id) => `${id}: ${goals.get(id)}`);
}

async function drawRuns() {
  if (!state.chosenRun && state.runs.length > 0) state.chosenRun = state.runs[0].run_id;
  const detail = state.chosenRun ? await loadRun(state.chosenRun) : null;
  replace($("view"), views.runsView(state.runs, state.chosenRun, detail, {
    onChoose: (id) => { state.chosenRun = id; refresh(); },
    onOpenThread: openThread,
  }));
}

async function drawPanel() {
  const panel = $("panel");
  if (state.panel === "thread" && state.openThread) {
    const show = await api("show", { thread_id: state.openThread, limit: 1000 });
    replace(panel, views.threadView(show, { canWrite: state.write, onClose: closePanel, onAnswer: answer, onCancel: cancel }));
    panel.hidden = false;
  } else if (state.panel === "send") {
    if (!panel.querySelector("form")) {
      const agents = [...state.agents.agents.map((a) => a.name), ...state.agents.roles.map((r) => `role:${r.role}`)];
      panel.replaceChildren(views.sendForm({ onSend: send, onClose: closePanel, agents }));
    }
    panel.hidden = false;
  } else {
    panel.hidden = true;
    panel.replaceChildren();
  }
}

// ---- refreshing: once per change, never on a timer ------------------------

let running = null;
let again = false;

/** Reloads what the page shows; calls during a reload coalesce into one more. */
function refresh() {
  if (running) {
    again = true;
    return running;
  }
  running = reload()
    .catch((error) => (error.status === 401 ? refused(error) : toast(error.message, true)))
    .finally(() => {
      running = null;
      if (again) {
        again = false;
        refresh();
      }
    });
  return running;
}

async function reload() {
  await loadContext();
  if (state.view === "board") {
    await loadThreads();
    drawFilters();
    drawBoard();
  } else if (state.view === "runs") {
    await drawRuns();
  } else {
    replace($("view"), views.agentsView(state.agents));
  }
  await drawPanel();
  document.body.dataset.loaded = String(Date.now());
}

/** Follows the event stream: each event (a change, `hello`, `resync`) reloads. */
function follow() {
  const live = $("live");
  const shown = (on, text, title) => { live.className = on ? "live on" : "live off"; live.textContent = text; live.title = title; };
  const stream = { last: null };
  const loop = async () => {
    for (;;) {
      let pause = 1000;
      try {
        await listen(stream, () => shown(true, "live", "updates as they happen"));
      } catch (error) {
        if (error.status === 401) return refused(error);
        // The board keeps a few live pages; it says when to try again.
        if (error.status === 503) pause = 5000;
      }
      shown(false, "reconnecting", "the server cannot be reached; retrying");
      await new Promise((resolve) => setTimeout(resolve, pause));
    }
  };
  loop();
}

/** One connection of the event stream, read until it ends. */
async function listen(stream, opened) {
  const headers = authorized({ Accept: "text/event-stream" });
  if (stream.last !== null) headers["Last-Event-ID"] = stream.last;
  const response = await fetch("/api/events", { headers, cache: "no-store" });
  if (!response.ok) await answerOf(response, "the event stream");
  opened();
  const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let event = { data: false, id: null };
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, end).replace(/\r$/, "");
      buffer = buffer.slice(end + 1);
      if (line === "") {
        // An event ends: remember where the stream is, and reload.
        if (event.id !== null) stream.last = event.id;
        if (event.data) refresh();
        event = { data: false, id: null };
      } else if (line.startsWith("data:")) {
        event.data = true;
      } else if (line.startsWith("id:")) {
        event.id = line.slice(3).trim();
      }
    }
  }
}

/** The token was refused: say how to open the board, and stop. */
function refused(error) {
  sessionStorage.removeItem(TOKEN_KEY);
  state.token = null;
  state.write = false;
  $("new-task").hidden = true;
  $("mode").textContent = "needs the URL with the token";
  $("live").className = "live off";
  $("live").textContent = "no token";
  $("view").replaceChildren(views.el("p", { className: "empty" }, error.message));
}

// ---- acting -------------------------------------------------------------

function openThread(id) {
  state.openThread = id;
  state.panel = "thread";
  drawPanel().catch((error) => toast(error.message, true));
}

function closePanel() {
  state.panel = null;
  state.openThread = null;
  drawPanel();
}

async function answer(threadId, text, input) {
  try {
    await api("reply", { thread_id: threadId, kind: "answer", summary: text });
    if (input) input.value = "";
    toast("Answered");
  } catch (error) {
    toast(error.message, true);
  }
}

async function cancel(threadId) {
  const button = document.activeElement;
  if (button && button.dataset.confirm !== "yes") {
    button.dataset.confirm = "yes";
    button.textContent = "Click again to cancel";
    return;
  }
  try {
    await api("cancel", { thread_id: threadId, reason: `cancelled from the board by ${state.as}` });
    toast("Cancelled");
  } catch (error) {
    toast(error.message, true);
  }
}

async function send(fields) {
  try {
    const sent = await api("send", fields);
    toast("Sent");
    openThread(sent.thread.thread_id);
  } catch (error) {
    toast(error.message, true);
  }
}

// ---- start --------------------------------------------------------------

/** The token: from the URL's fragment (`#token=`), else the one this tab
 * was opened with. */
function readToken() {
  const token = /(?:^#|&)token=([0-9a-f]+)/.exec(location.hash);
  if (token) {
    history.replaceState(null, "", location.pathname + location.search);
    sessionStorage.setItem(TOKEN_KEY, token[1]);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function wire() {
  for (const button of document.querySelectorAll("#tabs button")) {
    button.addEventListener("click", () => {
      state.view = button.dataset.view;
      for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b === button);
      $("filters").hidden = state.view !== "board";
      refresh();
    });
  }
  $("search").addEventListener("input", (e) => { state.filters.search = e.target.value; drawBoard(); });
  for (const [id, key] of [["f-agent", "agent"], ["f-role", "role"], ["f-run", "run"]]) {
    $(id).addEventListener("change", (e) => { state.filters[key] = e.target.value; drawBoard(); });
  }
  const chips = $("f-status");
  for (const [status, title] of views.COLUMNS) {
    const chip = views.el("button", { type: "button", className: "chip on", data: { status } }, title);
    chip.addEventListener("click", () => {
      const on = !state.filters.statuses.has(status);
      if (on) state.filters.statuses.add(status); else state.filters.statuses.delete(status);
      chip.classList.toggle("on", on);
      drawBoard();
    });
    chips.append(chip);
  }
  $("new-task").addEventListener("click", () => { state.panel = "send"; state.openThread = null; drawPanel(); });
  document.addEventListener("keydown", (e) => e.key === "Escape" && state.panel && closePanel());
  // Relative times ("3m ago", "lease ends in 2m") move with the clock;
  // this only rewrites text already on the page and fetches nothing.
  setInterval(() => {
    for (const time of document.querySelectorAll("time[datetime]")) {
      time.textContent = (time.dataset.prefix ?? "") + views.relative(time.getAttribute("datetime"));
    }
  }, 5000);
}

async function start() {
  wire();
  state.token = readToken();
  if (!state.token) {
    const error = new Error("This board needs its token: open it with the URL inbox serve printed (it holds the token after #).");
    return refused(error);
  }
  const about = await answerOf(await fetch("/api/board", { headers: authorized() }), "the board");
  state.write = Boolean(about.write);
  state.as = about.as;
  $("mode").textContent = about.write ? `writing as ${about.as}` : "read-only";
  $("new-task").hidden = !state.write;
  refresh();
  follow();
}

start().catch((error) => (error.status === 401 ? refused(error) : toast(error.message, true)));
