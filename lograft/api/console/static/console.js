// lograft web console (docs/console.md). Framework-free; talks only to the
// public HTTP API (docs/api.md) with the signed-in caller's credentials, so
// it shows exactly what the API gives that caller. No inline script or
// style (the page's CSP forbids them); data reaches the page only as text
// nodes (never as HTML).
"use strict";

// -- limits (each named, with its unit) --------------------------------------
const POLL_MS = 2000; // how often an open page refreshes its data, ms
const TOPICS_POLL_MS = 5000; // the topic list (one describe per topic), ms
const NODES_REFRESH_MS = 10000; // how often the node list is re-read from /v1/cluster, ms
const REQUEST_TIMEOUT_MS = 4000; // one request to one node, ms
const TOPICS_DESCRIBED_MAX = 100; // topics the topic list describes for their health
const RECORDS_PAGE_DEFAULT = 20; // records per page of the records view
const TAIL_RECORDS_MAX = 200; // records the live tail keeps on screen
const TAIL_RETRY_MS = 1000; // pause before the tail reconnects, ms
const SSE_BUFFER_CHARS_MAX = 4 * 1024 * 1024; // an unterminated event longer than this ends the tail

// -- state ------------------------------------------------------------------
const state = {
  nodes: [location.origin], // base URLs of the cluster's nodes; this one first
  current: location.origin, // the node answering now
  nodesReadAt: 0,
  auth: null, // {kind: "bearer"|"password", header, who}
  generation: 0, // bumped on every navigation: stale polls stop
};

class ApiError extends Error {
  constructor(status, code, message, details) {
    super(message);
    this.status = status;
    this.code = code;
    this.details = details || {};
  }
}

// -- DOM helpers ------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function tag(text, kind) {
  return el("span", { class: `tag ${kind}` }, text);
}

function table(headers, rows, attrs) {
  return el(
    "table",
    attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", { class: h.num ? "num" : null }, h.label || h)))),
    el("tbody", {}, rows),
  );
}

function num(value) {
  return el("td", { class: "num" }, value === null || value === undefined ? "—" : String(value));
}

function bytes(n) {
  if (n === null || n === undefined) return "—";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i += 1; }
  return `${i ? n.toFixed(1) : n} ${units[i]}`;
}

function when(ms) {
  if (ms === null || ms === undefined) return "—";
  const d = new Date(ms);
  return isNaN(d) ? String(ms) : d.toISOString().replace("T", " ").replace("Z", " UTC");
}

function showError(where, err) {
  where.replaceChildren(el("p", { class: "error", "data-error": err.code || "" }, errorText(err)));
}

function errorText(err) {
  if (err instanceof ApiError) return `${err.code}: ${err.message}`;
  return String(err && err.message ? err.message : err);
}

function banner(text, isError) {
  const b = document.getElementById("banner");
  if (!text) { b.className = "banner hidden"; b.replaceChildren(); return; }
  b.className = isError ? "banner error" : "banner";
  b.replaceChildren(text);
}

// -- the API, failing over between nodes --------------------------------------
function headers(hasBody) {
  const h = {};
  if (hasBody) h["Content-Type"] = "application/json";
  if (state.auth) h.Authorization = state.auth.header;
  return h;
}

function nodeOrder() {
  // The node that answered last first, then the others in their order.
  return [state.current, ...state.nodes.filter((n) => n !== state.current)];
}

async function readJson(resp) {
  const text = await resp.text();
  if (!text) return null;
  try { return JSON.parse(text); } catch (e) { return null; }
}

function apiError(resp, doc) {
  const e = doc && doc.error;
  if (e) return new ApiError(resp.status, e.code, e.message, e.details);
  return new ApiError(resp.status, `HTTP_${resp.status}`, resp.statusText || "request failed");
}

async function once(base, method, url, body) {
  const resp = await fetch(base + url, {
    method,
    headers: headers(body !== undefined),
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    cache: "no-store",
    // No ambient credentials: the Authorization header is the only one, and
    // a 401's Basic challenge then raises no browser login prompt.
    credentials: "omit",
  });
  return { resp, doc: await readJson(resp) };
}

// Retriable refusals another node may not give: try the next one.
const TRY_ANOTHER_NODE = new Set([
  "BROKER_NOT_AVAILABLE", "CONNECTIONS_LIMIT_REACHED", "REQUEST_BYTES_INFLIGHT_LIMIT_REACHED",
  "RAFT_STOPPED", "STREAMS_LIMIT_REACHED",
]);

async function api(method, path, options) {
  const { body, query } = options || {};
  const qs = query ? new URLSearchParams(Object.entries(query).filter(([, v]) => v !== undefined && v !== null && v !== "")).toString() : "";
  const url = path + (qs ? `?${qs}` : "");
  const reads = method === "GET";
  let last = null;
  for (const base of nodeOrder()) {
    let got;
    try {
      got = await once(base, method, url, body);
    } catch (exc) {
      // A write that timed out may have been done: do not send it again.
      if (!reads && exc && exc.name === "TimeoutError") {
        throw new ApiError(0, "REQUEST_TIMED_OUT", `${base} did not answer in time: the outcome is unknown`);
      }
      last = new ApiError(0, "NODE_UNREACHABLE", `${base} did not answer (${exc && exc.name})`);
      continue; // this node is down: the next one
    }
    setCurrent(base);
    let { resp, doc } = got;
    if (resp.status === 421 && doc && doc.error) {
      // Not the leader / coordinator: the answer names the node that is.
      const d = doc.error.details || {};
      const to = d.leader_url || d.coordinator_url;
      if (to) {
        try { ({ resp, doc } = await once(to, method, url, body)); } catch (exc) { last = apiError(resp, doc); continue; }
      }
    }
    if (resp.ok) { noteSignedIn(); return doc; }
    const err = apiError(resp, doc);
    if (resp.status === 401) needSignIn(err);
    if (resp.status === 503 && TRY_ANOTHER_NODE.has(err.code)) { last = err; continue; }
    throw err;
  }
  throw last || new ApiError(0, "NODE_UNREACHABLE", "no node answered");
}

function setCurrent(base) {
  if (state.current !== base) {
    state.current = base;
  }
  const n = document.getElementById("node");
  n.textContent = `via ${base}`;
}

function noteSignedIn() {
  const b = document.getElementById("banner");
  if (b.dataset.kind === "auth") { b.dataset.kind = ""; banner(null); }
}

function needSignIn(err) {
  banner(el("span", {}, `Sign-in needed (${(err.details && err.details.reason) || err.code}). `,
    el("a", { href: "#/signin" }, "Sign in")), true);
  document.getElementById("banner").dataset.kind = "auth";
}

function nodesFrom(cluster) {
  const urls = [];
  for (const b of cluster.brokers || []) {
    for (const url of Object.values(b.endpoints || {})) {
      if (/^https?:\/\//.test(url)) urls.push(url.replace(/\/+$/, ""));
    }
  }
  const own = location.origin;
  state.nodes = [own, ...urls.filter((u) => u !== own)];
  state.nodesReadAt = Date.now();
}

async function refreshNodes(force) {
  if (!force && Date.now() - state.nodesReadAt < NODES_REFRESH_MS) return;
  try { nodesFrom(await api("GET", "/v1/cluster")); } catch (e) { /* keep the list we have */ }
}

// -- polling bound to the page ----------------------------------------------
function every(ms, fn) {
  const gen = state.generation;
  let timer = null;
  const tick = async () => {
    if (gen !== state.generation) return;
    try { await fn(); } finally {
      if (gen === state.generation) timer = setTimeout(tick, ms);
    }
  };
  tick();
  return () => clearTimeout(timer);
}

function alive(gen) { return gen === state.generation; }

// -- pages ------------------------------------------------------------------
function page(title, ...children) {
  const main = document.getElementById("main");
  main.replaceChildren(el("h1", {}, title), ...children);
  return main;
}

function pageCluster() {
  const data = el("div", { id: "cluster" });
  page("Cluster", data);
  every(POLL_MS, async () => {
    try {
      const c = await api("GET", "/v1/cluster");
      nodesFrom(c);
      const raft = c.raft || {};
      const facts = [
        ["Cluster id", c.cluster_id],
        ["Active controller", c.active_controller === null ? "none" : `node ${c.active_controller}`],
        ["Raft term", raft.term],
        ["Answered by", `node ${c.node_id} (${raft.role}, commit index ${raft.commit_index})`],
        ["Quorum", raft.has_quorum ? "yes" : "no"],
        ["Voters", (raft.voters || []).length],
        ["Metadata offset", c.metadata_offset],
        ["Topics you may see", c.topics],
      ];
      const brokers = (c.brokers || []).map((b) => el("tr", { class: b.fenced ? "offline" : null, "data-broker": b.id },
        num(b.id),
        el("td", {}, b.fenced ? tag("fenced", "bad") : tag("unfenced", "ok")),
        el("td", {}, b.state),
        el("td", {}, b.rack || "—"),
        num(b.epoch),
        el("td", {}, Object.values(b.endpoints || {}).join(", ")),
        el("td", {}, b.id === c.active_controller ? tag("controller", "muted") : ""),
      ));
      data.replaceChildren(
        el("dl", { class: "kv" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", { "data-fact": k }, v)])),
        el("h2", {}, "Brokers"),
        table(["Id", "Fenced", "State", "Rack", { label: "Epoch", num: true }, "Endpoints", ""], brokers, { id: "brokers" }),
      );
    } catch (err) { showError(data, err); }
  });
}

function health(description) {
  let urp = 0, offline = 0;
  for (const p of description.partitions || []) {
    if (p.offline || p.leader === null || p.leader < 0) offline += 1;
    else if ((p.isr || []).length < (p.replicas || []).length) urp += 1;
  }
  return { urp, offline };
}

function healthTags(h) {
  const tags = [];
  if (h.offline) tags.push(tag(`${h.offline} offline`, "bad"));
  if (h.urp) tags.push(tag(`${h.urp} under-replicated`, "warn"));
  if (!tags.length) tags.push(tag("healthy", "ok"));
  return tags;
}

function parseConfigs(text) {
  const configs = {};
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i < 1) throw new Error(`config line "${t}" is not key=value`);
    configs[t.slice(0, i).trim()] = t.slice(i + 1).trim();
  }
  return configs;
}

function pageTopics() {
  const list = el("div", { id: "topics" });
  const result = el("div", { class: "result" });
  const form = el("form", { class: "card", id: "create-topic" },
    el("h2", {}, "Create a topic"),
    el("div", { class: "toolbar" },
      el("label", {}, "Name", el("input", { name: "name", required: true, pattern: "[a-zA-Z0-9._\\-]+", maxlength: 249 })),
      el("label", {}, "Partitions", el("input", { name: "partitions", type: "number", min: 1, value: 3 })),
      el("label", {}, "Replication factor", el("input", { name: "replication_factor", type: "number", min: 1, value: 3 })),
    ),
    el("label", {}, "Configs (key=value per line, optional)", el("textarea", { name: "configs", rows: 2 })),
    el("div", {}, el("button", { type: "submit" }, "Create")),
    result,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    try {
      const body = {
        name: f.get("name"),
        partitions: Number(f.get("partitions")),
        replication_factor: Number(f.get("replication_factor")),
        configs: parseConfigs(f.get("configs") || ""),
      };
      await api("POST", "/v1/topics", { body });
      result.replaceChildren(el("span", { class: "ok", "data-created": body.name }, `Created ${body.name}.`));
      form.reset();
      refresh();
    } catch (err) { showError(result, err); }
  });
  page("Topics", list, form);
  const refresh = async () => {
    try {
      const doc = await api("GET", "/v1/topics");
      const topics = (doc.topics || []).slice().sort((a, b) => a.name.localeCompare(b.name));
      const described = await Promise.all(topics.slice(0, TOPICS_DESCRIBED_MAX).map((t) =>
        api("GET", `/v1/topics/${encodeURIComponent(t.name)}`).catch(() => null)));
      const rows = topics.map((t, i) => {
        const d = described[i];
        const h = d ? health(d) : null;
        const del = el("button", { class: "secondary", type: "button", "data-delete": t.name }, "Delete");
        del.addEventListener("click", async () => {
          if (del.dataset.armed !== "1") { del.dataset.armed = "1"; del.textContent = "Confirm delete"; del.className = "danger"; return; }
          try { await api("DELETE", `/v1/topics/${encodeURIComponent(t.name)}`); refresh(); } catch (err) { showError(result, err); }
        });
        return el("tr", { class: h && h.offline ? "offline" : h && h.urp ? "urp" : null, "data-topic": t.name },
          el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(t.name)}` }, t.name)),
          num(t.partitions), num(t.replication_factor),
          el("td", {}, h ? healthTags(h) : i < TOPICS_DESCRIBED_MAX ? tag("unknown", "muted") : "not described"),
          el("td", {}, del));
      });
      list.replaceChildren(rows.length
        ? table(["Topic", { label: "Partitions", num: true }, { label: "Replication", num: true }, "Health", ""], rows, { id: "topic-list" })
        : el("p", { class: "muted" }, "No topics (or none you may see)."));
    } catch (err) { showError(list, err); }
  };
  every(TOPICS_POLL_MS, refresh);
}

function pageTopic(name) {
  const gen = state.generation;
  const status = el("div", { class: "toolbar", id: "topic-status" });
  const parts = el("div", { id: "partitions" });
  const configs = el("div", { id: "configs" });
  const produced = el("div", { class: "result", id: "produce-result" });
  const form = el("form", { class: "card", id: "produce" },
    el("h2", {}, "Produce a record"),
    el("div", { class: "toolbar" },
      el("label", {}, "Key (optional)", el("input", { name: "key" })),
      el("label", {}, "Partition (optional)", el("input", { name: "partition", type: "number", min: 0 })),
      el("label", {}, "Value format", el("select", { name: "value_format" },
        el("option", { value: "json" }, "json"), el("option", { value: "string" }, "string"))),
    ),
    el("label", {}, "Value", el("textarea", { name: "value", rows: 3 }, "{\"hello\": \"world\"}")),
    el("div", {}, el("button", { type: "submit" }, "Produce")),
    produced,
  );
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = new FormData(form);
    try {
      const format = f.get("value_format");
      const raw = f.get("value");
      const record = { value: format === "json" ? JSON.parse(raw) : raw };
      if (f.get("key")) record.key = f.get("key");
      if (f.get("partition") !== "") record.partition = Number(f.get("partition"));
      const doc = await api("POST", `/v1/topics/${encodeURIComponent(name)}/records`, {
        query: { acks: "all" }, body: { value_format: format, records: [record] },
      });
      const o = doc.offsets[0];
      produced.replaceChildren(o.error
        ? el("span", { class: "error" }, `${o.error.code}: ${o.error.message}`)
        : el("span", { "data-produced": `${o.partition}:${o.offset}` }, `Written to partition ${o.partition} at offset ${o.offset}.`));
    } catch (err) { showError(produced, err); }
  });
  page(`Topic ${name}`, status,
    el("div", { class: "toolbar" },
      el("a", { href: `#/tail/${encodeURIComponent(name)}` }, "Live tail"), " ",
      el("a", { href: "#/topics" }, "All topics")),
    el("h2", {}, "Partitions"), parts,
    el("div", { class: "grid2" }, el("div", {}, el("h2", {}, "Configs"), configs), form));
  every(POLL_MS, async () => {
    try {
      const d = await api("GET", `/v1/topics/${encodeURIComponent(name)}`);
      if (!alive(gen)) return;
      status.replaceChildren(...healthTags(health(d)), el("span", { class: "muted" }, `topic id ${d.topic_id || "—"}`));
      const rows = (d.partitions || []).map((p) => {
        const offline = p.offline || p.leader === null || p.leader < 0;
        const urp = !offline && (p.isr || []).length < (p.replicas || []).length;
        return el("tr", { class: offline ? "offline" : urp ? "urp" : null, "data-partition": p.partition },
          num(p.partition),
          el("td", { "data-col": "leader" }, offline ? tag("none", "bad") : String(p.leader)),
          num(p.leader_epoch),
          el("td", { "data-col": "replicas" }, (p.replicas || []).map((r, i) => [
            i ? ", " : "",
            // A replica out of the ISR is struck through.
            (p.isr || []).includes(r) ? String(r) : el("span", { class: "out", title: "not in the ISR" }, String(r)),
          ])),
          el("td", { "data-col": "isr" }, (p.isr || []).join(", ")),
          num(p.log_start_offset), num(p.high_watermark), num(p.log_end_offset),
          el("td", { class: "num" }, bytes(p.size_bytes)),
          el("td", {}, el("a", { href: `#/topics/${encodeURIComponent(name)}/partitions/${p.partition}` }, "records")));
      });
      parts.replaceChildren(table(["Partition", "Leader", { label: "Epoch", num: true }, "Replicas", "ISR",
        { label: "Log start", num: true }, { label: "HW", num: true }, { label: "Log end", num: true },
        { label: "Size", num: true }, ""], rows, { id: "partition-table" }));
      if (d.configs) {
        const keys = Object.keys(d.configs).sort();
        configs.replaceChildren(keys.length
          ? table(["Config", "Value"], keys.map((k) => el("tr", {}, el("td", {}, k), el("td", {}, String(d.configs[k])))))
          : el("p", { class: "muted" }, "No configs set: the broker's defaults apply."));
      } else {
        configs.replaceChildren(el("p", { class: "muted" }, "Configs are shown with DESCRIBE_CONFIGS on the topic."));
      }
    } catch (err) { showError(parts, err); }
  });
}

function renderValue(record, field) {
  const v = record[field];
  if (v === null || v === undefined) return el("span", { class: "muted" }, "null");
  if (record[`${field}_encoding`] === "base64") return el("pre", {}, `base64: ${v}`);
  if (typeof v === "object") return el("pre", {}, JSON.stringify(v, null, 2));
  return el("pre", {}, String(v));
}

function recordRows(records) {
  return records.map((r) => el("tr", { "data-offset": r.offset },
    num(r.offset), el("td", {}, when(r.timestamp)), el("td", {}, renderValue(r, "key")),
    el("td", {}, renderValue(r, "value")),
    el("td", {}, (r.headers || []).map((h) => el("div", {}, `${h.key}: ${h.value}`)))));
}

const RECORD_HEADERS = [{ label: "Offset", num: true }, "Timestamp", "Key", "Value", "Headers"];

function pageRecords(name, partition) {
  const base = `/v1/topics/${encodeURIComponent(name)}/partitions/${partition}`;
  const out = el("div", { id: "records" });
  const info = el("div", { class: "muted" });
  const offsetInput = el("input", { name: "offset", type: "number", min: 0 });
  const timeInput = el("input", { name: "time", type: "datetime-local", step: 1 });
  const sizeInput = el("input", { name: "max_records", type: "number", min: 1, max: 500, value: RECORDS_PAGE_DEFAULT });
  let next = null;
  const show = async (offset) => {
    try {
      const doc = await api("GET", `${base}/records`, { query: { offset, max_records: sizeInput.value, format: "auto" } });
      offsetInput.value = offset;
      next = doc.next_offset;
      info.textContent = `log start ${doc.log_start_offset}, high watermark ${doc.high_watermark}; showing from ${offset}`;
      out.replaceChildren(doc.records.length
        ? table(RECORD_HEADERS, recordRows(doc.records), { id: "record-table" })
        : el("p", { class: "muted" }, "No records from this offset (below the high watermark)."));
    } catch (err) { showError(out, err); }
  };
  const byOffset = el("form", { class: "inline", id: "by-offset" },
    el("label", {}, "Offset", offsetInput), el("label", {}, "Records", sizeInput),
    el("button", { type: "submit" }, "Go"),
    el("button", { type: "button", class: "secondary", onclick: () => show(Math.max(0, Number(offsetInput.value) - Number(sizeInput.value))) }, "Previous"),
    el("button", { type: "button", class: "secondary", onclick: () => next !== null && show(next) }, "Next"));
  byOffset.addEventListener("submit", (ev) => { ev.preventDefault(); show(Number(offsetInput.value || 0)); });
  const byTime = el("form", { class: "inline", id: "by-time" },
    el("label", {}, "First record at or after (your local time)", timeInput),
    el("button", { type: "submit" }, "Find"));
  byTime.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const ms = new Date(timeInput.value).getTime();
      if (isNaN(ms)) throw new Error("pick a date and time");
      const o = await api("GET", `${base}/offsets`, { query: { timestamp: ms } });
      const found = o.offset_for_timestamp;
      if (!found) {
        out.replaceChildren(el("p", { class: "muted" }, `No record at or after ${when(ms)}.`));
      } else { await show(found.offset); }
    } catch (err) { showError(out, err); }
  });
  page(`Records of ${name}-${partition}`,
    el("div", {}, el("a", { href: `#/topics/${encodeURIComponent(name)}` }, `Back to ${name}`)),
    byOffset, byTime, info, out);
  (async () => {
    try {
      const o = await api("GET", `${base}/offsets`);
      await show(Math.max(o.earliest, o.latest - Number(sizeInput.value)));
    } catch (err) { showError(out, err); }
  })();
}

// -- live tail over the SSE stream (fetch, so that it can carry Authorization) --
function parseEvents(buffer, onEvent) {
  // Events end with a blank line; returns what is left of an unfinished one.
  const text = buffer.replace(/\r\n?/g, "\n");
  const blocks = text.split("\n\n");
  const rest = blocks.pop();
  for (const block of blocks) {
    const ev = { event: "message", data: [], id: null };
    for (const line of block.split("\n")) {
      if (!line || line.startsWith(":")) continue;
      const i = line.indexOf(":");
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? "" : line.slice(i + 1).replace(/^ /, "");
      if (field === "data") ev.data.push(value);
      else if (field === "event") ev.event = value;
      else if (field === "id") ev.id = value;
    }
    onEvent(ev);
  }
  return rest;
}

function pageTail(name) {
  const gen = state.generation;
  const status = el("span", { class: "tail-status", id: "tail-status" }, "connecting…");
  const body = el("tbody", {});
  const startAt = el("select", { name: "offset" },
    el("option", { value: "latest" }, "new records only"), el("option", { value: "earliest" }, "from the beginning"));
  let controller = null;
  let cursor = null; // the stream's last id: where a reconnect resumes
  let shown = 0;
  const stop = () => { if (controller) controller.abort(); controller = null; };
  const add = (record) => {
    body.prepend(...recordRows([record]).map((row) => { row.prepend(num(record.partition)); return row; }));
    shown += 1;
    while (body.children.length > TAIL_RECORDS_MAX) body.lastChild.remove();
  };
  const run = async () => {
    stop();
    const mine = new AbortController();
    controller = mine;
    while (alive(gen) && controller === mine) {
      const base = nodeOrder()[0];
      const query = new URLSearchParams({ format: "auto", offset: startAt.value });
      if (cursor) query.set("last_event_id", cursor);
      try {
        const resp = await fetch(`${base}/v1/topics/${encodeURIComponent(name)}/stream?${query}`, {
          headers: headers(false), signal: mine.signal, cache: "no-store", credentials: "omit",
        });
        if (!resp.ok) {
          const err = apiError(resp, await readJson(resp));
          if (resp.status === 401) needSignIn(err);
          if (!(err.code === "BROKER_NOT_AVAILABLE" || err.code === "STREAMS_LIMIT_REACHED")) { status.textContent = `stopped: ${errorText(err)}`; return; }
          throw err;
        }
        setCurrent(base);
        status.textContent = `live from ${base}`;
        status.dataset.live = "1";
        const reader = resp.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        let failed = null;
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          buffer = parseEvents(buffer + decoder.decode(value, { stream: true }), (ev) => {
            if (ev.id !== null) cursor = ev.id;
            if (ev.event === "error") failed = JSON.parse(ev.data.join("\n")).error;
            else if (ev.event === "message" && ev.data.length) add(JSON.parse(ev.data.join("\n")));
          });
          if (buffer.length > SSE_BUFFER_CHARS_MAX) throw new Error("an event too large for the console");
          if (failed) break;
        }
        if (failed && !failed.retriable) { status.textContent = `stopped: ${failed.code}: ${failed.message}`; status.dataset.live = ""; return; }
      } catch (exc) {
        if (mine.signal.aborted) return;
        // The node went away (or refused for now): the next node resumes at the cursor.
        const down = nodeOrder()[0];
        const others = state.nodes.filter((n) => n !== down);
        if (others.length) state.current = others[0];
      }
      status.textContent = "reconnecting…";
      status.dataset.live = "";
      await new Promise((resolve) => setTimeout(resolve, TAIL_RETRY_MS));
    }
  };
  const restart = el("button", { type: "button", id: "tail-restart", onclick: () => { cursor = null; body.replaceChildren(); run(); } }, "Restart");
  const stopButton = el("button", { type: "button", class: "secondary", id: "tail-stop", onclick: () => { stop(); status.textContent = "stopped"; status.dataset.live = ""; } }, "Stop");
  page(`Live tail of ${name}`,
    el("div", {}, el("a", { href: `#/topics/${encodeURIComponent(name)}` }, `Back to ${name}`)),
    el("div", { class: "toolbar" }, el("label", {}, "Start", startAt), restart, stopButton, status),
    el("p", { class: "muted" }, `Newest first; the last ${TAIL_RECORDS_MAX} records are kept. Follows leader changes and node failures without losing its place.`),
    table([{ label: "Partition", num: true }, ...RECORD_HEADERS], [], { id: "tail-table" }));
  document.getElementById("tail-table").replaceChild(body, document.querySelector("#tail-table tbody"));
  state.onLeave = stop;
  run();
}

function pageGroups() {
  const list = el("div", { id: "groups" });
  page("Consumer groups", list);
  every(POLL_MS, async () => {
    try {
      const doc = await api("GET", "/v1/groups");
      const rows = (doc.groups || []).map((g) => el("tr", { "data-group": g.group_id },
        el("td", {}, el("a", { href: `#/groups/${encodeURIComponent(g.group_id)}` }, g.group_id)),
        el("td", {}, g.state), num(g.members), num(g.coordinator_id)));
      const notes = [];
      if ((doc.unreachable_brokers || []).length) notes.push(el("p", { class: "error" }, `Brokers that did not answer (their groups are missing): ${doc.unreachable_brokers.join(", ")}`));
      if ((doc.loading_partitions || []).length) notes.push(el("p", { class: "muted" }, `Coordinator partitions still loading: ${doc.loading_partitions.join(", ")}`));
      list.replaceChildren(...notes, rows.length
        ? table(["Group", "State", { label: "Members", num: true }, { label: "Coordinator", num: true }], rows, { id: "group-list" })
        : el("p", { class: "muted" }, "No groups (or none you may see)."));
    } catch (err) { showError(list, err); }
  });
}

function assignmentText(assigned) {
  return Object.entries(assigned || {}).map(([t, ps]) => `${t}: ${ps.join(", ")}`).join("; ") || "—";
}

function pageGroup(id) {
  const path = `/v1/groups/${encodeURIComponent(id)}`;
  const facts = el("div", {});
  const members = el("div", { id: "members" });
  const offsets = el("div", { id: "group-offsets" });
  const result = el("div", { class: "result", id: "reset-result" });
  const strategy = el("select", { name: "strategy" }, ["earliest", "latest", "timestamp", "offset"].map((s) => el("option", { value: s }, s)));
  const timeInput = el("input", { name: "time", type: "datetime-local", step: 1 });
  const offsetInput = el("input", { name: "offset", type: "number", min: 0 });
  const topicsInput = el("input", { name: "topics", placeholder: "topic-a, topic-b" });
  const reset = async (dryRun) => {
    try {
      const body = { strategy: strategy.value, topics: topicsInput.value.split(",").map((t) => t.trim()).filter(Boolean), dry_run: dryRun };
      if (body.strategy === "timestamp") body.timestamp = new Date(timeInput.value).getTime();
      if (body.strategy === "offset") body.offset = Number(offsetInput.value);
      const doc = await api("POST", `${path}/offsets/reset`, { body });
      const rows = doc.offsets.map((o) => el("tr", {}, el("td", {}, o.topic), num(o.partition),
        dryRun ? num(o.committed_offset) : null, num(o.offset)));
      result.replaceChildren(el("p", {}, dryRun ? "Dry run: nothing was changed." : "Offsets reset."),
        table(dryRun ? ["Topic", { label: "Partition", num: true }, { label: "Committed", num: true }, { label: "Would be", num: true }]
          : ["Topic", { label: "Partition", num: true }, { label: "Offset", num: true }], rows, { id: dryRun ? "dry-run" : "reset" }));
    } catch (err) { showError(result, err); }
  };
  const form = el("form", { class: "card", id: "reset-offsets" },
    el("h2", {}, "Reset offsets (group without members)"),
    el("div", { class: "toolbar" }, el("label", {}, "Strategy", strategy), el("label", {}, "Time (your local time)", timeInput),
      el("label", {}, "Offset", offsetInput), el("label", {}, "Topics", topicsInput)),
    el("div", { class: "toolbar" },
      el("button", { type: "button", class: "secondary", id: "dry-run-button", onclick: () => reset(true) }, "Dry run"),
      el("button", { type: "button", class: "danger", id: "reset-button", onclick: () => reset(false) }, "Reset")),
    result);
  page(`Group ${id}`, el("div", {}, el("a", { href: "#/groups" }, "All groups")), facts,
    el("h2", {}, "Members"), members, el("h2", {}, "Committed offsets and lag"), offsets, form);
  let topicsFilled = false;
  every(POLL_MS, async () => {
    try {
      const g = await api("GET", path);
      facts.replaceChildren(el("dl", { class: "kv" },
        el("dt", {}, "State"), el("dd", { "data-fact": "state" }, g.state),
        el("dt", {}, "Group epoch"), el("dd", {}, g.group_epoch ?? "—"),
        el("dt", {}, "Assignment epoch"), el("dd", {}, g.assignment_epoch ?? "—"),
        el("dt", {}, "Assignor"), el("dd", {}, g.assignor ?? "—")));
      members.replaceChildren((g.members || []).length
        ? table(["Member", "Client", "Host", "Subscribed", { label: "Epoch", num: true }, "State", "Assigned", "Pending revocation"],
          g.members.map((m) => el("tr", {}, el("td", {}, m.member_id), el("td", {}, m.client_id || "—"), el("td", {}, m.client_host || "—"),
            el("td", {}, (m.subscribed_topics || []).join(", ")), num(m.member_epoch), el("td", {}, m.member_state),
            el("td", {}, assignmentText(m.assigned)), el("td", {}, assignmentText(m.pending_revocation)))))
        : el("p", { class: "muted" }, "No members."));
      const rows = (g.offsets || []).map((o) => el("tr", { class: o.lag ? "urp" : null },
        el("td", {}, o.topic), num(o.partition), num(o.committed_offset), num(o.high_watermark),
        el("td", { class: "num", "data-col": "lag" }, o.lag === null || o.lag === undefined ? "—" : String(o.lag)),
        el("td", {}, o.owner || "—")));
      offsets.replaceChildren(rows.length
        ? table(["Topic", { label: "Partition", num: true }, { label: "Committed", num: true }, { label: "HW", num: true }, { label: "Lag", num: true }, "Owner"], rows, { id: "lag-table" })
        : el("p", { class: "muted" }, "No committed offsets."));
      if (!topicsFilled && !topicsInput.value) {
        topicsInput.value = [...new Set((g.offsets || []).map((o) => o.topic))].join(", ");
        topicsFilled = true;
      }
    } catch (err) { showError(facts, err); }
  });
}

// -- sign in ------------------------------------------------------------------
function jwtSubject(token) {
  try { return JSON.parse(atob(token.split(".")[1].replace(/-/g, "+").replace(/_/g, "/"))).sub || "token"; } catch (e) { return "token"; }
}

function setAuth(auth) {
  state.auth = auth;
  // A bearer token lives in this tab's sessionStorage (gone when the tab
  // closes); a password is kept in memory only, never stored.
  if (auth && auth.kind === "bearer") sessionStorage.setItem("lograft.bearer", auth.token);
  else sessionStorage.removeItem("lograft.bearer");
  document.getElementById("who").textContent = auth ? `signed in: ${auth.who}` : "";
}

function pageSignIn() {
  const result = el("div", { class: "result", id: "signin-result" });
  const kind = el("select", { name: "kind", id: "signin-kind" },
    el("option", { value: "password" }, "Username and password (HTTP Basic; needs TLS)"),
    el("option", { value: "bearer" }, "Bearer token (JWT)"));
  const token = el("textarea", { name: "token", rows: 4, autocomplete: "off" });
  const user = el("input", { name: "username", autocomplete: "username" });
  const password = el("input", { name: "password", type: "password", autocomplete: "current-password" });
  const form = el("form", { class: "card", id: "signin" },
    el("label", {}, "Sign in with", kind),
    el("label", {}, "Username", user), el("label", {}, "Password", password),
    el("label", {}, "Bearer token", token),
    el("div", { class: "toolbar" }, el("button", { type: "submit" }, "Sign in"),
      el("button", { type: "button", class: "secondary", onclick: () => { setAuth(null); result.textContent = "Signed out."; } }, "Sign out")),
    result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const auth = kind.value === "bearer"
      ? { kind: "bearer", token: token.value.trim(), header: `Bearer ${token.value.trim()}`, who: jwtSubject(token.value.trim()) }
      : { kind: "password", header: `Basic ${btoa(unescape(encodeURIComponent(`${user.value}:${password.value}`)))}`, who: user.value };
    const before = state.auth;
    state.auth = auth;
    try {
      nodesFrom(await api("GET", "/v1/cluster"));
      setAuth(auth);
      password.value = "";
      result.replaceChildren(el("span", { "data-signed-in": auth.who }, `Signed in as ${auth.who}.`));
    } catch (err) { state.auth = before; showError(result, err); }
  });
  page("Sign in", el("p", { class: "muted" },
    "The console calls the API with these credentials and shows what they may see. ",
    "A password is kept in this page's memory only (sign in again after a reload); a token in this tab's session storage."), form);
}

// -- routing ------------------------------------------------------------------
function route() {
  state.generation += 1;
  if (state.onLeave) { state.onLeave(); state.onLeave = null; }
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const [section, name, sub, partition] = parts;
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("active", a.dataset.nav === section);
  refreshNodes(false);
  if (section === "topics" && name && sub === "partitions") return pageRecords(name, Number(partition));
  if (section === "topics" && name) return pageTopic(name);
  if (section === "topics") return pageTopics();
  if (section === "tail" && name) return pageTail(name);
  if (section === "groups" && name) return pageGroup(name);
  if (section === "groups") return pageGroups();
  if (section === "signin") return pageSignIn();
  return pageCluster();
}

function start() {
  const saved = sessionStorage.getItem("lograft.bearer");
  setAuth(saved ? { kind: "bearer", token: saved, header: `Bearer ${saved}`, who: jwtSubject(saved) } : null);
  window.addEventListener("hashchange", route);
  refreshNodes(true);
  route();
}

document.addEventListener("DOMContentLoaded", start);
