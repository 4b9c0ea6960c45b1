// Magnetar web console: every figure comes from the broker's admin REST API, called with
// the token of this browser tab (sessionStorage). Text from the broker (names, payloads,
// properties) only ever becomes text nodes, never markup.
"use strict";
(() => {
  const main = document.getElementById("main");
  const modal = document.getElementById("modal");
  const AUTH_KEY = "magnetar.console.auth";
  const POLL_MS = 2000;
  const HASH_SPACE = 65536;
  const COLORS = ["#3056d3", "#2e9e6b", "#d98b1c", "#8e44ad", "#16a2b8", "#b5485d", "#6d7b2b", "#c2549d"];
  const RETRY_MS = 2000;
  let timers = [];
  let streams = [];
  let charts = [];
  const inflight = new Set();
  let generation = 0;

  // -- DOM --------------------------------------------------------------------------------------
  const PROPS = new Set(["className", "id", "type", "value", "placeholder", "title", "hidden", "disabled",
    "min", "max", "step", "name", "checked", "colSpan", "htmlFor", "autocomplete"]);

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(props || {})) {
      if (value === undefined || value === null) continue;
      if (PROPS.has(key)) node[key] = value;
      else if (key === "href") node.setAttribute("href", safeHref(value));
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else if (key === "data") for (const [k, v] of Object.entries(value)) node.dataset[k] = String(v);
      else throw new Error("unsupported property " + key);
    }
    append(node, children);
    return node;
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function safeHref(value) {
    const text = String(value);
    return text.startsWith("#/") ? text : "#/overview";
  }

  function fill(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }

  // -- formatting -------------------------------------------------------------------------------
  const fmtInt = (n) => (n === undefined || n === null ? "-" : Math.round(Number(n)).toLocaleString("en-US"));
  const fmtRate = (n) => (n === undefined || n === null ? "-" : Number(n).toFixed(2));
  function fmtBytes(n) {
    if (n === undefined || n === null || n < 0) return "-";
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let value = Number(n);
    let unit = 0;
    while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit += 1; }
    return (unit === 0 ? String(value) : value.toFixed(1)) + " " + units[unit];
  }
  const fmtTime = (ms) => (!ms || ms <= 0 ? "-" : new Date(Number(ms)).toISOString());

  function card(label, value, field) {
    return el("div", { className: "card", data: { field: field || label } },
      el("div", { className: "label" }, label), el("div", { className: "value" }, value));
  }

  function table(columns, rows, opts) {
    const head = el("tr", {}, columns.map((c) => el("th", { className: c.num ? "num" : "" }, c.label)));
    const body = rows.map((row) => row instanceof Node ? row : el("tr", {},
      columns.map((c) => el("td", { className: c.num ? "num" : "" }, c.render ? c.render(row) : row[c.key]))));
    return el("table", { id: opts && opts.id }, el("thead", {}, head), el("tbody", {}, body));
  }

  // -- topic names and paths ----------------------------------------------------------------------
  const enc = encodeURIComponent;
  function parseTopic(full) {
    const m = /^(persistent|non-persistent):\/\/([^/]+)\/([^/]+)\/(.+)$/.exec(full);
    if (!m) return null;
    return { domain: m[1], tenant: m[2], namespace: m[3], local: m[4], full };
  }
  function topicFromParts(parts) {
    const [domain, tenant, namespace, local] = parts;
    return { domain, tenant, namespace, local, full: `${domain}://${tenant}/${namespace}/${local}` };
  }
  const segs = (t) => [t.domain, t.tenant, t.namespace, t.local];
  const topicPath = (t) => `/admin/v2/${segs(t).map(enc).join("/")}`;
  const schemaPath = (t) => `/admin/v2/schemas/${enc(t.tenant)}/${enc(t.namespace)}/${enc(t.local)}`;
  const subPath = (t, sub) => `${topicPath(t)}/subscription/${enc(sub)}`;
  const topicHref = (t) => "#/topic/" + segs(t).map(enc).join("/");
  const subHref = (t, sub) => "#/subscription/" + segs(t).map(enc).join("/") + "/" + enc(sub);
  const messagesHref = (t, query) => "#/messages/" + segs(t).map(enc).join("/") + (query ? "?" + query : "");
  const partitionOf = (t, i) => ({ ...t, local: `${t.local}-partition-${i}`, full: `${t.full}-partition-${i}` });

  // -- REST -------------------------------------------------------------------------------------
  class ApiError extends Error {
    constructor(status, reason) { super(reason); this.status = status; this.reason = reason; }
  }

  function savedAuth() {
    try { return JSON.parse(sessionStorage.getItem(AUTH_KEY) || "null"); } catch (e) { return null; }
  }

  function authHeaders() {
    const auth = savedAuth();
    if (!auth) return {};
    if (auth.kind === "basic") {
      const bytes = new TextEncoder().encode(`${auth.user}:${auth.password}`);
      return { Authorization: "Basic " + btoa(String.fromCharCode(...bytes)) };
    }
    return { Authorization: "Bearer " + auth.token };
  }

  async function request(path, opts) {
    const options = opts || {};
    const headers = { ...authHeaders() };
    let body;
    if (options.body !== undefined) { headers["Content-Type"] = "application/json"; body = JSON.stringify(options.body); }
    const resp = await fetch(path, { method: options.method || "GET", headers, body, credentials: "omit", cache: "no-store",
      signal: options.signal });
    if (!resp.ok) {
      let reason = resp.statusText || `HTTP ${resp.status}`;
      try { const data = await resp.json(); if (data && data.reason) reason = data.reason; } catch (e) { /* not JSON */ }
      if (resp.status === 401 && reason === "Authentication required") {
        needLogin();
      }
      throw new ApiError(resp.status, reason);
    }
    return resp;
  }

  async function api(path, opts) {
    const resp = await request(path, opts);
    if (resp.status === 204) return null;
    const type = resp.headers.get("content-type") || "";
    return type.includes("json") ? resp.json() : resp.text();
  }

  async function allowed(path) {
    try { await request(path); return true; } catch (e) { return false; }
  }

  function banner(error) {
    const reason = error instanceof ApiError ? `${error.status}: ${error.reason}` : String(error && error.message || error);
    return el("div", { className: "banner" }, reason);
  }

  // -- login ------------------------------------------------------------------------------------
  let loginShown = false;
  function needLogin() {
    if (loginShown) return;
    loginShown = true;
    stopPage();
    const kind = el("select", { id: "auth-kind" }, el("option", { value: "token" }, "Token"),
      el("option", { value: "basic" }, "Basic (user and password)"));
    const token = el("input", { id: "auth-token", type: "password", autocomplete: "off", placeholder: "JWT or token" });
    const user = el("input", { id: "auth-user", autocomplete: "off" });
    const password = el("input", { id: "auth-password", type: "password", autocomplete: "off" });
    const basic = el("div", { hidden: true }, el("label", {}, "User"), user, el("label", {}, "Password"), password);
    const tokenBox = el("div", {}, el("label", {}, "Token"), token);
    kind.addEventListener("change", () => { basic.hidden = kind.value !== "basic"; tokenBox.hidden = kind.value === "basic"; });
    const form = el("form", { className: "login", id: "login" },
      el("h1", {}, "Sign in"),
      el("p", { className: "muted" }, "The broker asks for credentials. They are kept for this tab only."),
      el("label", {}, "Method"), kind, tokenBox, basic,
      el("div", { className: "toolbar" }, el("button", { type: "submit", id: "login-submit" }, "Sign in")));
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const auth = kind.value === "basic" ? { kind: "basic", user: user.value, password: password.value }
        : { kind: "token", token: token.value.trim() };
      sessionStorage.setItem(AUTH_KEY, JSON.stringify(auth));
      loginShown = false;
      route();
    });
    fill(main, form);
  }

  document.getElementById("logout").addEventListener("click", () => {
    sessionStorage.removeItem(AUTH_KEY);
    location.hash = "#/overview";
    loginShown = false;
    route();
  });

  // -- confirmations ----------------------------------------------------------------------------
  function confirmAction(title, detail) {
    return new Promise((resolve) => {
      const done = (answer) => { modal.hidden = true; modal.replaceChildren(); resolve(answer); };
      fill(modal, el("div", { className: "dialog", id: "confirm" },
        el("h2", {}, title), el("p", {}, detail),
        el("div", { className: "buttons" },
          el("button", { type: "button", id: "confirm-cancel", onclick: () => done(false) }, "Cancel"),
          el("button", { type: "button", id: "confirm-ok", className: "danger", onclick: () => done(true) }, "Confirm"))));
      modal.hidden = false;
    });
  }

  function actionButton(label, id, title, detail, run, after) {
    return el("button", { type: "button", id, className: "danger", onclick: async () => {
      if (!(await confirmAction(title, detail()))) return;
      stopPage();
      await Promise.allSettled(Array.from(inflight));
      let outcome;
      try {
        await run();
        outcome = el("span", { data: { outcome: "ok" } }, `${label}: done`);
        await (after || route)();
      } catch (e) {
        outcome = el("span", { className: "error", data: { outcome: "error" } }, `${label}: ${e.reason || e.message}`);
        await route();
      }
      const status = document.getElementById("action-status");
      if (status) fill(status, outcome);
    } }, label);
  }

  // -- charts -----------------------------------------------------------------------------------
  function lineChart(container, title, labels, width) {
    const box = el("div", { className: "chart" }, el("div", { className: "title" }, title));
    container.appendChild(box);
    const series = [{}].concat(labels.map((label, i) => ({ label, stroke: COLORS[i % COLORS.length], width: 1.5 })));
    const data = [[]].concat(labels.map(() => []));
    const chart = new uPlot({ width: width || 440, height: 170, series, axes: [{}, { size: 60 }],
      scales: { x: { time: true } }, legend: { live: false } }, data, box);
    charts.push(chart);
    return chart;
  }

  // -- pages ------------------------------------------------------------------------------------
  function stopPage() {
    generation += 1;
    for (const t of timers) { clearInterval(t); clearTimeout(t); }
    timers = [];
    for (const s of streams) s.abort();
    streams = [];
    for (const c of charts) c.destroy();
    charts = [];
  }

  // a page's requests, so an action waits for them before it changes what they read
  function track(promise) {
    inflight.add(promise);
    promise.finally(() => inflight.delete(promise)).catch(() => undefined);
    return promise;
  }

  function every(ms, fn) {
    const mine = generation;
    const run = () => track((async () => { if (mine === generation) await fn(); })());
    timers.push(setInterval(run, ms));
    return run();
  }

  // The live part of a page: the broker's server-sent events at `path` (an event at most once
  // a second, when what it carries changed), read through fetch with this tab's credentials
  // (EventSource sends no Authorization header) and opened again when the broker ends the
  // stream, and closed while the tab is hidden (a browser opens few connections to one
  // host at a time). onEvent(name, data) runs for each event, one at a time; onError(error) for a
  // refusal (then the stream is asked for again RETRY_MS later). Resolves once the first
  // events are drawn, or the first refusal shown.
  function live(path, onEvent, onError) {
    const mine = generation;
    let drawn;
    const first = new Promise((resolve) => { drawn = resolve; });
    const handle = async (block) => {
      let name = "message";
      const data = [];
      for (const line of block.split("\n")) {
        if (line.startsWith("event:")) name = line.slice(6).trim();
        else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      }
      if (!data.length || mine !== generation) return;
      const value = JSON.parse(data.join("\n"));
      if (name === "error") await onError(new ApiError(value.status, value.reason));
      else await onEvent(name, value);
    };
    const open = async () => {
      if (document.hidden) {  // a tab out of sight holds no stream: asked for again when shown
        document.addEventListener("visibilitychange", () => { if (mine === generation) open(); }, { once: true });
        drawn();
        return;
      }
      const controller = new AbortController();
      streams.push(controller);
      main.dataset.streams = String(streams.length);
      try {
        const resp = await request(path, { signal: controller.signal });
        const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
        let text = "";
        for (;;) {
          const { value, done } = await reader.read();
          if (done || mine !== generation) break;
          text += value;
          const blocks = text.split("\n\n");
          text = blocks.pop();
          for (const block of blocks) await track(handle(block));
          drawn();
        }
        if (mine === generation) open();
      } catch (e) {
        if (mine !== generation) { drawn(); return; }
        if (e && e.name === "AbortError") { open(); return; }  // hidden: open() waits for the tab to show
        await track(Promise.resolve(onError(e)));
        drawn();
        timers.push(setTimeout(() => { if (mine === generation) open(); }, RETRY_MS));
      } finally {
        streams = streams.filter((c) => c !== controller);
        main.dataset.streams = String(streams.length);  // the page's open streams, for a look from outside
      }
    };
    open();
    return first;
  }

  document.addEventListener("visibilitychange", () => {
    if (document.hidden) for (const s of streams) s.abort();
  });

  // a link to another broker's console: http(s) only, never script
  function brokerLink(url, text) {
    const node = el("a", {}, text);
    try {
      const parsed = new URL(String(url));
      if (parsed.protocol === "http:" || parsed.protocol === "https:") node.setAttribute("href", parsed.href);
    } catch (e) { /* not a URL: the name alone */ }
    return node;
  }

  function brokerTable(view) {
    const load = (b, key, fmt) => (b.loadReport ? fmt(b.loadReport[key]) : "-");
    const rows = view.brokers.map((b) => el("tr", { data: { broker: b.brokerId } },
      el("td", {}, b.consoleUrl ? brokerLink(b.consoleUrl, b.brokerId) : b.brokerId,
        b.self ? [" ", el("span", { className: "tag" }, "this broker")] : null),
      el("td", { data: { field: "bundles" } }, b.ownedBundles === null ? "-"
        : b.ownedBundles.map((bundle) => el("div", { data: { bundle } }, bundle))),
      el("td", { className: "num", data: { field: "numTopics" } }, load(b, "numTopics", fmtInt)),
      el("td", { className: "num", data: { field: "numProducers" } }, load(b, "numProducers", fmtInt)),
      el("td", { className: "num", data: { field: "numConsumers" } }, load(b, "numConsumers", fmtInt)),
      el("td", { className: "num", data: { field: "msgRateIn" } }, load(b, "msgRateIn", fmtRate)),
      el("td", { className: "num", data: { field: "msgRateOut" } }, load(b, "msgRateOut", fmtRate)),
      el("td", { className: "error" }, b.error || "")));
    const head = el("tr", {}, ["Broker", "Owned bundles", "Topics", "Producers", "Consumers", "Msgs/s in",
      "Msgs/s out", ""].map((label, i) => el("th", { className: i >= 2 && i <= 6 ? "num" : "" }, label)));
    return [el("p", { className: "muted" }, `Cluster ${view.clusterName}: ${view.brokers.length} brokers`),
      el("table", { id: "broker-table" }, el("thead", {}, head), el("tbody", {}, rows))];
  }

  async function clusterSection(box) {
    let view = null;
    try { view = await api("/admin/v2/broker-stats/brokers"); } catch (e) { view = null; }
    if (view && view.clustered) {
      fill(box, brokerTable(view));
      return;
    }
    try {
      const clusters = await api("/admin/v2/clusters");
      const rows = [];
      for (const name of clusters) {
        let brokers = [];
        try { brokers = await api(`/admin/v2/brokers/${enc(name)}`); } catch (e) { brokers = ["(" + e.reason + ")"]; }
        rows.push({ name, brokers: brokers.join(", ") });
      }
      fill(box, table([{ label: "Cluster", key: "name" }, { label: "Active brokers", key: "brokers" }], rows));
    } catch (e) { fill(box, banner(e)); }
  }

  async function overviewPage() {
    const cards = el("div", { className: "cards", id: "totals" });
    const chartsBox = el("div", { className: "charts", id: "rate-charts" });
    const cluster = el("div", { id: "cluster" });
    const tenants = el("div", { id: "tenants" });
    fill(main, el("h1", {}, "Overview"), cards, el("h2", {}, "Rates, last 15 minutes"), chartsBox,
      el("h2", {}, "Cluster"), cluster, el("h2", {}, "Tenants and namespaces"), tenants);
    let msgChart = null;
    let byteChart = null;
    const drawReport = (r) => fill(cards, card("Topics", fmtInt(r.numTopics), "numTopics"), card("Producers", fmtInt(r.numProducers), "numProducers"),
      card("Subscriptions", fmtInt(r.numSubscriptions), "numSubscriptions"),
      card("Consumers", fmtInt(r.numConsumers), "numConsumers"), card("Msgs/s in", fmtRate(r.msgRateIn), "msgRateIn"),
      card("Msgs/s out", fmtRate(r.msgRateOut), "msgRateOut"), card("Bytes/s in", fmtBytes(r.msgThroughputIn), "msgThroughputIn"),
      card("Bytes/s out", fmtBytes(r.msgThroughputOut), "msgThroughputOut"), card("Backlog", fmtInt(r.msgBacklog), "msgBacklog"),
      card("Storage", fmtBytes(r.storageSize), "storageSize"), card("Namespaces", fmtInt(r.numNamespaces), "numNamespaces"));
    const drawHistory = (history) => {
      const samples = history.samples;
      const xs = samples.map((s) => s.timestamp / 1000);
      if (!msgChart) {
        msgChart = lineChart(chartsBox, "Messages per second", ["in", "out"]);
        byteChart = lineChart(chartsBox, "Bytes per second", ["in", "out"]);
        chartsBox.appendChild(el("div", { className: "muted", id: "history-note" }));
      }
      msgChart.setData([xs, samples.map((s) => s.msgRateIn), samples.map((s) => s.msgRateOut)]);
      byteChart.setData([xs, samples.map((s) => s.msgThroughputIn), samples.map((s) => s.msgThroughputOut)]);
      fill(document.getElementById("history-note"),
        `${samples.length} samples, one every ${history.resolutionSeconds} s, kept by the broker for 15 minutes`);
    };
    await live("/admin/v2/console-stream/overview", (name, data) => {
      if (name === "load-report") drawReport(data);
      else if (name === "rate-history") drawHistory(data);
    }, (e) => fill(cards, banner(e)));
    await clusterSection(cluster);
    try {
      const names = await api("/admin/v2/tenants");
      const rows = [];
      for (const tenant of names) {
        let namespaces = [];
        try { namespaces = await api(`/admin/v2/namespaces/${enc(tenant)}`); } catch (e) { namespaces = []; }
        for (const ns of namespaces.length ? namespaces : [null]) rows.push({ tenant, ns });
      }
      const nsPath = (ns) => `/admin/v2/namespaces/${ns.split("/").map(enc).join("/")}`;
      fill(tenants, table([{ label: "Tenant", key: "tenant" }, { label: "Namespace", render: (r) => r.ns || "-" },
        { label: "Actions", render: (r) => (!r.ns ? "" : [
          actionButton("Unload", `unload-ns-${r.ns}`, "Unload namespace", () => `Unload every topic of ${r.ns}? Their clients reconnect.`,
            () => api(nsPath(r.ns) + "/unload", { method: "PUT" })), " ",
          actionButton("Clear backlog", `clear-ns-${r.ns}`, "Clear namespace backlog",
            () => `Acknowledge every message of every subscription in ${r.ns}?`,
            () => api(nsPath(r.ns) + "/clearBacklog", { method: "POST" }))]) }], rows, { id: "tenant-table" }),
      el("div", { id: "action-status" }));
    } catch (e) { fill(tenants, banner(e)); }
  }

  const TOPIC_COLUMNS = [
    { label: "Topic", sort: "name" }, { label: "Msgs/s in", sort: "msgRateIn", num: true },
    { label: "Msgs/s out", sort: "msgRateOut", num: true }, { label: "Backlog", sort: "backlog", num: true },
    { label: "Storage", sort: "storageSize", num: true }, { label: "Producers", sort: "producers", num: true },
    { label: "Subscriptions", sort: "subscriptions", num: true }, { label: "Consumers", sort: "consumers", num: true }];
  const PAGE_SIZE = 50;

  async function topicsPage(params) {
    const search = params.get("search") || "";
    const sort = params.get("sort") || "name";
    const order = params.get("order") || (sort === "name" ? "asc" : "desc");
    const page = Math.max(0, parseInt(params.get("page") || "0", 10) || 0);
    const go = (changes) => {
      const next = new URLSearchParams({ search, sort, order, page: String(page) });
      for (const [k, v] of Object.entries(changes)) next.set(k, v);
      location.hash = "#/topics?" + next.toString();
    };
    const input = el("input", { id: "topic-search", type: "search", value: search, placeholder: "Search topics" });
    let debounce = null;
    input.addEventListener("input", () => {
      clearTimeout(debounce);
      debounce = setTimeout(() => go({ search: input.value, page: "0" }), 300);
    });
    const body = el("div", { id: "topics" });
    const create = el("div", { id: "create-topic" });
    fill(main, el("h1", {}, "Topics"), el("div", { className: "toolbar" }, input), body, create,
      el("div", { id: "action-status" }));
    if (search) { input.focus(); input.setSelectionRange(search.length, search.length); }
    const query = new URLSearchParams({ search, sort, order, offset: String(page * PAGE_SIZE), limit: String(PAGE_SIZE) });
    await live("/admin/v2/console-stream/topics-page?" + query.toString(), (name, answer) => {
      try {
        const head = el("tr", {}, TOPIC_COLUMNS.map((c) => el("th", {
          className: "sortable" + (c.num ? " num" : ""), data: { sort: c.sort },
          onclick: () => go({ sort: c.sort, order: sort === c.sort && order === "desc" ? "asc" : "desc", page: "0" }),
        }, c.label, sort === c.sort ? (order === "desc" ? " ▼" : " ▲") : "")));
        const rows = [];
        for (const row of answer.topics) {
          const t = parseTopic(row.name);
          const nameCell = el("td", {}, el("a", { href: topicHref(t), data: { topic: row.name } }, row.name),
            row.partitions ? [" ", el("span", { className: "tag" }, `${row.partitions} partitions`)] : null);
          rows.push(el("tr", { data: { row: row.name } }, nameCell, el("td", { className: "num" }, fmtRate(row.msgRateIn)),
            el("td", { className: "num" }, fmtRate(row.msgRateOut)), el("td", { className: "num", data: { backlog: row.backlog } }, fmtInt(row.backlog)),
            el("td", { className: "num" }, fmtBytes(row.storageSize)), el("td", { className: "num" }, fmtInt(row.producers)),
            el("td", { className: "num" }, fmtInt(row.subscriptions)), el("td", { className: "num" }, fmtInt(row.consumers))));
          if (row.partitions) {
            const links = [];
            for (let i = 0; i < row.partitions; i++) {
              const p = partitionOf(t, i);
              links.push(el("a", { href: topicHref(p) }, `partition ${i}`), " ");
            }
            rows.push(el("tr", { className: "sub" }, el("td", { colSpan: TOPIC_COLUMNS.length }, links)));
          }
        }
        const first = answer.total ? answer.offset + 1 : 0;
        const last = answer.offset + answer.topics.length;
        const pager = el("div", { className: "pager" },
          el("button", { type: "button", id: "prev-page", disabled: page === 0, onclick: () => go({ page: String(page - 1) }) }, "Previous"),
          el("span", { id: "topic-count" }, `${first}–${last} of ${answer.total}`),
          el("button", { type: "button", id: "next-page", disabled: last >= answer.total, onclick: () => go({ page: String(page + 1) }) }, "Next"));
        fill(body, el("table", { id: "topic-table" }, el("thead", {}, head), el("tbody", {}, rows)), pager);
      } catch (e) { fill(body, banner(e)); }
    }, (e) => fill(body, banner(e)));
    if (await allowed("/admin/v2/tenants")) {
      const name = el("input", { id: "new-topic", placeholder: "persistent://tenant/namespace/topic", autocomplete: "off" });
      const partitions = el("input", { id: "new-topic-partitions", type: "number", min: 0, value: 0 });
      fill(create, el("h2", {}, "Create a topic"), el("div", { className: "toolbar" }, name, "partitions", partitions,
        actionButton("Create topic", "create-topic-button", "Create topic", () => `Create ${name.value} with ${partitions.value} partitions?`,
          async () => {
            const t = parseTopic(name.value.trim());
            if (!t) throw new Error("Give a full name: persistent://tenant/namespace/topic");
            const count = parseInt(partitions.value, 10) || 0;
            if (count > 0) await api(topicPath(t) + "/partitions", { method: "PUT", body: count });
            else await api(topicPath(t), { method: "PUT" });
          }, () => route())));
    }
  }

  async function topicStats(t) {
    const meta = await api(topicPath(t) + "/partitions");
    if (meta.partitions > 0) {
      const stats = await api(topicPath(t) + "/partitioned-stats?perPartition=true");
      return { partitions: meta.partitions, stats };
    }
    return { partitions: 0, stats: await api(topicPath(t) + "/stats") };
  }

  function consumerRows(consumers) {
    return consumers.map((c) => el("tr", { className: "sub", data: { consumer: c.consumerName } },
      el("td", {}, "↳ consumer ", c.consumerName), el("td", {}, c.address || ""),
      el("td", { className: "num", data: { field: "availablePermits" } }, fmtInt(c.availablePermits)),
      el("td", { className: "num", data: { field: "unackedMessages" } }, fmtInt(c.unackedMessages)),
      el("td", { className: "num" }, fmtRate(c.msgRateOut)), el("td", {}, c.blockedConsumerOnUnackedMsgs ? "blocked on unacked" : ""),
      el("td", {}, (c.keyHashRanges || []).join(" "))));
  }

  async function topicPage(parts) {
    const t = topicFromParts(parts);
    const head = el("div", { className: "toolbar" },
      el("a", { href: messagesHref(t), id: "browse-messages" }, "Browse messages"));
    const cards = el("div", { className: "cards", id: "topic-cards" });
    const chartBox = el("div", { className: "charts" });
    const producers = el("div", { id: "producers" });
    const subs = el("div", { id: "subscriptions" });
    const partitionsBox = el("div", { id: "partitions" });
    const policies = el("div", { id: "policies" });
    const schemas = el("div", { id: "schemas" });
    const storage = el("div", { id: "storage" });
    const actions = el("div", { id: "actions" });
    fill(main, el("h1", { id: "topic-name" }, t.full), head, cards, chartBox, el("h2", {}, "Producers"), producers,
      el("h2", {}, "Subscriptions"), subs, partitionsBox, el("h2", {}, "Storage and compaction"), storage,
      el("h2", {}, "Policies in force"), policies, el("h2", {}, "Schema versions"), schemas, actions,
      el("div", { id: "action-status" }));
    let chart = null;
    const history = [[], [], []];
    try { await api(topicPath(t) + "/partitions"); await topicStats(t); } catch (e) {
      fill(main, el("h1", { id: "topic-name" }, t.full), el("div", { className: "cards", id: "topic-cards" }, banner(e)));
      return;
    }
    await live(topicPath(t) + "/console-stream", async (name, data) => {
      const answer = { partitions: data.partitions.partitions, stats: data.stats };
      const s = answer.stats;
      fill(cards, card("Msgs/s in", fmtRate(s.msgRateIn), "msgRateIn"), card("Msgs/s out", fmtRate(s.msgRateOut), "msgRateOut"),
        card("Bytes/s in", fmtBytes(s.msgThroughputIn), "msgThroughputIn"), card("Bytes/s out", fmtBytes(s.msgThroughputOut), "msgThroughputOut"),
        card("Messages in", fmtInt(s.msgInCounter), "msgInCounter"), card("Storage", fmtBytes(s.storageSize), "storageSize"),
        card("Backlog size", fmtBytes(s.backlogSize), "backlogSize"), card("Deduplication", s.deduplicationStatus || "-", "deduplicationStatus"),
        answer.partitions ? card("Partitions", String(answer.partitions), "partitions") : null);
      if (!chart) chart = lineChart(chartBox, "Messages per second (since this page opened)", ["in", "out"]);
      history[0].push(Date.now() / 1000); history[1].push(s.msgRateIn); history[2].push(s.msgRateOut);
      if (history[0].length > 450) history.forEach((a) => a.shift());
      chart.setData(history);
      let sequences = {};
      if (s.deduplicationStatus === "Enabled" && !answer.partitions && t.domain === "persistent") {
        try {
          const dedup = (await api(topicPath(t) + "/internalStats")).cursors["pulsar.dedup"];
          sequences = dedup ? dedup.properties : {};
        } catch (e) { sequences = {}; }
      }
      fill(producers, table([{ label: "Name", key: "producerName" }, { label: "Id", key: "producerId", num: true },
        { label: "Last sequence id (dedup)", num: true, render: (p) => (p.producerName in sequences ? String(sequences[p.producerName]) : "-") },
        { label: "Access", key: "accessMode" }, { label: "Msgs/s in", num: true, render: (p) => fmtRate(p.msgRateIn) },
        { label: "Bytes/s in", num: true, render: (p) => fmtBytes(p.msgThroughputIn) }, { label: "Address", key: "address" },
        { label: "Client", key: "clientVersion" }, { label: "Connected since", key: "connectedSince" }], s.publishers || [],
      { id: "producer-table" }));
      const rows = [];
      for (const [name, sub] of Object.entries(s.subscriptions || {})) {
        rows.push(el("tr", { data: { subscription: name } },
          el("td", {}, el("a", { href: subHref(t, name) }, name)), el("td", {}, sub.type),
          el("td", { className: "num", data: { field: "msgBacklog" } }, fmtInt(sub.msgBacklog)),
          el("td", { className: "num", data: { field: "unackedMessages" } }, fmtInt(sub.unackedMessages)),
          el("td", { className: "num" }, fmtRate(sub.msgRateOut)),
          el("td", { className: "num" }, fmtInt(sub.msgDelayed)), el("td", {}, `${(sub.consumers || []).length} consumers`)));
        rows.push(...consumerRows(sub.consumers || []));
      }
      fill(subs, el("table", { id: "subscription-table" }, el("thead", {}, el("tr", {},
        ["Subscription", "Type / address", "Backlog", "Unacked", "Msgs/s out", "Delayed / blocked", "Consumers / hash ranges"]
          .map((label) => el("th", {}, label)))), el("tbody", {}, rows)));
      if (answer.partitions) {
        const prow = Object.entries(s.partitions || {}).map(([name, p]) => ({ name, p }));
        fill(partitionsBox, el("h2", {}, "Partitions"), table([
          { label: "Partition", render: (r) => el("a", { href: topicHref(parseTopic(r.name)) }, r.name) },
          { label: "Msgs/s in", num: true, render: (r) => fmtRate(r.p.msgRateIn) },
          { label: "Msgs/s out", num: true, render: (r) => fmtRate(r.p.msgRateOut) },
          { label: "Storage", num: true, render: (r) => fmtBytes(r.p.storageSize) }], prow, { id: "partition-table" }));
      }
    }, (e) => fill(cards, banner(e)));
    track(loadStorage(t, storage));
    track(loadPolicies(t, policies));
    track(loadSchemas(t, schemas));
    track(loadTopicActions(t, actions));
  }

  async function loadStorage(t, box) {
    const parts = [];
    if (t.domain !== "persistent") {
      fill(box, el("p", { className: "muted" }, "A non-persistent topic stores nothing."));
      return;
    }
    const meta = await api(topicPath(t) + "/partitions");
    if (meta.partitions) {
      fill(box, el("p", { className: "muted" }, "See each partition for its ledgers and compaction."));
      return;
    }
    try {
      const compaction = await api(topicPath(t) + "/compaction");
      parts.push(el("p", { id: "compaction-status" }, `Compaction: ${compaction.status}`,
        compaction.lastError ? ` (${compaction.lastError})` : ""));
    } catch (e) { parts.push(el("p", { className: "muted" }, `Compaction: ${e.reason}`)); }
    try {
      const internal = await api(topicPath(t) + "/internalStats");
      parts.push(el("p", {}, `Entries ${fmtInt(internal.numberOfEntries)}, last confirmed ${internal.lastConfirmedEntry}, ` +
        `compacted ledger ${internal.compactedLedger.ledgerId}`));
      parts.push(table([{ label: "Ledger", key: "ledgerId", num: true }, { label: "Entries", key: "entries", num: true },
        { label: "Size", num: true, render: (l) => fmtBytes(l.size) }], internal.ledgers, { id: "ledger-table" }));
    } catch (e) { parts.push(banner(e)); }
    fill(box, parts);
  }

  const POLICIES = [
    ["retention", "retention"], ["messageTTL", "messageTTL"], ["deduplicationEnabled", "deduplication"],
    ["maxProducers", "maxProducersPerTopic"], ["maxConsumers", "maxConsumersPerTopic"],
    ["maxConsumersPerSubscription", "maxConsumersPerSubscription"],
    ["maxUnackedMessagesOnConsumer", "maxUnackedMessagesPerConsumer"],
    ["maxUnackedMessagesOnSubscription", "maxUnackedMessagesPerSubscription"],
    ["delayedDelivery", "delayedDelivery"], ["compactionThreshold", "compactionThreshold"],
    ["inactiveTopicPolicies", "inactiveTopicPolicies"]];

  const present = (v) => v !== null && v !== undefined && v !== "" && !(typeof v === "object" && Object.keys(v).length === 0);
  const show = (v) => (typeof v === "object" ? JSON.stringify(v) : String(v));

  async function loadPolicies(t, box) {
    const rows = [];
    const mine = generation;
    try {
      for (const [topicKey, nsKey] of POLICIES) {
        if (mine !== generation) return;
        const own = await api(`${topicPath(t)}/${topicKey}`);
        const applied = await api(`${topicPath(t)}/${topicKey}?applied=true`);
        let source = "broker default";
        if (present(own)) source = "topic";
        else {
          try {
            const ns = await api(`/admin/v2/namespaces/${enc(t.tenant)}/${enc(t.namespace)}/${nsKey}`);
            if (present(ns)) source = "namespace";
          } catch (e) { source = "namespace or broker"; }
        }
        rows.push({ name: topicKey, value: present(applied) ? show(applied) : "(none)", source });
      }
      fill(box, table([{ label: "Policy", key: "name" }, { label: "Value in force", key: "value" }, { label: "From", key: "source" }],
        rows, { id: "policy-table" }));
    } catch (e) { fill(box, banner(e)); }
  }

  async function loadSchemas(t, box) {
    try {
      const answer = await api(schemaPath(t) + "/schemas");
      const versions = answer.getSchemaResponses || [];
      if (!versions.length) { fill(box, el("p", { className: "muted" }, "No schema")); return; }
      fill(box, versions.map((v) => el("div", { data: { schemaVersion: v.version } },
        el("h3", {}, `Version ${v.version}: ${v.type}`), el("pre", {}, prettySchema(v.data)))));
    } catch (e) { fill(box, banner(e)); }
  }

  function prettySchema(data) {
    if (data === null || data === undefined || data === "" || data === "null") return "(no definition: a primitive type)";
    try { return JSON.stringify(JSON.parse(data), null, 2); } catch (e) { return String(data || ""); }
  }

  async function loadTopicActions(t, box) {
    if (!(await allowed(topicPath(t) + "/permissions"))) return;
    const meta = await api(topicPath(t) + "/partitions");
    const partitioned = meta.partitions > 0;
    const subName = el("input", { id: "new-subscription", placeholder: "subscription name", autocomplete: "off" });
    const position = el("select", { id: "new-subscription-position" }, el("option", { value: "latest" }, "latest"),
      el("option", { value: "earliest" }, "earliest"));
    const refresh = () => route();
    fill(box, el("h2", {}, "Actions"), el("div", { className: "toolbar" },
      actionButton("Unload", "unload-topic", "Unload topic", () => `Unload ${t.full}? Its clients reconnect.`,
        () => api(topicPath(t) + "/unload", { method: "PUT" }), refresh),
      partitioned || t.domain !== "persistent" ? null : actionButton("Compact", "compact-topic", "Trigger compaction", () => `Compact ${t.full}?`,
        () => api(topicPath(t) + "/compaction", { method: "PUT" }), refresh),
      t.domain === "persistent" ? actionButton("Terminate", "terminate-topic", "Terminate topic",
        () => `Terminate ${t.full}? No message can be published to it afterwards.`,
        () => api(topicPath(t) + (partitioned ? "/terminate/partitions" : "/terminate"), { method: "POST" }), refresh) : null,
      actionButton("Delete topic", "delete-topic", "Delete topic", () => `Delete ${t.full} and all its messages?`,
        () => api(topicPath(t) + (partitioned ? "/partitions" : "") + "?force=true", { method: "DELETE" }),
        () => { location.hash = "#/topics"; })),
    el("div", { className: "toolbar" }, subName, position,
      actionButton("Create subscription", "create-subscription", "Create subscription",
        () => `Create subscription ${subName.value} at ${position.value}?`,
        () => api(subPath(t, subName.value),
          { method: "PUT", body: position.value === "earliest" ? { ledgerId: -1, entryId: -1 } : undefined }), refresh)));
  }

  // -- subscription -----------------------------------------------------------------------------
  function ownerOf(consumers, hash) {
    for (const c of consumers) {
      for (const [start, end] of c.keyHashRangeArrays || []) if (hash >= start && hash <= end) return c.consumerName;
    }
    return null;
  }

  function hashSpace(consumers) {
    const bar = el("div", { className: "hashspace", id: "hash-space" });
    const legend = el("div", { className: "legend" });
    consumers.forEach((c, i) => {
      const color = COLORS[i % COLORS.length];
      const swatch = el("span", { className: "swatch" });
      swatch.style.background = color;
      legend.appendChild(el("span", {}, swatch, `${c.consumerName}: ${(c.keyHashRanges || []).join(" ")}`));
      for (const [start, end] of c.keyHashRangeArrays || []) {
        const range = el("div", { className: "range", title: `${c.consumerName} ${start}-${end}`, data: { consumer: c.consumerName } });
        range.style.left = `${(start / HASH_SPACE) * 100}%`;
        range.style.width = `${Math.max(0.2, ((end - start + 1) / HASH_SPACE) * 100)}%`;
        range.style.background = color;
        bar.appendChild(range);
      }
      for (const d of c.drainingHashes || []) {
        const mark = el("div", { className: "drain", title: `hash ${d.hash} draining at ${c.consumerName}`, data: { hash: d.hash } });
        mark.style.left = `${(d.hash / HASH_SPACE) * 100}%`;
        bar.appendChild(mark);
      }
    });
    return [bar, el("div", { className: "axis" }, el("span", {}, "0"), el("span", {}, "32768"), el("span", {}, "65535")), legend];
  }

  async function drainingTable(t, sub, consumers) {
    const rows = [];
    let asked = 0;
    for (const c of consumers) {
      for (const d of c.drainingHashes || []) {
        let ids = "";
        if (asked < 20) {
          asked += 1;
          try {
            const pending = await api(`${subPath(t, sub)}/consumer/${enc(c.consumerName)}/pendingMessages?stickyKeyHash=${d.hash}&limit=20`);
            ids = pending.pendingMessages.map((m) => m.messageId + (m.key !== null ? ` (key ${m.key})` : "")).join(", ");
          } catch (e) { ids = e.reason; }
        }
        rows.push(el("tr", { className: "draining", data: { drainingHash: d.hash } },
          el("td", { className: "num" }, String(d.hash)), el("td", {}, c.consumerName),
          el("td", { className: "num" }, fmtInt(d.unackMsgs)), el("td", { className: "num" }, fmtInt(d.blockedAttempts)),
          el("td", {}, ownerOf(consumers, d.hash) || "-"), el("td", { data: { field: "blockingMessages" } }, ids)));
      }
    }
    if (!rows.length) return el("p", { className: "muted", id: "no-draining" }, "No draining hashes: no key is blocked.");
    return el("table", { id: "draining-table" }, el("thead", {}, el("tr", {},
      ["Hash", "Draining at (holds unacked)", "Unacked", "Blocked attempts", "Waiting consumer (owner now)", "Blocking message ids"]
        .map((label) => el("th", {}, label)))), el("tbody", {}, rows));
  }

  function delayedView(index) {
    const parts = [];
    for (const p of index.partitions) {
      if (!p.tracker) { parts.push(el("p", { className: "muted" }, "No delayed messages tracked.")); continue; }
      parts.push(el("div", { className: "cards" }, card("Tracker", p.tracker, "delayedTracker"),
        card("Delayed messages", fmtInt(p.messages), "delayedMessages"), card("Index memory", fmtBytes(p.indexMemoryBytes), "indexMemory"),
        card("Next due", fmtTime(p.nextDeliveryTime), "nextDue"),
        p.loadedIndexes !== undefined ? card("Indexes loaded", fmtInt(p.loadedIndexes), "loadedIndexes") : null));
      if (p.buckets && (p.buckets.length || p.lastMutableBucket)) {
        const rows = p.buckets.map((b) => ({ ...b, kind: "sealed" }));
        if (p.lastMutableBucket) rows.push({ kind: "mutable (last)", bucketKey: "-", startLedgerId: p.lastMutableBucket.startLedgerId,
          endLedgerId: p.lastMutableBucket.endLedgerId, messages: p.lastMutableBucket.messages, segments: "-", loadedSegment: "-",
          nextSegmentDueTime: p.lastMutableBucket.nextDeliveryTime, snapshotSizeBytes: 0 });
        parts.push(table([{ label: "Bucket", key: "kind" }, { label: "Key", key: "bucketKey" },
          { label: "Ledgers", render: (b) => `${b.startLedgerId}..${b.endLedgerId}` }, { label: "Messages", num: true, key: "messages" },
          { label: "Segments (loaded)", render: (b) => `${b.segments} (${b.loadedSegment})` },
          { label: "Next due", render: (b) => fmtTime(b.nextSegmentDueTime) },
          { label: "Snapshot", num: true, render: (b) => fmtBytes(b.snapshotSizeBytes) }], rows, { id: "bucket-table" }));
      }
    }
    return parts;
  }

  async function subscriptionPage(parts) {
    const t = topicFromParts(parts.slice(0, 4));
    const sub = parts[4];
    const cards = el("div", { className: "cards", id: "sub-cards" });
    const consumersBox = el("div", { id: "consumers" });
    const keyShared = el("div", { id: "key-shared" });
    const delayed = el("div", { id: "delayed" });
    const actions = el("div", { id: "actions" });
    fill(main, el("h1", {}, `${sub} on `, el("a", { href: topicHref(t) }, t.full)),
      el("div", { className: "toolbar" }, el("a", { href: messagesHref(t, "sub=" + enc(sub)), id: "peek-messages" }, "Peek backlog")),
      cards, el("h2", {}, "Consumers"), consumersBox, keyShared, el("h2", {}, "Delayed delivery"), delayed, actions,
      el("div", { id: "action-status" }));
    try { await topicStats(t); } catch (e) { fill(main, el("h1", {}, `${sub} on ${t.full}`), el("div", { id: "sub-cards" }, banner(e))); return; }
    await every(POLL_MS, async () => {
      let answer;
      try { answer = await topicStats(t); } catch (e) { fill(cards, banner(e)); return; }
      if (answer.partitions) {
        fill(cards, el("p", {}, "A partitioned topic: each partition has its own dispatcher."),
          Array.from({ length: answer.partitions }, (_, i) => [el("a", { href: subHref(partitionOf(t, i), sub) }, `partition ${i}`), " "]));
        return;
      }
      const s = (answer.stats.subscriptions || {})[sub];
      if (!s) { fill(cards, banner("Subscription not found")); return; }
      fill(cards, card("Type", s.type, "type"), card("Backlog", fmtInt(s.msgBacklog), "msgBacklog"),
        card("Unacked", fmtInt(s.unackedMessages), "unackedMessages"), card("Msgs/s out", fmtRate(s.msgRateOut), "msgRateOut"),
        card("Delayed", fmtInt(s.msgDelayed), "msgDelayed"), card("Consumers", fmtInt((s.consumers || []).length), "consumers"),
        s.type === "Key_Shared" ? card("Draining hashes", fmtInt(s.drainingHashesCount), "drainingHashesCount") : null,
        s.type === "Key_Shared" ? card("Mode", s.keySharedMode || "-", "keySharedMode") : null);
      fill(consumersBox, el("table", { id: "consumer-table" }, el("thead", {}, el("tr", {},
        ["Consumer", "Address", "Permits", "Unacked", "Msgs/s out", "State", "Hash ranges"].map((l) => el("th", {}, l)))),
      el("tbody", {}, consumerRows(s.consumers || []))));
      if (s.type === "Key_Shared") {
        fill(keyShared, el("h2", {}, "Key_Shared hash space"), hashSpace(s.consumers || []),
          el("h3", {}, "Draining hashes"), await drainingTable(t, sub, s.consumers || []));
      }
      try { fill(delayed, delayedView(await api(subPath(t, sub) + "/delayedIndex"))); } catch (e) { fill(delayed, banner(e)); }
    });
    track(loadSubscriptionActions(t, sub, actions));
  }

  async function loadSubscriptionActions(t, sub, box) {
    if (!(await allowed(topicPath(t) + "/subscriptions"))) return;
    const count = el("input", { id: "skip-count", type: "number", min: 1, value: 1 });
    const when = el("input", { id: "reset-time", placeholder: "2026-01-01T00:00:00Z or minutes ago", autocomplete: "off" });
    const pos = el("input", { id: "reset-position", placeholder: "ledger:entry", autocomplete: "off" });
    const refresh = () => route();
    const resetTime = () => {
      const text = when.value.trim();
      const ms = /^\d+$/.test(text) ? Date.now() - parseInt(text, 10) * 60000 : Date.parse(text);
      if (Number.isNaN(ms)) throw new Error("not a time: " + text);
      return ms;
    };
    fill(box, el("h2", {}, "Actions"),
      el("div", { className: "toolbar" }, "Skip", count, "messages",
        actionButton("Skip", "skip-messages", "Skip messages", () => `Skip ${count.value} messages of ${sub}?`,
          () => api(`${subPath(t, sub)}/skip/${parseInt(count.value, 10)}`, { method: "POST" }), refresh),
        actionButton("Clear backlog", "clear-backlog", "Clear backlog", () => `Acknowledge the whole backlog of ${sub}?`,
          () => api(`${subPath(t, sub)}/skip_all`, { method: "POST" }), refresh)),
      el("div", { className: "toolbar" }, "Reset to time", when,
        actionButton("Reset by time", "reset-by-time", "Reset cursor", () => `Move ${sub} back to ${when.value}?`,
          async () => api(`${subPath(t, sub)}/resetcursor/${resetTime()}`, { method: "POST" }), refresh),
        "to position", pos,
        actionButton("Reset to position", "reset-by-position", "Reset cursor", () => `Move ${sub} to ${pos.value}?`,
          async () => {
            const m = /^(\d+):(\d+)$/.exec(pos.value.trim());
            if (!m) throw new Error("give ledger:entry");
            await api(`${subPath(t, sub)}/resetcursor`, { method: "POST", body: { ledgerId: Number(m[1]), entryId: Number(m[2]) } });
          }, refresh)),
      el("div", { className: "toolbar" }, actionButton("Delete subscription", "delete-subscription", "Delete subscription",
        () => `Delete ${sub}? Its consumers are disconnected.`, () => api(`${subPath(t, sub)}?force=true`, { method: "DELETE" }),
        () => { location.hash = topicHref(t); })));
  }

  // -- messages ---------------------------------------------------------------------------------
  function readVarint(bytes, at) {
    let value = 0n;
    let shift = 0n;
    let i = at;
    for (;;) {
      const b = bytes[i++];
      value |= BigInt(b & 0x7f) << shift;
      if (!(b & 0x80)) break;
      shift += 7n;
    }
    return [value, i];
  }

  // SingleMessageMetadata of a batch entry: properties (1), partition_key (2), payload_size (3),
  // event_time (5), partition_key_b64_encoded (6), ordering_key (7), sequence_id (8), null_value (9)
  function parseSingle(bytes) {
    const md = { properties: {}, payloadSize: 0 };
    const utf8 = new TextDecoder();
    let i = 0;
    while (i < bytes.length) {
      let tag; [tag, i] = readVarint(bytes, i);
      const field = Number(tag >> 3n);
      const wire = Number(tag & 7n);
      if (wire === 0) {
        let v; [v, i] = readVarint(bytes, i);
        if (field === 3) md.payloadSize = Number(v);
        else if (field === 5) md.eventTime = Number(v);
        else if (field === 6) md.keyB64 = v !== 0n;
        else if (field === 8) md.sequenceId = v.toString();
        else if (field === 9) md.nullValue = v !== 0n;
      } else if (wire === 2) {
        let len; [len, i] = readVarint(bytes, i);
        const chunk = bytes.subarray(i, i + Number(len));
        i += Number(len);
        if (field === 1) {
          const kv = parseKeyValue(chunk);
          md.properties[kv[0]] = kv[1];
        } else if (field === 2) md.key = utf8.decode(chunk);
      } else if (wire === 1) i += 8;
      else if (wire === 5) i += 4;
      else break;
    }
    return md;
  }

  function parseKeyValue(bytes) {
    const utf8 = new TextDecoder();
    const kv = ["", ""];
    let i = 0;
    while (i < bytes.length) {
      let tag; [tag, i] = readVarint(bytes, i);
      let len; [len, i] = readVarint(bytes, i);
      const value = utf8.decode(bytes.subarray(i, i + Number(len)));
      i += Number(len);
      if (Number(tag >> 3n) === 1) kv[0] = value; else kv[1] = value;
    }
    return kv;
  }

  function splitBatch(bytes, count) {
    const messages = [];
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    let at = 0;
    for (let n = 0; n < count && at + 4 <= bytes.length; n++) {
      const size = view.getUint32(at);
      const md = parseSingle(bytes.subarray(at + 4, at + 4 + size));
      at += 4 + size;
      messages.push({ md, payload: bytes.subarray(at, at + md.payloadSize), batchIndex: n });
      at += md.payloadSize;
    }
    return messages;
  }

  function hex(bytes) {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const row = Array.from(bytes.subarray(i, i + 16));
      lines.push(i.toString(16).padStart(6, "0") + "  " + row.map((b) => b.toString(16).padStart(2, "0")).join(" ").padEnd(48) +
        "  " + row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join(""));
    }
    return lines.join("\n");
  }

  function asText(bytes) {
    try { return new TextDecoder("utf-8", { fatal: true }).decode(bytes); } catch (e) { return null; }
  }

  // Avro binary decoding, for payloads of an AVRO schema
  function avroDecode(schema, bytes) {
    const named = {};
    let i = 0;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const long = () => {
      let n = 0n; let shift = 0n; let b;
      do { b = bytes[i++]; n |= BigInt(b & 0x7f) << shift; shift += 7n; } while (b & 0x80);
      const v = (n >> 1n) ^ -(n & 1n);
      return v >= BigInt(Number.MIN_SAFE_INTEGER) && v <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(v) : v.toString();
    };
    const raw = () => { const n = Number(long()); const out = bytes.subarray(i, i + n); i += n; return out; };
    const read = (s) => {
      if (typeof s === "string") {
        switch (s) {
          case "null": return null;
          case "boolean": return bytes[i++] !== 0;
          case "int": case "long": return long();
          case "float": { const v = view.getFloat32(i, true); i += 4; return v; }
          case "double": { const v = view.getFloat64(i, true); i += 8; return v; }
          case "bytes": return hex(raw());
          case "string": return new TextDecoder().decode(raw());
          default:
            if (named[s]) return read(named[s]);
            throw new Error("unknown Avro type " + s);
        }
      }
      if (Array.isArray(s)) return read(s[Number(long())]);
      if (s.name) named[s.name] = s;
      switch (s.type) {
        case "record": { const out = {}; for (const f of s.fields) out[f.name] = read(f.type); return out; }
        case "enum": return s.symbols[Number(long())];
        case "array": case "map": {
          const out = s.type === "array" ? [] : {};
          for (;;) {
            let n = Number(long());
            if (n === 0) break;
            if (n < 0) { n = -n; long(); }
            for (let k = 0; k < n; k++) {
              if (s.type === "array") out.push(read(s.items));
              else { const key = new TextDecoder().decode(raw()); out[key] = read(s.values); }
            }
          }
          return out;
        }
        case "fixed": { const out = bytes.subarray(i, i + s.size); i += s.size; return hex(out); }
        default: return read(s.type);
      }
    };
    return read(schema);
  }

  // KEY_VALUE: the schema's data is {"key": ..., "value": ...} with each side's type in its properties;
  // INLINE payloads are [key length][key][value length][value] (lengths 4 bytes, big-endian),
  // SEPARATED ones carry the value only (the key is the message key)
  function decodeKeyValue(bytes, schema) {
    const parts = JSON.parse(schema.data);
    const props = schema.properties || {};
    const side = (kind, data) => ({ type: kind, data: typeof data === "string" ? data : JSON.stringify(data) });
    const asValue = (decoded) => {
      if (decoded.as === "hex" || decoded.as === "text") return decoded.text;
      try { return JSON.parse(decoded.text); } catch (e) { return decoded.text; }
    };
    const valueSchema = side(props["value.schema.type"], parts.value);
    if ((props["kv.encoding.type"] || "INLINE") !== "INLINE") {
      return { as: "KEY_VALUE (separated: the value)", text: JSON.stringify(asValue(decode(bytes, valueSchema, "auto")), null, 2) };
    }
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    const keyLength = view.getInt32(0);
    const key = bytes.subarray(4, 4 + keyLength);
    const valueLength = view.getInt32(4 + keyLength);
    const value = bytes.subarray(8 + keyLength, 8 + keyLength + valueLength);
    const decoded = { key: asValue(decode(key, side(props["key.schema.type"], parts.key), "auto")),
      value: asValue(decode(value, valueSchema, "auto")) };
    return { as: "KEY_VALUE", text: JSON.stringify(decoded, null, 2) };
  }

  function decode(bytes, schema, mode) {
    if (mode === "hex") return { as: "hex", text: hex(bytes) };
    if (mode === "text") return { as: "text", text: new TextDecoder().decode(bytes) };
    const type = schema ? schema.type : null;
    const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    try {
      if (type === "KEY_VALUE") return decodeKeyValue(bytes, schema);
      if (type === "JSON") return { as: "JSON", text: JSON.stringify(JSON.parse(new TextDecoder().decode(bytes)), null, 2) };
      if (type === "AVRO") return { as: "AVRO", text: JSON.stringify(avroDecode(JSON.parse(schema.data), bytes), null, 2) };
      if (type === "INT8" && bytes.length === 1) return { as: type, text: String(view.getInt8(0)) };
      if (type === "INT16" && bytes.length === 2) return { as: type, text: String(view.getInt16(0)) };
      if (type === "INT32" && bytes.length === 4) return { as: type, text: String(view.getInt32(0)) };
      if (type === "INT64" && bytes.length === 8) return { as: type, text: view.getBigInt64(0).toString() };
      if (type === "FLOAT" && bytes.length === 4) return { as: type, text: String(view.getFloat32(0)) };
      if (type === "DOUBLE" && bytes.length === 8) return { as: type, text: String(view.getFloat64(0)) };
      if (type === "BOOLEAN" && bytes.length === 1) return { as: type, text: String(bytes[0] !== 0) };
    } catch (e) { /* shown as text or hex below */ }
    const text = asText(bytes);
    if (text !== null && !/[\u0000-\u0008\u000e-\u001f]/.test(text)) return { as: "text", text };
    return { as: "hex", text: hex(bytes) };
  }

  function messageRow(idText, headers, single, schema, mode) {
    const props = single ? single.md.properties : JSON.parse(headers.get("X-Pulsar-PROPERTY") || "{}");
    const key = single ? single.md.key : headers.get("X-Pulsar-partition-key");
    const event = single ? (single.md.eventTime ? fmtTime(single.md.eventTime) : null) : headers.get("X-Pulsar-event-time");
    const sequence = single && single.md.sequenceId !== undefined ? single.md.sequenceId : headers.get("X-Pulsar-sequence-id");
    const decoded = decode(single ? single.payload : headers.payload, schema, mode);
    return el("tr", { className: "message", data: { messageId: idText } },
      el("td", {}, idText), el("td", {}, headers.get("X-Pulsar-publish-time") || "-", event ? [el("br", {}), "event ", event] : null),
      el("td", { data: { field: "key" } }, key || "-"),
      el("td", {}, headers.get("X-Pulsar-producer-name") || "-", el("br", {}), "seq ", sequence || "-"),
      el("td", {}, Object.entries(props).map(([k, v]) => el("div", { data: { property: k } }, `${k} = ${v}`))),
      el("td", {}, el("span", { className: "muted" }, decoded.as), el("pre", { className: "payload" }, decoded.text)));
  }

  const MESSAGE_COLUMNS = ["Message id", "Publish time", "Key", "Producer", "Properties", "Payload"];

  // Entries after the cursor's mark-delete position and not acknowledged one by one (peek reads no further)
  function unackedEntries(internal, sub) {
    const cursor = (internal.cursors || {})[sub];
    if (!cursor) return 0;
    const [markLedger, markEntry] = cursor.markDeletePosition.split(":").map(Number);
    let count = 0;
    for (const l of internal.ledgers) {
      if (l.ledgerId < markLedger) continue;
      count += Math.max(0, l.entries - (l.ledgerId === markLedger ? markEntry + 1 : 0));
    }
    for (const m of cursor.individuallyDeletedMessages.matchAll(/\((\d+):(-?\d+)\.\.(\d+):(\d+)\]/g)) {
      if (m[1] === m[3]) count -= Number(m[4]) - Number(m[2]);
    }
    return Math.max(0, count);
  }

  async function fetchEntry(path) {
    const resp = await request(path);
    const payload = new Uint8Array(await resp.arrayBuffer());
    const headers = { get: (name) => resp.headers.get(name), payload };
    return headers;
  }

  function entryCards(entry, schema, mode) {
    const id = entry.get("X-Pulsar-Message-ID") || "?";
    const batch = entry.get("X-Pulsar-num-batch-message");
    if (batch) {
      return splitBatch(entry.payload, parseInt(batch, 10)).map((single) => messageRow(`${id}:${single.batchIndex}`, entry, single, schema, mode));
    }
    return [messageRow(id, entry, null, schema, mode)];
  }

  async function messagesPage(parts, params) {
    const t = topicFromParts(parts);
    const meta = await api(topicPath(t) + "/partitions").catch((e) => ({ error: e }));
    const results = el("div", { id: "messages" });
    if (meta.error) { fill(main, el("h1", {}, "Messages of ", t.full), banner(meta.error)); return; }
    if (t.domain !== "persistent") {
      fill(main, el("h1", {}, "Messages of ", t.full), el("p", { className: "muted", id: "no-messages" },
        "A non-persistent topic keeps no messages to browse."));
      return;
    }
    if (meta.partitions > 0) {
      fill(main, el("h1", {}, "Messages of ", t.full), el("p", {}, "Pick a partition:"),
        Array.from({ length: meta.partitions }, (_, i) => [el("a", { href: messagesHref(partitionOf(t, i), params.toString()) }, `partition ${i}`), " "]));
      return;
    }
    let subs = [];
    try { subs = await api(topicPath(t) + "/subscriptions"); } catch (e) { subs = []; }
    const mode = el("select", { id: "browse-mode" }, el("option", { value: "peek" }, "Peek a subscription's backlog"),
      el("option", { value: "position" }, "From a position (ledger:entry)"), el("option", { value: "time" }, "From a publish time"),
      el("option", { value: "earliest" }, "From the earliest message"));
    mode.value = params.get("mode") || (subs.length ? "peek" : "earliest");
    const sub = el("select", { id: "browse-subscription" }, subs.map((s) => el("option", { value: s }, s)));
    if (params.get("sub")) sub.value = params.get("sub");
    const from = el("input", { id: "browse-from", placeholder: "ledger:entry or time", value: params.get("from") || "", autocomplete: "off" });
    const count = el("input", { id: "browse-count", type: "number", min: 1, max: 100, value: params.get("count") || "10" });
    const view = el("select", { id: "browse-view" }, el("option", { value: "auto" }, "decode by schema"),
      el("option", { value: "text" }, "text"), el("option", { value: "hex" }, "hex"));
    view.value = params.get("view") || "auto";
    const load = el("button", { type: "button", id: "browse-load" }, "Load");
    fill(main, el("h1", {}, "Messages of ", el("a", { href: topicHref(t) }, t.full)),
      el("p", { className: "muted" }, "Reading never acknowledges anything."),
      el("div", { className: "toolbar" }, mode, sub, from, "count", count, view, load), results);
    load.addEventListener("click", () => {
      const q = new URLSearchParams({ mode: mode.value, sub: sub.value || "", from: from.value, count: count.value, view: view.value });
      location.hash = messagesHref(t, q.toString());
    });
    if (!params.get("mode") && !params.get("sub")) return;
    let schema = null;
    try {
      const versions = (await api(schemaPath(t) + "/schemas")).getSchemaResponses || [];
      schema = versions.length ? versions[versions.length - 1] : null;
    } catch (e) { schema = null; }
    const n = Math.min(100, Math.max(1, parseInt(count.value, 10) || 10));
    const cards = [];
    try {
      const internal = await api(topicPath(t) + "/internalStats");
      if (mode.value === "peek") {
        const available = Math.min(n, unackedEntries(internal, sub.value));
        for (let k = 1; k <= available; k++) {
          cards.push(...entryCards(await fetchEntry(`${subPath(t, sub.value)}/position/${k}`), schema, view.value));
        }
      } else {
        let start;
        if (mode.value === "earliest") {
          const first = await fetchEntry(`${topicPath(t)}/examinemessage?initialPosition=earliest&messagePosition=1`);
          start = (first.get("X-Pulsar-Message-ID") || "0:0").split(":").map(Number);
        } else if (mode.value === "time") {
          const ms = /^\d+$/.test(from.value.trim()) ? parseInt(from.value.trim(), 10) : Date.parse(from.value.trim());
          if (Number.isNaN(ms)) throw new Error("not a time: " + from.value);
          const id = await api(`${topicPath(t)}/messageid/${ms}`);
          start = [id.ledgerId, id.entryId];
        } else {
          const m = /^(\d+):(\d+)$/.exec(from.value.trim());
          if (!m) throw new Error("give ledger:entry");
          start = [Number(m[1]), Number(m[2])];
        }
        const ledgers = internal.ledgers.slice().sort((a, b) => a.ledgerId - b.ledgerId);
        let [ledger, entry] = start;
        let read = 0;
        while (read < n) {
          const here = ledgers.find((l) => l.ledgerId === ledger);
          if (!here || entry >= here.entries) {
            const next = ledgers.find((l) => l.ledgerId > ledger && l.entries > 0);
            if (next === undefined) break;
            ledger = next.ledgerId;
            entry = 0;
            continue;
          }
          cards.push(...entryCards(await fetchEntry(`${topicPath(t)}/ledger/${ledger}/entry/${entry}`), schema, view.value));
          read += 1;
          entry += 1;
        }
      }
      fill(results, cards.length ? el("table", { id: "message-table" }, el("thead", {}, el("tr", {},
        MESSAGE_COLUMNS.map((label) => el("th", {}, label)))), el("tbody", {}, cards))
        : el("p", { className: "muted", id: "no-messages" }, "No messages"));
    } catch (e) { fill(results, banner(e)); }
  }

  // -- routing ----------------------------------------------------------------------------------
  async function route() {
    stopPage();
    modal.hidden = true;
    const raw = location.hash.slice(1) || "/overview";
    const [path, query] = raw.split("?");
    const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
    const params = new URLSearchParams(query || "");
    document.getElementById("logout").hidden = !savedAuth();
    for (const id of ["overview", "topics"]) {
      document.getElementById("nav-" + id).className = parts[0] === id || (id === "topics" && parts[0] !== "overview") ? "active" : "";
    }
    try {
      if (parts[0] === "topics") await topicsPage(params);
      else if (parts[0] === "topic" && parts.length === 5) await topicPage(parts.slice(1));
      else if (parts[0] === "subscription" && parts.length === 6) await subscriptionPage(parts.slice(1));
      else if (parts[0] === "messages" && parts.length === 5) await messagesPage(parts.slice(1), params);
      else await overviewPage();
    } catch (e) {
      if (!loginShown) fill(main, banner(e));
    }
    main.dataset.ready = String(generation);
  }

  window.addEventListener("hashchange", route);
  route();
})();
