// The broker inbox page. Invariant: every string that came from the server — a model's
// reason, a tool name, an agent, a person's name — reaches the DOM through textContent (the
// text() helper), never innerHTML or an attribute that runs code. The server already escaped
// control and bidi characters visibly (\x1b, \u202e).
"use strict";

const SETTLED_KEPT = 200; // the settled list is bounded: the oldest rows leave first
const csrf = document.querySelector('meta[name="csrf-token"]').content;
const pendingList = document.getElementById("pending");
const settledList = document.getElementById("settled");
const byInput = document.getElementById("by");
const cards = new Map(); // question id -> {card, question}
let clockSkew = 0; // server time minus this browser's time, in ms

function text(tag, className, value) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  node.textContent = value == null ? "" : String(value);
  return node;
}

function duration(ms) {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

function now() {
  return Date.now() + clockSkew;
}

function field(list, label, value) {
  if (value == null || value === "") return;
  list.append(text("dt", null, label), text("dd", null, value));
}

// A two-person approval's progress: "1 of 2 approvals, by alice".
function approvalsText(approvals, quorum) {
  const by = approvals.length ? `, by ${approvals.join(", ")}` : "";
  return `${approvals.length} of ${quorum} approvals${by}`;
}

function card(q) {
  const li = document.createElement("li");
  li.className = "question";
  li.tabIndex = 0;
  li.dataset.id = q.id;
  const head = document.createElement("div");
  head.className = "head";
  head.append(text("span", "tool", q.toolName), text("span", "call", q.callId ?? ""));
  head.append(text("span", "waited", ""), text("span", "deadline", ""));
  const facts = document.createElement("dl");
  field(facts, "Reason", q.reason);
  if (q.arguments) field(facts, "Arguments", JSON.stringify(q.arguments, null, 1));
  if (q.approvers && q.approvers.length) field(facts, "Only by", q.approvers.join(", "));
  if (q.quorum > 1) {
    field(facts, "Approvals", approvalsText(q.approvals || [], q.quorum));
    facts.lastElementChild.classList.add("approvals");
  }
  field(facts, "Shown as", q.displayReason);
  field(facts, "Session", q.sessionId);
  const sessionLink = text("a", "session-link", q.sessionId);
  sessionLink.href = `#session=${encodeURIComponent(q.sessionId)}`;
  sessionLink.title = "show this session's log";
  facts.lastElementChild.replaceChildren(sessionLink);
  field(facts, "Agent", q.agent);
  field(facts, "Asked by", q.owner);
  field(facts, "Question", q.id);
  const actions = document.createElement("div");
  actions.className = "actions";
  const allow = text("button", "allow", "Allow once");
  const reject = text("button", "reject", "Reject");
  allow.type = reject.type = "button";
  allow.addEventListener("click", () => answer(q.id, "allowed-once"));
  reject.addEventListener("click", () => answer(q.id, "rejected"));
  actions.append(allow);
  if (q.offersAlways) {
    // Only where the asker can honour it: it remembers the rule shown for the session.
    const rule = q.alwaysRule || q.toolName;
    const always = text("button", "always", `Always allow ${rule}`);
    always.type = "button";
    always.title = `allow, and remember ${rule} for this session (or for how long is chosen)`;
    const lasts = document.createElement("select");
    lasts.className = "lasts";
    lasts.title = "how long the grant lasts";
    for (const [label, seconds] of [["this session", ""], ["30 min", "1800"], ["2 h", "7200"], ["1 day", "86400"]]) {
      const option = text("option", "", label);
      option.value = seconds;
      lasts.append(option);
    }
    always.addEventListener("click", () =>
      answer(q.id, "allowed-once", { always: true, ...(lasts.value ? { alwaysFor: Number(lasts.value) } : {}) }));
    actions.append(always, lasts);
    if (q.projectRules) {
      // The same rule, written to the project's rules file: every later session reads it.
      const project = text("button", "always", `Always allow ${rule} in this project`);
      project.type = "button";
      project.title = `allow, and add the rule ${rule} to ${q.projectRules}`;
      project.addEventListener("click", () => answer(q.id, "allowed-once", { always: true, project: true }));
      actions.append(project);
    }
  }
  // What the person says with the answer reaches the agent (a refused call's result).
  const message = document.createElement("input");
  message.className = "message";
  message.maxLength = 2000;
  message.placeholder = "message to the agent (optional)";
  message.setAttribute("aria-label", "message to the agent");
  actions.append(reject, message, text("span", "result", ""));
  li.append(head, facts, actions);
  return li;
}

function tick() {
  const t = now();
  for (const { card: li, question: q } of cards.values()) {
    li.querySelector(".waited").textContent = `waiting ${duration(t - q.askedAtMs)}`;
    const deadline = li.querySelector(".deadline");
    if (q.deadlineMs == null) deadline.textContent = "no deadline";
    else if (q.deadlineMs > t) deadline.textContent = `deadline in ${duration(q.deadlineMs - t)}`;
    else deadline.textContent = "deadline passed";
  }
}

function counted(total) {
  document.getElementById("pending-count").textContent = total ? `(${total})` : "";
  document.getElementById("empty").hidden = cards.size > 0;
}

function add(q) {
  if (cards.has(q.id)) return;
  const li = card(q);
  cards.set(q.id, { card: li, question: q });
  pendingList.append(li);
}

function settle(id, outcome, by) {
  const entry = cards.get(id);
  if (!entry) return;
  cards.delete(id);
  const li = entry.card;
  const hadFocus = li.contains(document.activeElement);
  const next = li.nextElementSibling || li.previousElementSibling;
  li.remove();
  li.classList.add("gone");
  li.removeAttribute("tabindex");
  li.querySelector(".actions").remove();
  li.querySelector(".waited").textContent = "";
  li.querySelector(".deadline").textContent = "";
  const what = outcome ? `settled as ${outcome}` : "no longer pending";
  li.append(text("p", `outcome ${outcome ?? "unknown"}`, by ? `${what} by ${by}` : what));
  settledList.prepend(li);
  while (settledList.children.length > SETTLED_KEPT) settledList.lastElementChild.remove();
  if (hadFocus && next) next.focus();
}

function snapshot(data) {
  clockSkew = data.nowMs - Date.now();
  const ids = new Set(data.questions.map((q) => q.id));
  // A question for named approvers is never on the feed (loadMine keeps those cards): a
  // reconnect's snapshot must not settle it.
  for (const [id, entry] of [...cards]) if (!ids.has(id) && !named(entry.question)) settle(id, null, null);
  for (const q of data.questions) add(q);
  counted(data.total);
  tick();
}

function change(data) {
  clockSkew = data.nowMs - Date.now();
  for (const gone of data.gone ?? []) settle(gone.id, gone.outcome, gone.by);
  for (const q of data.added ?? []) add(q);
  counted(data.total);
  tick();
}

async function answer(id, outcome, terms = null) {
  const always = terms !== null;
  const entry = cards.get(id);
  if (!entry) return;
  const result = entry.card.querySelector(".result");
  const by = byInput.value.trim();
  if (!by) {
    result.textContent = "enter your name first: it is recorded as answeredBy";
    byInput.focus();
    return;
  }
  localStorage.setItem("broker-inbox-by", by);
  const said = entry.card.querySelector(".message").value.trim();
  const buttons = entry.card.querySelectorAll(".actions button");
  for (const b of buttons) b.disabled = true;
  result.textContent = "sending…";
  let reply = {};
  let status = 0;
  try {
    const response = await fetch("/api/answer", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({ id, outcome, by, ...(said ? { message: said } : {}), ...(terms || {}) }),
      credentials: "same-origin",
    });
    status = response.status;
    reply = await response.json().catch(() => ({}));
  } catch (error) {
    reply = { error: `the inbox did not answer: ${error}` };
  }
  if (status === 200 && reply.outcome == null && reply.quorum) {
    // An approval that does not decide yet: another approver must allow too.
    const progress = approvalsText(reply.approvals || [], reply.quorum);
    result.textContent = `your approval is recorded: ${progress}; another approver must allow it`;
    const shown = entry.card.querySelector(".approvals");
    if (shown) shown.textContent = progress;
    entry.card.classList.add("approved");
    return;
  }
  if (status === 200) {
    result.textContent = `answered ${reply.outcome} by ${reply.by}: waiting for the asker to record it`;
    entry.card.classList.add("answered");
    // The asker records the grant once it reads the answer: look again a moment later.
    if (always) setTimeout(loadGrants, 1000);
    return;
  }
  if (reply.recorded) {
    const by = reply.by ? ` by ${reply.by}` : "";
    result.textContent = `refused: ${reply.error} (recorded: ${reply.recorded}${by})`;
    entry.card.classList.add("refused");
    return;
  }
  result.textContent = `not answered: ${reply.error ?? `HTTP ${status}`}`;
  for (const b of buttons) b.disabled = false;
}

function focusStep(step) {
  const all = [...pendingList.children];
  if (!all.length) return;
  const at = all.findIndex((li) => li.contains(document.activeElement));
  const next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
  all[next].focus();
}

document.addEventListener("keydown", (event) => {
  if (event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.target instanceof HTMLInputElement) return;
  const li = document.activeElement && document.activeElement.closest("#pending li.question");
  if (event.key === "j" || event.key === "ArrowDown") focusStep(1);
  else if (event.key === "k" || event.key === "ArrowUp") focusStep(-1);
  else if (li && event.key === "a") answer(li.dataset.id, "allowed-once");
  else if (li && event.key === "r") answer(li.dataset.id, "rejected");
  else return;
  event.preventDefault();
});

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 23);
}

async function showSession() {
  const view = document.getElementById("session-view");
  const match = location.hash.match(/^#session=(.+)$/);
  if (!match) {
    view.hidden = true;
    return;
  }
  const id = decodeURIComponent(match[1]);
  const rows = document.getElementById("session-rows");
  const summary = document.getElementById("session-summary");
  document.getElementById("session-id").textContent = id;
  rows.replaceChildren();
  summary.textContent = "loading…";
  view.hidden = false;
  let reply = {};
  let status = 0;
  try {
    const response = await fetch(`/api/session?id=${encodeURIComponent(id)}`);
    status = response.status;
    reply = await response.json().catch(() => ({}));
  } catch (error) {
    reply = { error: `the inbox did not answer: ${error}` };
  }
  if (status !== 200) {
    summary.textContent = reply.error ?? `HTTP ${status}`;
    return;
  }
  const parent = reply.parentId ? `, parent ${reply.parentId}` : "";
  const shown = reply.rows.length < reply.total ? ` (the newest ${reply.rows.length} shown)` : "";
  summary.textContent = `${reply.total} events${shown}${parent}`;
  const start = reply.rows.length ? reply.rows[0].tsMs : 0;
  for (const row of reply.rows) {
    const tr = document.createElement("tr");
    tr.className = row.type.replace("/", "-");
    tr.append(
      text("td", "seq", row.seq),
      text("td", "time", clock(row.tsMs)),
      text("td", "elapsed", `+${((row.tsMs - start) / 1000).toFixed(3)}s`),
      text("td", "event", row.text),
    );
    rows.append(tr);
  }
}

window.addEventListener("hashchange", showSession);

function connect() {
  const connection = document.getElementById("connection");
  const source = new EventSource("/events");
  source.addEventListener("open", () => {
    connection.textContent = "live";
    connection.className = "connection live";
  });
  source.addEventListener("error", () => {
    connection.textContent = "reconnecting…";
    connection.className = "connection down";
  });
  source.addEventListener("snapshot", (event) => snapshot(JSON.parse(event.data)));
  source.addEventListener("change", (event) => change(JSON.parse(event.data)));
}

const grantsList = document.getElementById("grants");

function grantRow(g) {
  const li = document.createElement("li");
  li.className = "grant";
  li.dataset.id = g.id;
  const rule = g.command == null ? g.toolName : `${g.toolName}: ${g.command}`;
  li.append(text("span", "rule", rule), text("span", "status", g.status));
  const facts = document.createElement("dl");
  field(facts, "Grant", g.id);
  field(facts, "Session", g.sessionId);
  field(facts, "Given by", g.by);
  if (g.expiresAtMs != null) field(facts, "Until", new Date(g.expiresAtMs).toISOString());
  li.append(facts);
  if (g.status === "active" && g.id.startsWith("g-")) {
    const revoke = text("button", "revoke", "Revoke");
    revoke.type = "button";
    revoke.addEventListener("click", () => revokeGrant(g.id, li));
    li.append(revoke, text("span", "result", ""));
  }
  return li;
}

async function loadGrants() {
  let reply = { grants: [] };
  try {
    const response = await fetch("/api/grants", { credentials: "same-origin" });
    if (response.ok) reply = await response.json();
  } catch (error) {
    return;
  }
  grantsList.replaceChildren(...reply.grants.map(grantRow));
  document.getElementById("grants-empty").hidden = reply.grants.length > 0;
}

async function revokeGrant(id, li) {
  const result = li.querySelector(".result");
  const by = byInput.value.trim();
  if (!by) {
    result.textContent = "enter your name first: it is recorded with the revocation";
    byInput.focus();
    return;
  }
  let reply = {};
  let status = 0;
  try {
    const response = await fetch("/api/revoke", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf },
      body: JSON.stringify({ id, by }),
      credentials: "same-origin",
    });
    status = response.status;
    reply = await response.json().catch(() => ({}));
  } catch (error) {
    result.textContent = "not sent: the inbox is unreachable";
    return;
  }
  if (status !== 200) {
    result.textContent = reply.error ?? `refused (${status})`;
    return;
  }
  await loadGrants();
}

document.getElementById("grants-reload").addEventListener("click", loadGrants);

// Signed in with a personal token: the server records that person, whatever the field says.
const person = document.querySelector('meta[name="broker-person"]').content;
if (person) {
  byInput.value = person;
  byInput.readOnly = true;
  byInput.title = "signed in with your own token: answers are recorded as you";
  byInput.parentElement.firstChild.textContent = "Signed in as ";
} else {
  byInput.value = localStorage.getItem("broker-inbox-by") ?? "";
}

// A question a rule gives to named approvers is not on the shared live feed (every page sees
// it): a signed-in person lists the ones that are theirs every 2 s.
const named = (q) => Boolean(q.approvers && q.approvers.length);
async function loadMine() {
  try {
    const reply = await fetch("/api/pending", { credentials: "same-origin" });
    if (!reply.ok) return;
    const mine = (await reply.json()).questions.filter(named);
    const ids = new Set(mine.map((q) => q.id));
    for (const q of mine) {
      add(q);
      const entry = cards.get(q.id);
      const shown = entry && q.quorum > 1 ? entry.card.querySelector(".approvals") : null;
      if (shown) shown.textContent = approvalsText(q.approvals || [], q.quorum);
    }
    for (const [id, entry] of cards) {
      if (named(entry.question) && !ids.has(id) && !entry.card.classList.contains("answered")) {
        entry.card.remove();
        cards.delete(id);
      }
    }
    counted(cards.size);
  } catch (error) {
    // the next round tries again
  }
}
if (person) {
  loadMine();
  setInterval(loadMine, 2000);
}
counted(0);
connect();
loadGrants();
showSession();
setInterval(tick, 1000);
