// Threadkeeper operator console: threads, streaming chat, context pressure, manual compression.
// Plain ES module, no framework and no build step. Every API call goes through the client that
// scripts/generate_console_client.py generates from the OpenAPI document. Markdown is rendered by
// marked and sanitized by DOMPurify, both vendored under /vendor/ (no CDN).

import { ApiError, createClient } from "./api-client.js";
import { marked } from "/vendor/marked/marked.esm.js";
import DOMPurify from "/vendor/dompurify/purify.es.js";

const KEY_STORAGE = "threadkeeper.apiKey";
const THREAD_STORAGE = "threadkeeper.threadId";
const RUN_POLL_MS = 300;
const PREVIEW_CHARS = 600;
const STREAM_RETRIES = 3;
const BUSY_POLL_MS = 1500;
const KB_TOOL = "query_kb";
const ACTIVE = ["running", "interrupted"];
const FINAL = ["completed", "failed", "cancelled"];

const state = {
  apiKey: localStorage.getItem(KEY_STORAGE) || "",
  threads: [],
  /** agent id -> AgentOut (ListAgents) */
  agents: new Map(),
  defaultAgentId: null,
  nextCursor: null,
  threadId: null,
  /** @type {AbortController | null} cancels everything tied to the selected thread */
  threadScope: null,
  /** tool_call_id -> offload record of the model-visible (compressed) copy */
  offloads: new Map(),
  /** message ids already in the transcript (history and stream overlap) */
  shown: new Set(),
  runActive: false,
  /** the run the page follows (cancel button target) */
  activeRunId: null,
  /** {runId, signal} of the run whose event stream is being read */
  following: null,
  /** runs of the selected thread whose event stream was read to their final status */
  runsRead: new Set(),
  /** settles once the selected thread's history and runs are read (selectThread) */
  threadLoaded: Promise.resolve(),
  pendingInterrupt: null,
  compressPending: false,
  /** GetAgentState's manual_compression of the selected thread (null until read) */
  manual: null,
  /** the thread scope whose thread_busy notice is being watched */
  watchingBusy: null,
  /** knowledge-base result id -> {doc_id, title, source, url, content} from query_kb results */
  kbResults: new Map(),
  /** answers being streamed: model message id -> {item, text} (in arrival order) */
  streams: new Map(),
  /** request ids the operator withdrew (stop waiting for their run) */
  withdrawn: new Set(),
};

const api = createClient({ apiKey: () => state.apiKey });
const $ = (id) => document.getElementById(id);

// --- DOM helpers (text only: API content never becomes HTML) ----------------------------------

/**
 * @param {string} tag
 * @param {Record<string, any>} [attrs]
 * @param {...(Node | string | null | undefined | false)} children
 */
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else if (name === "dataset") Object.assign(node.dataset, value);
    else if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child);
  }
  return node;
}

function truncate(text, max = PREVIEW_CHARS) {
  return text.length > max ? `${text.slice(0, max)}…` : text;
}

function formatNumber(n) {
  return new Intl.NumberFormat("en-US").format(n);
}

function formatDate(iso) {
  return new Date(iso).toLocaleString("en-GB", { dateStyle: "short", timeStyle: "short" });
}

function describeError(err) {
  if (err instanceof ApiError) return `${err.code}: ${err.detail || `HTTP ${err.status}`}`;
  return err && err.message ? err.message : String(err);
}

let toastTimer = 0;
function toast(message) {
  const node = $("toast");
  node.textContent = message;
  node.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => (node.hidden = true), 6000);
}

function setPill(node, text, kind) {
  node.textContent = text;
  node.dataset.state = kind;
  node.hidden = !text;
}

// --- markdown & citations ---------------------------------------------------------------------

marked.use({ gfm: true, breaks: true });
DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  // Links in answers leave the console in a new tab and learn nothing about it.
  if (node.tagName === "A" && node.hasAttribute("href")) {
    node.setAttribute("target", "_blank");
    node.setAttribute("rel", "noopener noreferrer");
  }
});

const CITATION = /\[kb:([^\]\s]+)\]/g;
/** Beyond DOMPurify's defaults: no images (a model tricked by a tool result could leak data
 * through an image URL the browser fetches by itself), no forms, no page-wide styles. */
const SANITIZE = {
  RETURN_DOM_FRAGMENT: true,
  FORBID_TAGS: ["img", "picture", "video", "audio", "style", "form", "input", "button", "textarea", "select"],
  FORBID_ATTR: ["style"],
};

/** Markdown -> sanitized DOM (no script, no event handlers), with [kb:<id>] citations linked. */
function renderMarkdown(text) {
  const html = marked.parse(text, { async: false });
  const fragment = DOMPurify.sanitize(html, SANITIZE);
  linkCitations(fragment);
  return fragment;
}

/** Replace [kb:<id>] in text nodes (not in code or existing links) with citation links. */
function linkCitations(root) {
  const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT, {
    acceptNode: (node) =>
      node.parentElement?.closest("code, pre, a") ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT,
  });
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  for (const node of nodes) {
    const text = node.nodeValue;
    if (!text.includes("[kb:")) continue;
    const parts = document.createDocumentFragment();
    let last = 0;
    for (const match of text.matchAll(CITATION)) {
      parts.append(text.slice(last, match.index), citation(match[1], match[0]));
      last = match.index + match[0].length;
    }
    parts.append(text.slice(last));
    node.replaceWith(parts);
  }
}

/** A citation: to the document's URL when it has one, else to the cited passage in a dialog. */
function citation(id, label) {
  const hit = state.kbResults.get(id);
  if (!hit) {
    return el("span", { class: "cite cite-unknown", title: `knowledge-base result ${id} (not in this thread)` }, label);
  }
  const title = [hit.title, hit.source].filter(Boolean).join(" · ") || `knowledge-base result ${id}`;
  const attrs = { class: "cite", title, dataset: { kbId: id, docId: hit.doc_id || "" } };
  if (hit.url && /^https?:\/\//i.test(hit.url)) {
    return el("a", { ...attrs, href: hit.url, target: "_blank", rel: "noopener noreferrer" }, label);
  }
  return el("a", { ...attrs, href: `#kb-${id}`, onclick: (event) => { event.preventDefault(); openCitation(id); } }, label);
}

function openCitation(id) {
  const hit = state.kbResults.get(id);
  if (!hit) return;
  $("cite-title").textContent = hit.title || `knowledge-base result ${id}`;
  $("cite-meta").textContent = [`result ${id}`, hit.source && `source ${hit.source}`, hit.doc_id && `document ${hit.doc_id}`]
    .filter(Boolean)
    .join(" · ");
  $("cite-content").textContent = hit.content || "";
  $("cite-dialog").showModal();
}

/** Remember the results a query_kb call returned, so answers can link what they cite. */
function collectKbResults(m) {
  if (m.role !== "tool" || m.tool_name !== KB_TOOL) return;
  let payload;
  try {
    payload = JSON.parse(m.content);
  } catch {
    return;
  }
  for (const r of Array.isArray(payload?.results) ? payload.results : []) {
    if (r && r.id !== undefined) state.kbResults.set(String(r.id), r);
  }
}

// --- connection & threads ---------------------------------------------------------------------

async function connect(key) {
  state.apiKey = key.trim();
  localStorage.setItem(KEY_STORAGE, state.apiKey);
  setPill($("connection"), "connecting…", "pending");
  try {
    await loadAgents();
    await loadThreads();
    setPill($("connection"), "connected", "ok");
    $("message-input").disabled = !state.threadId;
    const remembered = localStorage.getItem(THREAD_STORAGE);
    if (!state.threadId && remembered && state.threads.some((t) => t.id === remembered)) {
      await selectThread(remembered);
    }
  } catch (err) {
    const text = err instanceof ApiError && err.status === 401 ? refusal(err) : describeError(err);
    setPill($("connection"), text, "error");
  }
}

/** Why the server refused the credential: a token may simply have expired (sign in again). */
function refusal(err) {
  return err.code === "invalid_token"
    ? "refused: unknown API key, or an expired or invalid token"
    : "unauthorized: enter an API key or a token";
}

async function loadAgents() {
  const listed = await api.listAgents();
  state.agents = new Map(listed.items.map((a) => [a.id, a]));
  state.defaultAgentId = listed.default_agent_id;
  const picker = $("new-thread-agent");
  picker.replaceChildren(
    ...listed.items.map((a) =>
      el(
        "option",
        { value: a.id, selected: a.id === listed.default_agent_id, title: a.description },
        a.available ? a.name : `${a.name} (unavailable)`,
      ),
    ),
  );
  picker.hidden = listed.items.length < 2;
}

/** The agent's display name (its id when it is not registered any more). */
function agentName(agentId) {
  return state.agents.get(agentId)?.name || agentId;
}

/** @param {import("./api-client.js").AgentBudget} b */
function describeBudget(b) {
  return (
    `threshold ${formatNumber(b.summary_threshold)}, keep recent ${formatNumber(b.summary_keep_recent_tokens)}, ` +
    `summary ≤ ${formatNumber(b.summary_max_tokens)}, previews ${formatNumber(b.tool_result_preview_tokens)} tokens`
  );
}

async function loadThreads({ more = false } = {}) {
  const page = await api.listThreads({ limit: 50, cursor: more ? state.nextCursor : undefined });
  state.threads = more ? [...state.threads, ...page.items] : page.items;
  state.nextCursor = page.next_cursor ?? null;
  renderThreads();
}

function renderThreads() {
  const list = $("thread-list");
  list.replaceChildren(
    ...state.threads.map((t) =>
      el(
        "li",
        {},
        el(
          "button",
          {
            type: "button",
            class: "thread",
            "aria-current": t.id === state.threadId ? "true" : undefined,
            dataset: { threadId: t.id },
            onclick: () => selectThread(t.id),
          },
          el("span", { class: "thread-title" }, t.title || "Untitled thread"),
          el("span", { class: "thread-meta" }, `${agentName(t.agent_id)} · ${t.id.slice(0, 8)} · ${formatDate(t.created_at)}`),
        ),
      ),
    ),
  );
  $("threads-empty").hidden = state.threads.length > 0;
  $("threads-empty").textContent = "No threads yet: create one above.";
  $("more-threads").hidden = !state.nextCursor;
}

async function deleteThread() {
  const threadId = state.threadId;
  if (!threadId) return;
  const thread = state.threads.find((t) => t.id === threadId);
  if (!window.confirm(`Delete the thread "${thread?.title || "Untitled thread"}" and its whole history?`)) return;
  try {
    await api.deleteThread({ thread_id: threadId });
  } catch (err) {
    toast(`Could not delete the thread: ${describeError(err)}`);
    return;
  }
  state.threadScope?.abort();
  state.threadScope = null;
  state.threadId = null;
  state.activeRunId = null;
  state.threads = state.threads.filter((t) => t.id !== threadId);
  localStorage.removeItem(THREAD_STORAGE);
  renderThreads();
  $("thread-title").textContent = "No thread selected";
  $("delete-thread").hidden = true;
  $("transcript").replaceChildren();
  $("interrupt").hidden = true;
  $("compress-result").hidden = true;
  setRunActive(false, "");
  updateCompressButton();
  toast("Thread deleted.");
}

async function createThread(title, agentId) {
  const body = agentId ? { title, agent_id: agentId } : { title };
  const thread = await api.createThread({ body });
  state.threads = [thread, ...state.threads];
  renderThreads();
  await selectThread(thread.id);
}

async function selectThread(threadId) {
  state.threadScope?.abort();
  const scope = new AbortController();
  state.threadScope = scope;
  state.threadId = threadId;
  state.offloads = new Map();
  state.shown = new Set();
  state.kbResults = new Map();
  state.streams = new Map();
  state.withdrawn = new Set();
  state.runsRead = new Set();
  state.pendingInterrupt = null;
  state.manual = null;
  localStorage.setItem(THREAD_STORAGE, threadId);
  renderThreads();
  const thread = state.threads.find((t) => t.id === threadId);
  $("thread-title").textContent = thread?.title || "Untitled thread";
  $("delete-thread").hidden = false;
  $("transcript").replaceChildren();
  $("compress-result").hidden = true;
  $("interrupt").hidden = true;
  setRunActive(false, "");
  updateCompressButton();

  const loaded = loadThread(threadId, scope);
  state.threadLoaded = loaded;
  await loaded;
}

/** The selected thread's history, agent state and runs; follows its active run, if any. */
async function loadThread(threadId, scope) {
  try {
    await Promise.all([loadHistory(threadId, scope.signal), refreshAgentState(threadId)]);
    // Each turn's run status and token usage come back from the runs (they survive a reload).
    const { items: runs } = await api.listRuns({ thread_id: threadId, limit: 200 }, { signal: scope.signal });
    for (const run of runs) renderTurn(run.request_id, run);
    const latest = runs[0];
    if (latest && ACTIVE.includes(latest.status)) {
      followRun(latest.id, scope.signal);
    } else if (!state.runActive) {
      // (Unless a message was sent meanwhile: sendMessage follows that one itself.)
      resumeWaiting(threadId, new Set(runs.map((r) => r.request_id)), scope.signal);
    }
  } catch (err) {
    if (!scope.signal.aborted) toast(`Could not open the thread: ${describeError(err)}`);
  }
}

/** After a reload: the user messages after the last answered one have no run yet: withdrawn
 * (ListMessages flags them) or still queued; wait for the oldest queued one, the next to run. */
function resumeWaiting(threadId, answered, signal) {
  const users = [...document.querySelectorAll("#transcript .msg-user[data-request-id]")];
  const lastAnswered = users.findLastIndex((item) => answered.has(item.dataset.requestId));
  let next = null;
  for (const item of users.slice(lastAnswered + 1)) {
    const requestId = item.dataset.requestId;
    if (item.dataset.withdrawn === "true") {
      renderTurn(requestId, { status: "withdrawn" });
    } else {
      renderTurn(requestId, { status: "queued" });
      next ??= requestId;
    }
  }
  if (!next) return;
  awaitAndFollow(threadId, next, signal).catch((err) => {
    if (!signal.aborted) setRunActive(false, describeError(err), "error");
  });
}

async function loadHistory(threadId, signal) {
  let after;
  for (;;) {
    const page = await api.listMessages({ thread_id: threadId, after_seq: after, limit: 200 }, { signal });
    for (const m of page.items) appendMessage(m);
    if (page.next_after_seq === null || page.next_after_seq === undefined) return;
    after = page.next_after_seq;
  }
}

// --- transcript -------------------------------------------------------------------------------

/**
 * One chat entry from the persisted history (a `message` stream event names one: it is read
 * with ListMessages). An assistant message takes the place of the bubble its streamed tokens
 * were shown in (`streamed`, taken when its event came).
 * @param {{id: string, role: string, content: string, tool_calls?: any[] | null,
 *          tool_call_id?: string | null, tool_name?: string | null, request_id?: string | null}} m
 * @param {Element | null} [streamed]
 */
function appendMessage(m, streamed = m.role === "assistant" ? takeStream() : null) {
  const id = m.id;
  if (id && state.shown.has(id)) {
    streamed?.remove();
    return;
  }
  if (id) state.shown.add(id);
  collectKbResults(m);

  const item = el("li", { class: `msg msg-${m.role}`, dataset: { role: m.role, messageId: id } });
  const label = { user: "You", assistant: "Assistant", tool: `Tool result · ${m.tool_name || "tool"}` }[m.role] || m.role;
  item.append(el("div", { class: "msg-label" }, label));

  if (m.role === "tool") {
    item.dataset.toolCallId = m.tool_call_id || "";
    item.append(
      el(
        "details",
        { class: "tool-result" },
        el("summary", {}, `${formatNumber(m.content.length)} characters`),
        el("pre", {}, truncate(m.content)),
      ),
      el("div", { class: "offload-slot" }),
    );
    decorateOffload(item);
  } else if (m.role === "assistant" && m.content) {
    item.append(el("div", { class: "msg-text markdown" }, renderMarkdown(m.content)));
  } else if (m.content) {
    item.append(el("div", { class: "msg-text" }, m.content));
  }
  if (m.role === "user" && m.request_id) {
    item.dataset.requestId = m.request_id;
    item.dataset.withdrawn = String(Boolean(m.withdrawn));
    item.append(el("div", { class: "turn-meta", hidden: true }));
  }
  for (const call of m.tool_calls || []) {
    item.append(
      el(
        "div",
        { class: "tool-call", dataset: { toolName: call.name } },
        el("span", { class: "tool-name" }, `→ ${call.name}`),
        el("code", {}, truncate(JSON.stringify(call.args ?? {}), 300)),
      ),
    );
  }
  const transcript = $("transcript");
  if (streamed) streamed.replaceWith(item);
  else transcript.append(item);
  transcript.scrollTop = transcript.scrollHeight;
}

/** Streamed tokens (`delta` events) of an answer not yet persisted, shown as they arrive. */
function appendDelta(data) {
  const key = data.lc_id ?? "";
  let entry = state.streams.get(key);
  if (!entry) {
    const body = el("div", { class: "msg-text markdown" });
    const item = el(
      "li",
      { class: "msg msg-assistant msg-streaming", dataset: { role: "assistant" }, "aria-busy": "true" },
      el("div", { class: "msg-label" }, "Assistant · streaming"),
      body,
    );
    entry = { item, body, text: "" };
    state.streams.set(key, entry);
    $("transcript").append(item);
  }
  entry.text += data.text || "";
  entry.body.replaceChildren(renderMarkdown(entry.text));
  const transcript = $("transcript");
  transcript.scrollTop = transcript.scrollHeight;
}

/** The oldest streamed bubble (its persisted message arrives next, in order); null if none. */
function takeStream() {
  const first = state.streams.entries().next();
  if (first.done) return null;
  state.streams.delete(first.value[0]);
  return first.value[1].item;
}

/** A stream that ended without its message (failure, cancel) keeps its text, marked unfinished. */
function settleStreams() {
  for (const { item } of state.streams.values()) {
    item.classList.remove("msg-streaming");
    item.removeAttribute("aria-busy");
    item.querySelector(".msg-label").textContent = "Assistant · unfinished";
  }
  state.streams.clear();
}

// --- turns: run status, token usage, withdraw ----------------------------------------------

const TURN_KIND = { completed: "ok", failed: "error", cancelled: "error", withdrawn: "error", interrupted: "warn" };

/** Show a turn's run status and token usage under the user message that asked for it. */
function renderTurn(requestId, run) {
  const item = document.querySelector(`#transcript .msg-user[data-request-id="${CSS.escape(requestId)}"]`);
  const slot = item?.querySelector(".turn-meta");
  if (!slot) return;
  const status = run.status;
  slot.dataset.status = status;
  const parts = [el("span", { class: "pill turn-status", dataset: { state: TURN_KIND[status] || "pending" } }, status)];
  if (run.model_calls) {
    parts.push(
      el(
        "span",
        { class: "turn-usage", title: "tokens sent to / received from the model in this turn" },
        `${formatNumber(run.input_tokens)} in · ${formatNumber(run.output_tokens)} out · ` +
          `${run.model_calls} model call${run.model_calls === 1 ? "" : "s"}`,
      ),
    );
  }
  if (status === "queued") {
    parts.push(
      el("button", { type: "button", class: "link-button withdraw", onclick: () => withdraw(requestId) }, "Withdraw"),
    );
  }
  slot.replaceChildren(...parts);
  slot.hidden = false;
}

/** Withdraw a message still waiting in the queue (once its run started, cancel the run instead). */
async function withdraw(requestId) {
  const threadId = state.threadId;
  try {
    await api.cancelRequest({ request_id: requestId });
  } catch (err) {
    toast(`Could not withdraw: ${describeError(err)}`);
    return;
  }
  if (threadId !== state.threadId) return;
  state.withdrawn.add(requestId);
  renderTurn(requestId, { status: "withdrawn" });
  setRunActive(false, "withdrawn", "error");
  refreshAgentState(threadId);
}

function appendNote(text, kind = "note") {
  const transcript = $("transcript");
  transcript.append(el("li", { class: `msg msg-${kind}` }, text));
  transcript.scrollTop = transcript.scrollHeight;
}

/** Tool results whose model-visible copy was offloaded get a link to the full original. */
function decorateOffload(item) {
  const slot = item.querySelector(".offload-slot");
  const offload = state.offloads.get(item.dataset.toolCallId);
  if (!slot) return;
  slot.replaceChildren(
    ...(offload
      ? [
          el("span", { class: "badge" }, "offloaded"),
          " the model sees a preview; ",
          offloadLink(offload, "open the full original"),
        ]
      : []),
  );
}

function offloadLink(offload, text) {
  const threadId = state.threadId;
  return el(
    "a",
    {
      href: `/v1/threads/${threadId}/workdir/${offload.path}`,
      class: "offload-link",
      onclick: (event) => {
        event.preventDefault();
        openWorkdirFile(threadId, offload);
      },
    },
    text,
  );
}

async function openWorkdirFile(threadId, offload) {
  const dialog = $("file-dialog");
  $("file-title").textContent = offload.path;
  $("file-sha").textContent = offload.sha256 || "–";
  setPill($("file-verified"), "loading…", "pending");
  $("file-content").textContent = "";
  dialog.showModal();
  try {
    const response = await api.readWorkdirFile({ thread_id: threadId, path: offload.path }, { raw: true });
    const bytes = await response.arrayBuffer();
    $("file-content").textContent = new TextDecoder().decode(bytes);
    const served = response.headers.get("X-Content-SHA256");
    const actual = await sha256Hex(bytes);
    if (actual === null) {
      setPill($("file-verified"), "not verified (needs a secure context)", "warn");
    } else if (actual === offload.sha256 && (!served || served === actual)) {
      setPill($("file-verified"), "verified", "ok");
    } else {
      setPill($("file-verified"), `mismatch: content hashes to ${actual}`, "error");
    }
  } catch (err) {
    setPill($("file-verified"), describeError(err), "error");
  }
}

async function sha256Hex(bytes) {
  if (!globalThis.crypto?.subtle) return null;
  const digest = await crypto.subtle.digest("SHA-256", bytes);
  return Array.from(new Uint8Array(digest), (b) => b.toString(16).padStart(2, "0")).join("");
}

// --- posting & streaming ----------------------------------------------------------------------

function setRunActive(active, label, kind = "pending") {
  state.runActive = active;
  if (!active) state.activeRunId = null;
  setPill($("run-status"), label, kind);
  $("send-button").disabled = active || !state.threadId;
  $("message-input").disabled = !state.threadId;
  $("cancel-run").hidden = !(active && state.activeRunId);
}

/** Cancel the run the page follows; its stream then reports the final `cancelled` status. */
async function cancelRun() {
  const runId = state.activeRunId;
  if (!runId) return;
  $("cancel-run").disabled = true;
  try {
    await api.cancelRun({ run_id: runId });
  } catch (err) {
    toast(`Could not cancel the run: ${describeError(err)}`);
  } finally {
    $("cancel-run").disabled = false;
  }
}

async function sendMessage() {
  const input = $("message-input");
  const content = input.value.trim();
  const threadId = state.threadId;
  if (!content || !threadId || state.runActive) return;
  const signal = state.threadScope.signal;
  setRunActive(true, "sending…");
  try {
    // A message sent while the thread is still being opened would be read twice, by the
    // history and by its run's stream (and its run, if still active, followed twice): the
    // answer once shown as stored and once more as streamed text. Send once the thread is open.
    await state.threadLoaded;
    if (signal.aborted) return;
    const accepted = await api.postMessage({ thread_id: threadId, body: { content } }, { signal });
    input.value = "";
    appendMessage({ id: accepted.message_id, role: "user", content, request_id: accepted.request_id });
    refreshAgentState(threadId);
    await awaitAndFollow(threadId, accepted.request_id, signal);
  } catch (err) {
    if (signal.aborted) return;
    setRunActive(false, describeError(err), "error");
  }
}

/** A queued request: show it as such until the worker starts its run, then follow the run. */
async function awaitAndFollow(threadId, requestId, signal) {
  setRunActive(true, "queued");
  renderTurn(requestId, { status: "queued" });
  const runId = await waitForRun(threadId, requestId, signal);
  if (runId) await followRun(runId, signal);
}

/** The worker turns the queued request into a run; wait for it (null once withdrawn). */
async function waitForRun(threadId, requestId, signal) {
  for (;;) {
    if (state.withdrawn.has(requestId)) return null;
    const { items } = await api.listRuns({ thread_id: threadId, limit: 20 }, { signal });
    const run = items.find((r) => r.request_id === requestId);
    if (run) return run.id;
    await sleep(RUN_POLL_MS, signal);
  }
}

function sleep(ms, signal) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener("abort", () => {
      clearTimeout(timer);
      reject(signal.reason);
    }, { once: true });
  });
}

/** Stream a run's events until its final status; reconnects from the last event id. */
async function followRun(runId, signal) {
  // Opening a thread and sending to it may both find the new run: one reader per run, and
  // none once a reader has seen its final status (a second one would replay its answer).
  if (state.runsRead.has(runId)) return;
  if (state.following?.runId === runId && !state.following.signal.aborted) return;
  const following = { runId, signal };
  state.following = following;
  const runsRead = state.runsRead;
  try {
    if (await readRun(runId, signal)) runsRead.add(runId);
  } finally {
    if (state.following === following) state.following = null;
  }
}

/** Read a run's events; true once its final status was seen. */
async function readRun(runId, signal) {
  const threadId = state.threadId;
  state.activeRunId = runId;
  setRunActive(true, "running");
  let after = 0;
  let final = false;
  let failures = 0;
  while (!final && !signal.aborted) {
    try {
      const response = await api.streamRunEvents({ run_id: runId, after }, { raw: true, signal });
      for await (const event of readEventStream(response.body)) {
        if (event.id) after = Number(event.id);
        failures = 0;
        final = handleRunEvent(event, threadId) || final;
      }
      if (!final) {
        // Stream ended without a final status (the run finished earlier): read the outcome.
        const run = await api.getRun({ run_id: runId }, { signal });
        if (FINAL.includes(run.status)) {
          handleRunEvent({ event: "status", data: JSON.stringify({ ...run, final: true }) }, threadId);
          final = true;
        }
      }
    } catch (err) {
      if (signal.aborted) return false;
      failures += 1;
      if (failures > STREAM_RETRIES) {
        setRunActive(false, `stream lost: ${describeError(err)}`, "error");
        return false;
      }
      await sleep(500 * failures, signal);
    }
  }
  return final;
}

/**
 * Parse a `text/event-stream` body (EventSource cannot send the Authorization header).
 * @param {ReadableStream<Uint8Array>} body
 * @returns {AsyncGenerator<{event: string, data: string, id: string}>}
 */
async function* readEventStream(body) {
  const reader = body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let boundary;
      while ((boundary = buffer.search(/\r\n\r\n|\n\n|\r\r/)) >= 0) {
        const block = buffer.slice(0, boundary);
        buffer = buffer.slice(boundary).replace(/^(\r\n\r\n|\n\n|\r\r)/, "");
        const event = parseEventBlock(block);
        if (event) yield event;
      }
    }
  } finally {
    reader.releaseLock();
  }
}

function parseEventBlock(block) {
  let event = "message";
  let id = "";
  const data = [];
  for (const line of block.split(/\r\n|\n|\r/)) {
    if (!line || line.startsWith(":")) continue; // comments are keep-alives
    const colon = line.indexOf(":");
    const field = colon < 0 ? line : line.slice(0, colon);
    const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
    if (field === "event") event = value;
    else if (field === "data") data.push(value);
    else if (field === "id") id = value;
  }
  return data.length ? { event, data: data.join("\n"), id } : null;
}

/** Apply one run event to the page; true when it is the run's final status. */
function handleRunEvent(event, threadId) {
  if (threadId !== state.threadId) return false;
  let data;
  try {
    data = JSON.parse(event.data);
  } catch {
    return false;
  }
  if (event.event === "delta") {
    appendDelta(data);
    return false;
  }
  if (event.event === "message") {
    // The event names the stored message; read them in order (one fetch after the other).
    const streamed = data.role === "assistant" ? takeStream() : null;
    state.messageReads = (state.messageReads || Promise.resolve()).then(() =>
      showStoredMessage(data, threadId, streamed),
    );
    return false;
  }
  if (event.event === "compression") {
    appendNote(`Context compressed automatically${describeCompression(data)}.`);
    refreshAgentState(threadId);
    return false;
  }
  if (event.event !== "status") return false;

  const runId = data.run_id || data.id || state.activeRunId;
  if (data.status === "interrupted") {
    showInterrupt(data.interrupt);
    setRunActive(true, "interrupted: waiting for approval", "warn");
    refreshTurn(runId, threadId);
  } else if (data.final) {
    const kind = data.status === "completed" ? "ok" : "error";
    settleStreams();
    setRunActive(false, data.error ? `${data.status}: ${data.error}` : data.status, kind);
    $("interrupt").hidden = true;
    refreshAgentState(threadId);
    refreshTurn(runId, threadId);
  } else {
    $("interrupt").hidden = true;
    setRunActive(true, data.status || "running");
    refreshTurn(runId, threadId);
  }
  return Boolean(data.final);
}

/** Read the message a `message` event names (by its seq) and show it. */
async function showStoredMessage(data, threadId, streamed) {
  try {
    const page = await api.listMessages({ thread_id: threadId, after_seq: Math.max(0, data.seq - 1), limit: 1 });
    const stored = page.items.find((m) => m.id === data.message_id);
    if (stored && threadId === state.threadId) appendMessage(stored, streamed);
  } catch (err) {
    if (threadId === state.threadId) toast(`Could not read a message: ${describeError(err)}`);
  }
}

/** Re-read a run for its turn's status and token usage (both kept by the server). */
async function refreshTurn(runId, threadId) {
  if (!runId) return;
  try {
    const run = await api.getRun({ run_id: runId });
    if (threadId === state.threadId) renderTurn(run.request_id, run);
  } catch (err) {
    if (threadId === state.threadId) toast(`Could not read the run: ${describeError(err)}`);
  }
}

function describeCompression(data) {
  const before = data.before_tokens ?? data.before;
  const after = data.after_tokens ?? data.after;
  return before !== undefined && after !== undefined ? ` (${formatNumber(before)} → ${formatNumber(after)} tokens)` : "";
}

// --- interrupts (human approval of tool calls) ------------------------------------------------

function showInterrupt(interrupt) {
  const requests = interrupt?.action_requests || [];
  state.pendingInterrupt = { count: Math.max(1, requests.length) };
  const names = requests.map((r) => r.name).join(", ");
  $("interrupt-text").textContent = names ? `The agent asks to run: ${names}` : "The run is waiting for a decision.";
  $("interrupt").hidden = false;
}

async function decide(type) {
  const threadId = state.threadId;
  const pending = state.pendingInterrupt;
  if (!threadId || !pending) return;
  try {
    const { items } = await api.listRuns({ thread_id: threadId, limit: 1 });
    const run = items[0];
    if (!run || run.status !== "interrupted") return;
    const decisions = Array.from({ length: pending.count }, () => ({ type }));
    await api.resumeRun({ run_id: run.id, body: { decisions } });
    state.pendingInterrupt = null;
    $("interrupt").hidden = true;
  } catch (err) {
    toast(`Could not resume: ${describeError(err)}`);
  }
}

// --- agent state, pressure & compression ------------------------------------------------------

async function refreshAgentState(threadId = state.threadId) {
  if (!threadId) return;
  let view;
  try {
    view = await api.getAgentState({ thread_id: threadId });
  } catch (err) {
    if (threadId === state.threadId) toast(`Could not read the agent state: ${describeError(err)}`);
    return;
  }
  if (threadId !== state.threadId) return; // the operator moved on meanwhile
  renderAgentState(view);
}

/** @param {import("./api-client.js").AgentStateOut} view */
function renderAgentState(view) {
  const { input_tokens: tokens, summary_threshold: threshold, compression_suggested: suggested } = view.context;
  // null: the agent's own graph builds its requests without Threadkeeper (pressure_reason).
  const counted = view.context.pressure !== null;
  const ratio = counted && threshold > 0 ? tokens / threshold : 0;
  const percent = ratio * 100;
  $("pressure-value").textContent = counted ? `${percent.toFixed(1)}%` : "not counted";
  $("pressure-fill").style.width = `${Math.min(100, percent)}%`;
  const bar = $("pressure-bar");
  bar.setAttribute("aria-valuenow", percent.toFixed(1));
  bar.title = counted ? "" : view.context.pressure_reason || "";
  bar.dataset.level = ratio >= 1 ? "over" : suggested ? "high" : "ok";
  $("input-tokens").textContent = formatNumber(tokens);
  $("summary-threshold").textContent = formatNumber(threshold);
  $("suggestion").hidden = !suggested;
  $("compress-button").classList.toggle("suggested", suggested);

  const agent = state.agents.get(view.agent_id);
  $("agent-name").textContent = agent ? agent.name : `${view.agent_id} (not registered)`;
  $("agent-budget").textContent = agent ? describeBudget(agent.budget) : "–";

  const manual = view.capabilities.manual_compression;
  state.manual = manual;
  updateCompressButton();
  const notice = $("compress-result");
  const busy = !manual.available && manual.reason === "thread_busy";
  if (!busy && notice.dataset.state === "busy") notice.hidden = true; // idle again
  $("manual-availability").textContent = manual.available
    ? "available"
    : `unavailable (${manual.reason || "unknown"}${manual.detail ? `: ${manual.detail}` : ""})`;
  $("summary-info").textContent = view.summary.present
    ? `present, covers ${view.summary.summarized_messages} messages`
    : "none";
  $("summary-details").hidden = !view.summary.text;
  $("summary-text").textContent = view.summary.text || "";
  $("visible-count").textContent = String(view.messages.length);

  state.offloads = new Map(
    view.messages.filter((m) => m.offload && m.tool_call_id).map((m) => [m.tool_call_id, m.offload]),
  );
  $("offloaded-count").textContent = String(state.offloads.size);
  for (const item of document.querySelectorAll("#transcript .msg-tool")) decorateOffload(item);
  renderStateMessages(view.messages);
}

function renderStateMessages(messages) {
  $("state-messages").replaceChildren(
    ...messages.map((m) => {
      const kind = m.is_summary ? "summary" : m.type;
      const label = m.is_summary ? "summary" : m.type === "tool" ? `tool · ${m.name || ""}` : m.type;
      return el(
        "li",
        { class: `state-msg state-${kind}` },
        el("span", { class: "badge" }, label),
        m.offload ? el("span", { class: "badge badge-offload" }, "offloaded") : null,
        el("p", {}, truncate(m.content || (m.tool_calls ? `calls ${m.tool_calls.map((c) => c.name).join(", ")}` : ""), 220)),
        m.offload ? offloadLink(m.offload, `full original (${m.offload.path})`) : null,
      );
    }),
  );
}

/** While the thread_busy notice shows, re-read the agent state until the thread is idle (the
 * notice then clears), whoever made it busy: this page, another tab or another client. */
async function watchBusy(threadId) {
  const signal = state.threadScope?.signal;
  const notice = $("compress-result");
  if (state.watchingBusy === signal) return; // one watcher per thread selection
  state.watchingBusy = signal;
  while (threadId === state.threadId && !signal?.aborted && !notice.hidden && notice.dataset.state === "busy") {
    try {
      await sleep(BUSY_POLL_MS, signal);
    } catch {
      return;
    }
    await refreshAgentState(threadId);
  }
  if (state.watchingBusy === signal) state.watchingBusy = null;
}

/** The capability says whether CompressContext would do anything: with nothing to compress
 * (or no history) the button is off. A busy thread keeps it on: a click says why (409). */
function compressOffered() {
  const manual = state.manual;
  return !manual || manual.available || manual.reason === "thread_busy";
}

function updateCompressButton() {
  const button = $("compress-button");
  button.disabled = state.compressPending || !state.threadId || !compressOffered();
  button.title = compressOffered() ? "" : `Nothing to compress (${state.manual.reason})`;
  button.setAttribute("aria-busy", String(state.compressPending));
  button.textContent = state.compressPending ? "Compressing…" : "Compress now";
}

function showCompressResult(text, kind) {
  const node = $("compress-result");
  node.textContent = text;
  node.dataset.state = kind;
  node.hidden = false;
}

/** Manual compression: at most one request in flight; the button is disabled while it runs. */
async function compressContext() {
  const threadId = state.threadId;
  if (state.compressPending || !threadId || !compressOffered()) return;
  state.compressPending = true;
  updateCompressButton();
  showCompressResult("Compressing…", "pending");
  try {
    const out = await api.compressContext({ thread_id: threadId });
    if (threadId !== state.threadId) return;
    const parts = [`${formatNumber(out.before_tokens)} → ${formatNumber(out.after_tokens)} tokens`];
    if (out.offloaded) parts.push(`${out.offloaded} tool result${out.offloaded === 1 ? "" : "s"} offloaded`);
    if (out.summarized) parts.push("older history summarized");
    showCompressResult(`Compressed: ${parts.join(", ")}.`, "ok");
    await refreshAgentState(threadId);
  } catch (err) {
    if (threadId !== state.threadId) return;
    if (err instanceof ApiError && err.status === 409) {
      showCompressResult(`thread_busy: ${err.detail || "the thread has a queued or active run"}`, "busy");
      watchBusy(threadId);
    } else if (err instanceof ApiError && err.status === 422) {
      showCompressResult(`${err.code}: ${err.detail || "nothing to compress"}`, "info");
    } else {
      showCompressResult(`Compression failed: ${describeError(err)}`, "error");
    }
    refreshAgentState(threadId);
  } finally {
    state.compressPending = false;
    updateCompressButton();
  }
}

// --- wiring -----------------------------------------------------------------------------------

function wire() {
  $("api-key").value = state.apiKey;
  $("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    connect($("api-key").value);
  });
  $("new-thread-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    if (!state.apiKey) return toast("Enter your API key first.");
    try {
      await createThread($("new-thread-title").value.trim(), $("new-thread-agent").value || null);
      $("new-thread-title").value = "";
    } catch (err) {
      toast(`Could not create the thread: ${describeError(err)}`);
    }
  });
  $("more-threads").addEventListener("click", () => loadThreads({ more: true }).catch((err) => toast(describeError(err))));
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    sendMessage();
  });
  $("message-input").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      event.preventDefault();
      sendMessage();
    }
  });
  $("compress-button").addEventListener("click", compressContext);
  $("approve-button").addEventListener("click", () => decide("approve"));
  $("cancel-run").addEventListener("click", cancelRun);
  $("delete-thread").addEventListener("click", deleteThread);
  $("reject-button").addEventListener("click", () => decide("reject"));
  if (state.apiKey) connect(state.apiKey);
}

wire();
