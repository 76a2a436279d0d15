// What the board draws, from the API's JSON: the columns and cards, a
// thread's history, a run's task graph, the agents. Every element is made
// with document.createElement and every piece of agents' text goes in as a
// text node (el() below never takes HTML), so a subject like
// `<img src=x onerror=...>` shows as those characters; bodies go through
// markdown.js, which is built the same way. Nothing here fetches: board.js
// gives these functions data and handlers.

import { renderMarkdown } from "./markdown.js";

/** The thread statuses, one column each, in the order work moves. */
export const COLUMNS = [
  ["pending", "Pending"],
  ["in_progress", "In progress"],
  ["blocked", "Blocked"],
  ["done", "Done"],
  ["failed", "Failed"],
  ["cancelled", "Cancelled"],
];

/** Which column a status goes in: claimed shares in progress's. */
export function columnOf(status) {
  return status === "claimed" ? "in_progress" : status;
}

/**
 * An element: `tag` with `props` (className, title, dataset entries as
 * `data: {...}`, event handlers as `on: {click}`, other attributes as
 * strings) and children (strings become text nodes; null is skipped).
 */
export function el(tag, props = {}, ...children) {
  const svg = tag.startsWith("svg:");
  const element = svg
    ? document.createElementNS("http://www.w3.org/2000/svg", tag.slice(4))
    : document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "on") {
      for (const [event, handler] of Object.entries(value)) element.addEventListener(event, handler);
    } else if (key === "data") {
      for (const [name, v] of Object.entries(value)) element.dataset[name] = String(v);
    } else if (key === "className" && !svg) {
      element.className = value;
    } else if (key.startsWith("on")) {
      throw new Error("handlers go in `on`");
    } else {
      element.setAttribute(key === "className" ? "class" : key, value === true ? "" : String(value));
    }
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    element.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return element;
}

/** "3m ago", "in 4m": a time relative to now, updated by board.js's clock. */
export function relative(iso, now = Date.now()) {
  const ms = Date.parse(iso) - now;
  const abs = Math.abs(ms);
  const units = [["d", 86400000], ["h", 3600000], ["m", 60000], ["s", 1000]];
  const [unit, size] = units.find(([, size]) => abs >= size) ?? ["s", 1000];
  const n = Math.floor(abs / size);
  return ms < 0 ? `${n}${unit} ago` : `in ${n}${unit}`;
}

/** A time that board.js's clock keeps current. */
export function when(iso, prefix = "") {
  return el("time", { datetime: iso, data: { prefix }, title: iso }, prefix + relative(iso));
}

function badge(text, className = "") {
  return el("span", { className: `badge ${className}` }, text);
}

export function statusBadge(status) {
  return badge(status.replace("_", " "), `status st-${status}`);
}

/** One card. `question` is the blocked thread's question, if known. */
export function card(thread, { question, canWrite, onOpen, onAnswer }) {
  const lease = thread.lease;
  const meta = el(
    "div",
    { className: "meta" },
    el("span", { title: "assigned to" }, "→ ", thread.assigned_to),
    lease ? el("span", { title: "lease holder" }, "⚑ ", lease.agent, " · ", when(lease.expires_at, "lease ends ")) : null,
    thread.priority !== "normal" ? badge(thread.priority, `prio-${thread.priority}`) : null,
    thread.run_id ? el("span", { title: "run" }, thread.run_id) : null,
    thread.task_id ? el("span", { title: "task" }, "task ", thread.task_id) : null,
    when(thread.created_at),
  );
  const blocked = thread.status === "blocked";
  const element = el(
    "article",
    {
      className: `card st-${thread.status}${blocked ? " blocked" : ""}`,
      data: { thread: thread.thread_id, status: thread.status },
      tabindex: "0",
      on: { click: () => onOpen(thread.thread_id), keydown: (e) => e.key === "Enter" && onOpen(thread.thread_id) },
    },
    el("div", { className: "subject" }, thread.subject),
    meta,
  );
  if (blocked && question) {
    element.append(el("div", { className: "question", title: "the question" }, "? ", question));
  }
  if (blocked && canWrite) element.append(answerBox(thread.thread_id, onAnswer));
  return element;
}

/** An input and button that answer a blocked thread. */
export function answerBox(threadId, onAnswer) {
  const input = el("input", { type: "text", placeholder: "Answer…", "aria-label": "answer" });
  const send = () => {
    const text = input.value.trim();
    if (text) onAnswer(threadId, text, input);
  };
  const box = el(
    "div",
    { className: "answer", on: { click: (e) => e.stopPropagation(), keydown: (e) => e.stopPropagation() } },
    input,
    el("button", { type: "button", className: "primary", on: { click: send } }, "Answer"),
  );
  input.addEventListener("keydown", (e) => e.key === "Enter" && send());
  return box;
}

/** The columns, each with its cards. */
export function columns(threads, options) {
  const grid = el("div", { className: "columns" });
  for (const [status, title] of COLUMNS) {
    const mine = threads.filter((t) => columnOf(t.status) === status);
    const column = el(
      "section",
      { className: "column", data: { column: status } },
      el("h2", {}, title, el("span", { className: "count" }, String(mine.length))),
    );
    for (const thread of mine) {
      column.append(card(thread, { ...options, question: options.questions.get(thread.thread_id) }));
    }
    if (mine.length === 0) column.append(el("div", { className: "empty" }, "nothing"));
    grid.append(column);
  }
  return grid;
}

/** A thread whole: facts, actions, every message. */
export function threadView(show, { canWrite, onClose, onAnswer, onCancel }) {
  const t = show.thread;
  const facts = el("dl", { className: "facts" });
  const fact = (name, ...value) => facts.append(el("dt", {}, name), el("dd", {}, ...value));
  fact("status", statusBadge(t.status));
  fact("thread", el("code", {}, t.thread_id));
  fact("from → to", t.created_by, " → ", t.assigned_to);
  fact("priority", t.priority);
  fact("attempts", `${t.attempts} of ${t.max_attempts}`);
  if (t.lease) fact("lease", t.lease.agent, ` (token ${t.lease.lease_token}) · `, when(t.lease.expires_at, "ends "));
  if (t.run_id) fact("run", t.run_id);
  if (t.task_id) fact("task", t.task_id);
  fact("opened", when(t.created_at), " · updated ", when(t.updated_at));
  const live = !["done", "failed", "cancelled"].includes(t.status);
  const actions = el("div", { className: "row" });
  if (canWrite && live) {
    actions.append(el("button", { type: "button", className: "danger", on: { click: () => onCancel(t.thread_id) } }, "Cancel thread"));
  }
  const panel = el(
    "div",
    { data: { thread: t.thread_id } },
    el("header", {}, el("h2", {}, t.subject), el("button", { type: "button", on: { click: onClose }, "aria-label": "close" }, "✕")),
    facts,
    actions,
  );
  if (t.status === "blocked" && canWrite) panel.append(answerBox(t.thread_id, onAnswer));
  for (const message of show.messages) panel.append(messageView(message));
  if (show.more) panel.append(el("p", { className: "muted" }, "Older messages only: the newest are past the first 1000."));
  return panel;
}

function messageView(m) {
  const element = el(
    "article",
    { className: "message", data: { message: m.message_id, kind: m.kind } },
    el("div", { className: "head" }, badge(m.kind, `kind-${m.kind}`), m.from_agent, " → ", m.to_agent, when(m.created_at)),
    el("div", { className: "summary" }, m.summary),
  );
  if (m.body) element.append(renderMarkdown(m.body));
  if (m.payload && Object.keys(m.payload).length > 0) {
    element.append(el("pre", { className: "payload" }, JSON.stringify(m.payload, null, 2)));
  }
  if (m.artifacts && m.artifacts.length > 0) {
    element.append(el("ul", { className: "artifacts" }, m.artifacts.map(artifactView)));
  }
  return element;
}

function artifactView(a) {
  return el(
    "li",
    {},
    badge(a.kind),
    " ",
    el("code", {}, a.path),
    a.size_bytes !== null && a.size_bytes !== undefined ? ` · ${size(a.size_bytes)}` : null,
    a.sha256 ? el("span", { title: `sha256 ${a.sha256}` }, ` · sha256 ${a.sha256.slice(0, 12)}…`) : null,
  );
}

function size(bytes) {
  if (bytes < 1024) return `${bytes} B`;
  if (bytes < 1048576) return `${(bytes / 1024).toFixed(1)} KiB`;
  return `${(bytes / 1048576).toFixed(1)} MiB`;
}

/** The new-task form. */
export function sendForm({ onSend, onClose, agents }) {
  const to = el("input", { name: "to", required: true, placeholder: "agent, role:NAME or broadcast", list: "agent-names" });
  const names = el("datalist", { id: "agent-names" }, agents.map((a) => el("option", { value: a })));
  const subject = el("input", { name: "subject", required: true, placeholder: "one line that says what the work is" });
  const body = el("textarea", { name: "body", placeholder: "the task, in Markdown (optional)" });
  const priority = el("select", { name: "priority" }, ["normal", "low", "high", "urgent"].map((p) => el("option", { value: p }, p)));
  const form = el(
    "form",
    { className: "stack", on: { submit: (e) => { e.preventDefault(); onSend({ to_agent: to.value.trim(), subject: subject.value.trim(), body: body.value, priority: priority.value }); } } },
    el("label", {}, "To", to, names),
    el("label", {}, "Subject", subject),
    el("label", {}, "Body", body),
    el("label", {}, "Priority", priority),
    el("div", { className: "row" }, el("button", { type: "submit", className: "primary" }, "Send")),
  );
  return el("div", {}, el("header", {}, el("h2", {}, "New task"), el("button", { type: "button", on: { click: onClose }, "aria-label": "close" }, "✕")), form);
}

/** The agents and roles (`agent-list`). */
export function agentsView(list) {
  const agents = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ["agent", "roles", "presence", "last active", "holds"].map((h) => el("th", {}, h)))),
    el(
      "tbody",
      {},
      list.agents.map((a) =>
        el(
          "tr",
          { data: { agent: a.name } },
          el("td", {}, a.name, a.description ? el("div", { className: "muted" }, a.description) : null),
          el("td", {}, a.roles.join(", ")),
          el("td", { className: `presence-${a.presence}` }, a.presence),
          el("td", {}, when(a.last_active_at)),
          el("td", {}, a.holds.map((id) => el("div", {}, el("code", {}, id)))),
        ),
      ),
    ),
  );
  const roles = el(
    "table",
    {},
    el("thead", {}, el("tr", {}, ["role", "members", "present", "waiting threads"].map((h) => el("th", {}, h)))),
    el("tbody", {}, list.roles.map((r) => el("tr", {}, el("td", {}, `role:${r.role}`), el("td", {}, String(r.members)), el("td", {}, String(r.present)), el("td", {}, String(r.waiting))))),
  );
  const empty = list.agents.length === 0 ? el("p", { className: "muted" }, "No agent has registered (inbox agent register).") : null;
  return el("div", {}, el("h2", {}, "Agents"), empty, agents, el("h2", {}, "Roles"), roles);
}

/** The runs list and the chosen run: its graph, ready queue and what waits on the leader. */
export function runsView(runs, chosen, detail, { onChoose, onOpenThread }) {
  const list = el(
    "div",
    { className: "runlist" },
    runs.length === 0 ? el("p", { className: "muted" }, "No orch run yet (orch run create).") : null,
    runs.map((r) =>
      el(
        "button",
        { type: "button", className: r.run_id === chosen ? "active" : "", data: { run: r.run_id }, on: { click: () => onChoose(r.run_id) } },
        el("div", {}, el("strong", {}, r.goal)),
        el("div", { className: "muted" }, r.run_id, " · ", r.status, " · ", when(r.created_at)),
      ),
    ),
  );
  const right = el("div", {});
  if (detail) {
    const { status, ready, tasks } = detail;
    const counts = Object.entries(status.run.counts).filter(([, n]) => n > 0).map(([s, n]) => el("span", {}, statusBadge(s), ` ${n}`));
    right.append(
      el("h2", {}, status.run.goal),
      el("div", { className: "legend" }, status.run.run_id, " · ", status.run.status, " · ", counts),
      el("div", { className: "graph" }, graph(tasks, onOpenThread)),
      el(
        "div",
        { className: "lists" },
        el("div", {}, el("h3", {}, "Ready queue"), taskLines(ready, onOpenThread)),
        el("div", {}, el("h3", {}, "Waiting on the leader"), taskLines(status.actionable, onOpenThread)),
      ),
    );
  }
  return el("div", { className: "runs" }, list, right);
}

function taskLines(lines, onOpenThread) {
  if (lines.length === 0) return el("p", { className: "muted" }, "nothing");
  return el(
    "table",
    {},
    el(
      "tbody",
      {},
      lines.map((t) =>
        el(
          "tr",
          { data: { task: t.task_id }, on: { click: () => t.thread_id && onOpenThread(t.thread_id) } },
          el("td", {}, el("code", {}, t.task_id)),
          el("td", {}, t.title, t.reason ? el("div", { className: "muted" }, t.reason) : null),
          el("td", {}, t.assignee),
          el("td", {}, statusBadge(t.status)),
        ),
      ),
    ),
  );
}

/**
 * The task graph as SVG: tasks in layers by depth (a task sits right of
 * everything it needs), dependencies as arrows, statuses as colours.
 */
export function graph(tasks, onOpenThread) {
  const byId = new Map(tasks.map((t) => [t.task_id, t]));
  const depth = new Map();
  const depthOf = (id, seen = new Set()) => {
    if (depth.has(id)) return depth.get(id);
    if (seen.has(id)) return 0;
    seen.add(id);
    const needs = (byId.get(id)?.needs ?? []).filter((n) => byId.has(n));
    const d = needs.length === 0 ? 0 : 1 + Math.max(...needs.map((n) => depthOf(n, seen)));
    depth.set(id, d);
    return d;
  };
  tasks.forEach((t) => depthOf(t.task_id));
  const layers = [];
  for (const t of tasks) (layers[depth.get(t.task_id)] ??= []).push(t);
  const W = 180, H = 46, GX = 60, GY = 16;
  const pos = new Map();
  layers.forEach((layer, x) => layer.forEach((t, y) => pos.set(t.task_id, { x: 10 + x * (W + GX), y: 10 + y * (H + GY) })));
  const width = 20 + layers.length * (W + GX);
  const height = 20 + Math.max(1, ...layers.map((l) => l.length)) * (H + GY);
  const svg = el("svg:svg", { width, height, viewBox: `0 0 ${width} ${height}`, role: "img", "aria-label": "task graph" });
  svg.append(
    el("svg:defs", {}, el("svg:marker", { id: "arrow", viewBox: "0 0 10 10", refX: "10", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse" }, el("svg:path", { d: "M0,0 L10,5 L0,10 z", fill: "#8a94a3" }))),
  );
  for (const t of tasks) {
    for (const need of t.needs ?? []) {
      const a = pos.get(need), b = pos.get(t.task_id);
      if (!a || !b) continue;
      svg.append(el("svg:path", { d: `M${a.x + W},${a.y + H / 2} C${a.x + W + GX / 2},${a.y + H / 2} ${b.x - GX / 2},${b.y + H / 2} ${b.x},${b.y + H / 2}`, fill: "none", stroke: "#8a94a3", "marker-end": "url(#arrow)", className: "edge" }));
    }
  }
  for (const t of tasks) {
    const p = pos.get(t.task_id);
    const title = t.title.length > 24 ? `${t.title.slice(0, 23)}…` : t.title;
    const node = el(
      "svg:g",
      { className: `node st-${t.status}`, transform: `translate(${p.x},${p.y})`, data: { task: t.task_id, status: t.status }, on: { click: () => t.thread_id && onOpenThread(t.thread_id) } },
      el("svg:title", {}, `${t.task_id}: ${t.title} (${t.status})`),
      el("svg:rect", { width: W, height: H, rx: "6", opacity: "0.9" }),
      el("svg:text", { x: "8", y: "18", fill: "#fff", "font-weight": "600" }, t.task_id),
      el("svg:text", { x: "8", y: "36", fill: "#fff" }, title),
    );
    svg.append(node);
  }
  return svg;
}
