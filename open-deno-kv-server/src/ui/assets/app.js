// The explorer's page script: plain JavaScript, no build step, nothing loaded from elsewhere.
// The access token lives in this tab's sessionStorage and goes out only in the Authorization
// header of the JSON calls (never in a URL). Keys and values are rendered by the server.
"use strict";

const TOKEN_SLOT = "kv-explorer-token";
const $ = (id) => document.getElementById(id);

const state = {
  info: null,
  // The cursors that start the pages seen so far: [null, cursorOfPage2, ...].
  pages: [null],
  page: 0,
  nextCursor: null,
  // id -> the entry as shown.
  shown: new Map(),
  // The entry open in the editor (null: a new entry), and whether it is new.
  open: null,
  creating: false,
  live: null,
};

function token() {
  return sessionStorage.getItem(TOKEN_SLOT);
}

class HttpError extends Error {
  constructor(status, text, body) {
    super(text);
    this.status = status;
    this.body = body;
  }
}

// POST /ui/api/{operation} with a JSON body; the parsed answer, or an HttpError.
async function call(operation, body, signal) {
  const response = await fetch("/ui/api/" + operation, {
    method: "POST",
    headers: {
      "Authorization": "Bearer " + (token() || ""),
      "Content-Type": "application/json",
    },
    body: JSON.stringify(body || {}),
    cache: "no-store",
    signal,
  });
  if (response.ok) return operation === "watch" ? response : response.json();
  const text = await response.text();
  let parsed = null;
  if ((response.headers.get("content-type") || "").startsWith("application/json")) {
    try { parsed = JSON.parse(text); } catch (_) { parsed = null; }
  }
  if (response.status === 401) {
    // Without a token yet this is the server asking for one, not a refusal.
    showLogin(token() ? "The server refused the token: " + text : "");
  }
  throw new HttpError(response.status, parsed && parsed.error ? parsed.error : text, parsed);
}

// ---- login -----------------------------------------------------------------------------------

function showLogin(message) {
  stopLive();
  $("browser").hidden = true;
  $("forget").hidden = true;
  $("mode").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
  $("token").focus();
}

// Opens the database: with the token in this tab, or with none when the server needs none
// (`kv serve --open-loopback`); a server that wants one answers 401, and the form is shown.
async function start() {
  try {
    state.info = await call("info");
  } catch (error) {
    if (error.status !== 401) showLogin(String(error.message));
    return;
  }
  $("login").hidden = true;
  $("browser").hidden = false;
  // Nothing to forget when the server asked for no token.
  $("forget").hidden = !token();
  $("mode").textContent = state.info.writable ? "read-write" : "read-only";
  $("mode").hidden = false;
  $("new-entry").hidden = !state.info.writable;
  $("prefix").focus();
  await listFirst();
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  if ($("token").value.trim() === "") {
    $("login-error").textContent =
      "Enter the token: the value of KV_ACCESS_TOKEN (or --token) where kv serve was started.";
    $("token").focus();
    return;
  }
  sessionStorage.setItem(TOKEN_SLOT, $("token").value);
  $("token").value = "";
  start();
});

$("forget").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_SLOT);
  $("rows").replaceChildren();
  showLogin("");
});

// ---- listing ----------------------------------------------------------------------------------

function query() {
  return {
    prefix: $("prefix").value.trim() || "[]",
    limit: Number($("limit").value),
    reverse: $("reverse").checked,
  };
}

async function listFirst() {
  state.pages = [null];
  state.page = 0;
  await listPage();
  refreshStats();
}

async function listPage() {
  const q = query();
  $("list-error").textContent = "";
  $("status").textContent = "Loading…";
  let answer;
  try {
    answer = await call("list", { ...q, cursor: state.pages[state.page] });
  } catch (error) {
    $("status").textContent = "";
    $("list-error").textContent = error.message;
    return;
  }
  state.nextCursor = answer.cursor;
  renderRows(answer.entries);
  const first = state.page * q.limit + 1;
  $("status").textContent = answer.entries.length === 0
    ? "No entries under " + q.prefix + (state.page > 0 ? " on this page." : ".")
    : "Entries " + first + "–" + (first + answer.entries.length - 1) + " under " + q.prefix;
  $("page").textContent = "Page " + (state.page + 1);
  $("first").disabled = state.page === 0;
  $("prev").disabled = state.page === 0;
  $("next").disabled = !answer.cursor;
  follow();
}

function renderRows(entries) {
  state.shown = new Map();
  const items = entries.map((entry) => {
    state.shown.set(entry.id, entry);
    const item = document.createElement("li");
    item.append(rowButton(entry));
    return item;
  });
  $("rows").replaceChildren(...items);
}

function text(tag, className, content) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.textContent = content;
  return node;
}

// One row: a real button (Enter or Space opens it), key, value, encoding, versionstamp, expiry.
function rowButton(entry) {
  const button = document.createElement("button");
  button.type = "button";
  button.className = "row";
  button.dataset.id = entry.id;
  fillRow(button, entry);
  button.addEventListener("click", () => openEntry(button.dataset.id));
  return button;
}

function fillRow(button, entry) {
  const info = document.createElement("span");
  info.className = "info";
  info.append(
    text("span", "tag", entry.encoding),
    text("span", "mono", entry.versionstamp),
  );
  if (entry.expiresAt !== null) {
    const expiry = text("span", "expiry", "");
    expiry.dataset.expires = String(entry.expiresAt);
    info.append(expiry);
  }
  button.replaceChildren(text("code", "key", entry.key), text("code", "val", entry.value), info);
  button.setAttribute("aria-label", entry.key + " = " + entry.value);
  tickExpiries(button);
}

function rowOf(id) {
  return $("rows").querySelector('button.row[data-id="' + CSS.escape(id) + '"]');
}

$("query").addEventListener("submit", (event) => {
  event.preventDefault();
  listFirst();
});
$("next").addEventListener("click", () => {
  if (!state.nextCursor) return;
  state.pages[state.page + 1] = state.nextCursor;
  state.page += 1;
  listPage();
});
$("prev").addEventListener("click", () => {
  if (state.page === 0) return;
  state.page -= 1;
  listPage();
});
$("first").addEventListener("click", () => {
  state.page = 0;
  listPage();
});

// ---- counts -----------------------------------------------------------------------------------

function bytes(n) {
  if (n < 1024) return n + " B";
  if (n < 1024 * 1024) return (n / 1024).toFixed(1) + " KiB";
  return (n / 1024 / 1024).toFixed(1) + " MiB";
}

async function refreshStats() {
  try {
    const stats = await call("stats", { prefix: query().prefix });
    const atLeast = stats.complete ? "" : "at least ";
    $("stat-entries").textContent = atLeast + stats.entries;
    $("stat-bytes").textContent = atLeast + bytes(stats.bytes);
    $("stat-queue").textContent = stats.queueDepth === null ? "not available" : String(stats.queueDepth);
  } catch (error) {
    $("stat-entries").textContent = "–";
    $("stat-bytes").textContent = "–";
    $("stat-queue").textContent = "–";
    $("list-error").textContent = error.message;
  }
}
$("stats-refresh").addEventListener("click", refreshStats);

// ---- expiry countdowns ---------------------------------------------------------------------------

function countdown(ms) {
  if (ms <= 0) return "expired";
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  if (d > 0) return "expires in " + d + "d " + h + "h";
  if (h > 0) return "expires in " + h + "h " + m + "m";
  if (m > 0) return "expires in " + m + "m " + s + "s";
  return "expires in " + s + "s";
}

function tickExpiries(root) {
  const now = Date.now();
  for (const node of (root || document).querySelectorAll("[data-expires]")) {
    const at = Number(node.dataset.expires);
    node.textContent = countdown(at - now);
    node.title = new Date(at).toISOString();
  }
}
setInterval(() => tickExpiries(), 1000);

// ---- live changes -----------------------------------------------------------------------------------

function stopLive() {
  if (state.live) state.live.abort();
  state.live = null;
  $("live").textContent = "";
  $("live").classList.remove("on");
}

// Follows the rows on screen: one event stream, rebuilt with every page.
function follow() {
  stopLive();
  const ids = [...state.shown.keys()];
  if (ids.length === 0 || !state.info || !state.info.watch) return;
  const controller = new AbortController();
  state.live = controller;
  readEvents(ids, controller).catch(() => {
    if (state.live !== controller) return;
    $("live").textContent = "live: reconnecting";
    $("live").classList.remove("on");
    setTimeout(() => { if (state.live === controller) follow(); }, 2000);
  });
}

async function readEvents(ids, controller) {
  const response = await call("watch", { ids }, controller.signal);
  $("live").textContent = "live";
  $("live").classList.add("on");
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) throw new Error("the stream ended");
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ")) applyChange(JSON.parse(line.slice(6)));
      }
    }
  }
}

// A key's new state: the row is updated in place and marked when it differs from what was shown.
function applyChange(change) {
  const before = state.shown.get(change.id);
  const button = rowOf(change.id);
  if (!button) return;
  const after = change.entry;
  const same = before && after && before.versionstamp === after.versionstamp;
  if (same || (!before && !after)) return;
  if (after) {
    state.shown.set(change.id, after);
    fillRow(button, after);
    button.classList.remove("deleted");
  } else {
    state.shown.delete(change.id);
    button.classList.add("deleted");
    button.querySelector(".val").textContent = "(deleted)";
  }
  button.classList.add("changed");
  const flag = text("span", "tag flag", "changed");
  button.querySelector(".info").prepend(flag);
  if (state.open && state.open.id === change.id && !$("editor-changed").dataset.saving) {
    const seen = state.open.versionstamp;
    if (!after || after.versionstamp !== seen) $("editor-changed").hidden = false;
  }
}

// ---- the editor ---------------------------------------------------------------------------------------

function showEntryInEditor(entry) {
  state.open = entry;
  $("editor-key").textContent = entry.key;
  $("editor-encoding").textContent = entry.encoding + " (" + bytes(entry.keyBytes) + " key, " +
    bytes(entry.valueBytes) + " value)";
  $("editor-versionstamp").textContent = entry.versionstamp;
  const expiry = $("editor-expiry");
  if (entry.expiresAt === null) {
    delete expiry.dataset.expires;
    expiry.textContent = "never";
  } else {
    expiry.dataset.expires = String(entry.expiresAt);
    tickExpiries($("editor"));
  }
  $("editor-value").textContent = entry.value;
  $("editor-changed").hidden = true;
  const editable = state.info.writable && entry.edit !== null;
  $("edit-controls").hidden = !editable;
  $("save").hidden = !editable;
  $("delete").hidden = !state.info.writable;
  $("keep-expiry").parentElement.hidden = entry.expiresAt === null;
  if (editable) {
    $("edit-type").value = entry.edit.type;
    $("edit-text").value = entry.edit.text;
  }
}

function resetEditorMessages() {
  $("conflict").hidden = true;
  $("editor-error").textContent = "";
}

async function openEntry(id) {
  const shown = state.shown.get(id);
  if (!shown) return;
  let entry = shown;
  try {
    const answer = await call("get", { id });
    if (answer.entry) entry = answer.entry;
  } catch (error) {
    $("list-error").textContent = error.message;
    return;
  }
  state.creating = false;
  $("editor-title").textContent = "Entry";
  $("new-key-field").hidden = true;
  resetEditorMessages();
  showEntryInEditor(entry);
  $("editor").showModal();
  (state.info.writable ? $("edit-text") : $("close")).focus();
}

$("new-entry").addEventListener("click", () => {
  state.creating = true;
  state.open = null;
  resetEditorMessages();
  $("editor-title").textContent = "New entry";
  $("new-key-field").hidden = false;
  $("new-key").value = $("prefix").value.trim().replace(/\]\s*$/, "") + "";
  $("editor-key").textContent = "(new)";
  $("editor-encoding").textContent = "–";
  $("editor-versionstamp").textContent = "–";
  $("editor-expiry").textContent = "never";
  delete $("editor-expiry").dataset.expires;
  $("editor-value").textContent = "(none yet)";
  $("editor-changed").hidden = true;
  $("edit-controls").hidden = false;
  $("keep-expiry").parentElement.hidden = true;
  $("edit-type").value = "json";
  $("edit-text").value = "";
  $("save").hidden = false;
  $("delete").hidden = true;
  $("editor").showModal();
  $("new-key").focus();
});

function showConflict(error) {
  $("conflict").hidden = false;
  $("conflict-text").textContent = error.message;
  const current = error.body ? error.body.current : null;
  $("conflict-value").textContent = current ? current.value : "(no entry)";
  $("conflict").dataset.current = current ? JSON.stringify(current) : "";
  $("load-current").hidden = !current;
  $("conflict").scrollIntoView({ block: "nearest" });
}

async function write(operation, body) {
  resetEditorMessages();
  $("editor-changed").dataset.saving = "yes";
  try {
    return await call(operation, body);
  } catch (error) {
    if (error.status === 409) showConflict(error);
    else $("editor-error").textContent = error.message;
    return null;
  } finally {
    delete $("editor-changed").dataset.saving;
  }
}

$("save").addEventListener("click", async () => {
  const body = { type: $("edit-type").value, text: $("edit-text").value };
  if (state.creating) {
    body.key = $("new-key").value;
    body.versionstamp = null;
  } else {
    body.id = state.open.id;
    body.versionstamp = state.open.versionstamp;
    if (state.open.expiresAt !== null && $("keep-expiry").checked) body.expiresAt = state.open.expiresAt;
  }
  const answer = await write("set", body);
  if (!answer) return;
  const entry = answer.entry;
  if (entry && state.shown.has(entry.id)) {
    state.shown.set(entry.id, entry);
    const button = rowOf(entry.id);
    // This page's own write is not a change to point out (the event may have come first).
    if (button) {
      fillRow(button, entry);
      button.classList.remove("changed", "deleted");
    }
  }
  $("editor").close();
  if (state.creating) listPage();
  $("status").textContent = "Saved" + (entry ? " " + entry.key + " (" + entry.versionstamp + ")" : "") + ".";
});

$("delete").addEventListener("click", async () => {
  if (!state.open) return;
  if (!confirm("Delete " + state.open.key + "?")) return;
  const answer = await write("delete", { id: state.open.id, versionstamp: state.open.versionstamp });
  if (!answer) return;
  const key = state.open.key;
  $("editor").close();
  $("status").textContent = "Deleted " + key + ".";
  listPage();
});

$("load-current").addEventListener("click", () => {
  const current = $("conflict").dataset.current;
  if (!current) return;
  resetEditorMessages();
  showEntryInEditor(JSON.parse(current));
  $("edit-text").focus();
});

$("close").addEventListener("click", () => $("editor").close());
// Escape closes the dialog (the browser's "cancel"); focus goes back to the row.
$("editor").addEventListener("close", () => {
  const row = state.open ? rowOf(state.open.id) : null;
  if (row) row.focus();
});

start();
