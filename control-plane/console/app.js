// The lh web console: one page, hash routes, no dependencies.
//
// Everything the server sends is treated as hostile text: it reaches the DOM only
// through textContent, text nodes, non-URL attributes and SVG elements made with
// createElementNS. Links are hash routes built here, each part encodeURIComponent'ed.
// The page tells tests where it is through <html data-page="..." data-state="...">.
"use strict";

(function () {
  /** A commit id as a ref expression (`@<hash>`: any commit); other text as it is. */
  function atCommit(id) {
    return /^[0-9a-f]{8,64}$/.test(id) ? "@" + id : id;
  }

  // ------------------------------------------------------------------ constants

  const TOKEN_KEY = "lh.token";
  const SQL_KEY = "lh.sql";
  const SVG_NS = "http://www.w3.org/2000/svg";
  const LOG_PAGE = 50;          // first-parent commits per page of the graph
  const SIDE_PAGE = 25;         // commits read from a merged branch
  const ROW_H = 28;             // height of a commit row, in the SVG and the list
  const LANE_W = 14;            // distance between lanes of the graph
  const MAX_ROWS = 1000;        // rows asked of a SQL query
  const PREVIEW_ROWS = 50;
  const RUN_POLL_MS = 2000;
  const RUN_BRANCH_PREFIX = "run/";
  // In the graph's rows (all of them are in the commit's detail).
  const NOTABLE_PROPS = ["lh.run", "lh.node", "lh.rebased", "lh.compacted"];
  const NODE_STATUSES = ["waiting", "running", "cached", "done", "passed", "warned", "failed", "skipped", "cancelled"];
  const NUMERIC_TYPE = /^(tiny|small|big|hug|u)?int|integer|long|float|double|real|decimal|numeric/i;
  const NUM = new Intl.NumberFormat("en-US");

  const app = {
    token: null,       // bearer token, when one is known
    info: null,        // GET /info; null while signed out
    refs: null,        // cached refs for the pickers
    currentRef: null,  // the ref the user works on (Tables link, default of pickers)
    ctx: null,         // the current route's context
  };

  // ------------------------------------------------------------------ DOM helpers

  const $ = (selector) => document.querySelector(selector);

  function setProps(node, props) {
    if (!props) return;
    for (const [key, value] of Object.entries(props)) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") {
        const cls = Array.isArray(value) ? value.filter(Boolean).join(" ") : String(value);
        if (cls) node.setAttribute("class", cls);
      } else if (key === "text") node.textContent = String(value);
      else if (key === "dataset") {
        for (const [k, v] of Object.entries(value)) if (v !== null && v !== undefined) node.dataset[k] = String(v);
      } else if (key === "on") {
        for (const [event, fn] of Object.entries(value)) node.addEventListener(event, fn);
      } else if (key === "href") {
        // Only hash routes of this page: never a URL that came from elsewhere.
        const href = String(value);
        node.setAttribute("href", href.startsWith("#") ? href : "#");
      } else if (key === "value") node.value = String(value);
      else if (value === true) node.setAttribute(key, "");
      else node.setAttribute(key, String(value));
    }
  }

  function append(node, children) {
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    setProps(node, props);
    return append(node, children);
  }

  /** Replaces a node's children (null, false and undefined children are left out). */
  function replace(node, ...children) {
    node.replaceChildren();
    return append(node, children);
  }

  function svgEl(tag, props, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setProps(node, props);
    return append(node, children);
  }

  /** A hash route: `#/name/part/part`, each part encoded. */
  function href(...parts) {
    return "#/" + parts.map((p) => encodeURIComponent(String(p))).join("/");
  }

  function link(text, hash, props) {
    return el("a", Object.assign({ href: hash }, props), text);
  }

  function enc(s) {
    return encodeURIComponent(String(s));
  }

  /** Text cut with an ellipsis by CSS, whole in the title. */
  function ellipsis(text, cls) {
    const s = text === null || text === undefined ? "" : String(text);
    return el("span", { class: ["ellipsis", cls], title: s }, s);
  }

  function shortId(id) {
    return String(id || "").slice(0, 12);
  }

  /** A commit or run id, short, with the full id in its title (and a link if given). */
  function idEl(id, hash) {
    if (!id) return el("span", { class: "muted" }, "—");
    const code = el("code", { class: "id", title: String(id) }, shortId(id));
    return hash ? el("a", { href: hash, class: "id-link" }, code) : code;
  }

  function badge(text, cls, title) {
    return el("span", { class: ["badge", cls], title }, text);
  }

  function statusBadge(status) {
    return badge(status, "status status-" + String(status).replace(/[^a-z_]/gi, ""));
  }

  function empty(text, colspan) {
    return el("tr", { class: "empty" }, el("td", { colspan }, text));
  }

  /** A two-column table of facts: [[label, value], ...] (rows with an undefined value are left out). */
  function facts(rows, cls) {
    const dl = el("dl", { class: ["facts", cls] });
    for (const [label, value, id] of rows) {
      if (value === undefined) continue;
      dl.append(el("dt", null, label), el("dd", { id }, value === null ? el("span", { class: "muted" }, "—") : value));
    }
    return dl;
  }

  function kvTable(obj, cls, valueEl) {
    const keys = Object.keys(obj || {}).sort();
    if (!keys.length) return el("p", { class: "muted" }, "none");
    return el("table", { class: ["kv", cls] }, el("tbody", null, keys.map((k) => {
      const v = obj[k];
      const text = typeof v === "string" ? v : JSON.stringify(v);
      return el("tr", null, el("th", { class: "mono" }, ellipsis(k)),
        el("td", { class: "mono" }, valueEl ? valueEl(k, text) : ellipsis(text)));
    })));
  }

  function th(...labels) {
    return el("thead", null, el("tr", null, labels.map((l) => el("th", null, l))));
  }

  function pageHead(title, ...extra) {
    return el("div", { class: "page-head" }, el("h1", null, title), extra);
  }

  // ------------------------------------------------------------------ formatting

  function fmtInt(n) {
    if (n === null || n === undefined || n === "") return "—";
    if (typeof n === "string") return /^-?\d+$/.test(n) ? n.replace(/\B(?=(\d{3})+(?!\d))/g, ",") : n;
    return Number.isFinite(n) ? NUM.format(n) : String(n);
  }

  function fmtBytes(n) {
    const v = Number(n);
    if (n === null || n === undefined || !Number.isFinite(v)) return "—";
    if (v < 1024) return `${v} B`;
    const units = ["KiB", "MiB", "GiB", "TiB", "PiB"];
    let x = v / 1024;
    let i = 0;
    while (x >= 1024 && i < units.length - 1) { x /= 1024; i++; }
    return `${x < 100 ? x.toFixed(1) : Math.round(x)} ${units[i]}`;
  }

  function fmtDuration(ms) {
    if (ms === null || ms === undefined || !Number.isFinite(ms) || ms < 0) return "—";
    if (ms < 1000) return `${Math.round(ms)} ms`;
    if (ms < 59950) return `${(ms / 1000).toFixed(1)} s`;
    const s = Math.round(ms / 1000);
    if (s < 3600) return `${Math.floor(s / 60)} min ${s % 60} s`;
    return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
  }

  function parseTime(ts) {
    if (!ts) return null;
    const d = new Date(ts);
    return Number.isNaN(d.getTime()) ? null : d;
  }

  function between(start, end) {
    const a = parseTime(start);
    const b = end === "now" ? new Date() : parseTime(end);
    return a && b ? b - a : null;
  }

  function fmtTime(ts) {
    const d = parseTime(ts);
    if (!d) return ts ? String(ts) : "—";
    const p = (n) => String(n).padStart(2, "0");
    return `${d.getFullYear()}-${p(d.getMonth() + 1)}-${p(d.getDate())} ${p(d.getHours())}:${p(d.getMinutes())}:${p(d.getSeconds())}`;
  }

  function fmtAgo(ts) {
    const d = parseTime(ts);
    if (!d) return "";
    const s = Math.round((Date.now() - d.getTime()) / 1000);
    if (s < -60) return "in the future";
    if (s < 45) return "just now";
    if (s < 3600) return `${Math.max(1, Math.round(s / 60))} min ago`;
    if (s < 86400) return `${Math.round(s / 3600)} h ago`;
    const days = Math.round(s / 86400);
    if (days < 45) return days === 1 ? "1 day ago" : `${days} days ago`;
    if (days < 365) return `${Math.round(days / 30)} months ago`;
    const years = Math.round(days / 365);
    return years === 1 ? "1 year ago" : `${years} years ago`;
  }

  function timeEl(ts) {
    if (!ts) return el("span", { class: "muted" }, "—");
    return el("time", { class: "time", datetime: String(ts), title: fmtAgo(ts) + " · " + ts }, fmtTime(ts));
  }

  function firstLine(message) {
    return String(message || "").split("\n")[0];
  }

  function plural(n, one, many) {
    return `${fmtInt(n)} ${n === 1 ? one : many}`;
  }

  /** A dotted table name as a SQL identifier, each part quoted. */
  function quoteIdent(name) {
    return String(name).split(".").map((p) => '"' + p.replaceAll('"', '""') + '"').join(".");
  }

  /**
   * JSON.parse, except that integers beyond 2^53 (Iceberg snapshot ids are random
   * 63-bit numbers) stay exact: they become strings instead of rounded numbers.
   */
  function parseJson(text) {
    if (!/\d{16}/.test(text)) return JSON.parse(text);
    let out = "";
    let last = 0;
    let i = 0;
    const n = text.length;
    const isDigit = (c) => c >= 48 && c <= 57;
    while (i < n) {
      const c = text.charCodeAt(i);
      if (c === 34) { // a string: skip it, escapes included
        i++;
        while (i < n) {
          const d = text.charCodeAt(i);
          if (d === 92) i += 2;
          else { i++; if (d === 34) break; }
        }
      } else if (c === 45 || isDigit(c)) {
        let j = c === 45 ? i + 1 : i;
        while (j < n && isDigit(text.charCodeAt(j))) j++;
        const integer = !/[.eE]/.test(text[j] || "");
        if (integer && j - i >= 16 && !Number.isSafeInteger(Number(text.slice(i, j)))) {
          out += text.slice(last, i) + '"' + text.slice(i, j) + '"';
          last = j;
        }
        while (j < n && /[0-9.eE+-]/.test(text[j])) j++;
        i = j;
      } else i++;
    }
    return JSON.parse(out + text.slice(last));
  }

  // ------------------------------------------------------------------ API

  class ApiError extends Error {
    constructor(message, { status = 0, kind = "error", hint = null } = {}) {
      super(message);
      this.status = status;
      this.kind = kind;
      this.hint = hint;
    }
  }

  const isAbort = (e) => !!e && e.name === "AbortError";

  function errorFrom(res, raw) {
    try {
      const body = JSON.parse(raw);
      if (body && body.error && body.error.message) {
        return new ApiError(String(body.error.message), { status: res.status, kind: String(body.error.kind || "error"), hint: body.error.hint ? String(body.error.hint) : null });
      }
    } catch (_) { /* not JSON: below */ }
    const text = raw.trim().slice(0, 300);
    return new ApiError(`${res.status} ${res.statusText || "error"}${text ? ": " + text : ""}`, { status: res.status });
  }

  /**
   * One request to the server: `path` under /api/v1/, the token in the header. JSON
   * unless opts.text. A 401 signs out (unless opts.probe, where the caller decides).
   */
  async function api(path, opts = {}) {
    if (!path.startsWith("/api/v1/")) throw new Error("not an API path: " + path);
    const headers = { Accept: opts.text ? "text/plain" : "application/json" };
    const token = opts.token !== undefined ? opts.token : app.token;
    if (token) headers.Authorization = `Bearer ${token}`;
    let body;
    if (opts.body !== undefined) {
      headers["Content-Type"] = "application/json";
      body = JSON.stringify(opts.body);
    }
    let res;
    let raw;
    try {
      res = await fetch(path, {
        method: opts.method || (body === undefined ? "GET" : "POST"),
        headers, body, signal: opts.signal, cache: "no-store", credentials: "same-origin", redirect: "error",
      });
      raw = await res.text();
    } catch (e) {
      if (isAbort(e)) throw e;
      throw new ApiError("The server cannot be reached.", { kind: "network", hint: "Check that the lh server is running and reachable, then reload the page." });
    }
    if (!res.ok) {
      const err = errorFrom(res, raw);
      if (res.status === 401 && !opts.probe) signedOut(err);
      throw err;
    }
    if (opts.text) return raw;
    try {
      return parseJson(raw);
    } catch (_) {
      throw new ApiError("The server sent an answer that is not JSON.", { status: res.status, kind: "bad_response" });
    }
  }

  // ------------------------------------------------------------------ page state

  function setState(s) { document.documentElement.dataset.state = s; }
  function setPage(p) { document.documentElement.dataset.page = p; }

  function showError(err) {
    const box = $("#error");
    replace(box,
      el("strong", { class: "error-message" }, err && err.message ? err.message : String(err)),
      err && err.hint ? el("div", { class: "error-hint" }, err.hint) : null);
    box.hidden = false;
    setState("error");
  }

  function clearError() {
    const box = $("#error");
    box.hidden = true;
    replace(box);
  }

  /**
   * A route's context: its fetches are aborted and its timers cleared when the user
   * goes elsewhere; `task` runs one piece of loading work and keeps data-state right.
   */
  function newContext() {
    if (app.ctx) app.ctx.dispose();
    const controller = new AbortController();
    const timers = new Set();
    const ctx = {
      pending: 0,
      signal: controller.signal,
      get alive() { return app.ctx === ctx; },
      api: (path, opts) => api(path, Object.assign({}, opts, { signal: controller.signal })),
      later(fn, ms) {
        const t = setTimeout(() => { timers.delete(t); if (ctx.alive) fn(); }, ms);
        timers.add(t);
      },
      dispose() {
        controller.abort();
        timers.forEach(clearTimeout);
        timers.clear();
      },
      async task(fn) {
        ctx.pending++;
        clearError();
        setState("loading");
        let error = null;
        try { await fn(); } catch (e) { error = e; }
        ctx.pending--;
        if (!ctx.alive || isAbort(error) || (error && error.status === 401)) return;
        if (error) {
          if (!(error instanceof ApiError)) console.error(error);
          showError(error);
        } else if (ctx.pending === 0) setState($("#error").hidden ? "ready" : "error");
      },
    };
    app.ctx = ctx;
    return ctx;
  }

  // ------------------------------------------------------------------ refs

  async function getRefs(ctx, fresh) {
    if (!app.refs || fresh) {
      const refs = await ctx.api("/api/v1/refs");
      app.refs = Array.isArray(refs) ? refs : [];
    }
    return app.refs;
  }

  const isRunBranch = (r) => r.kind === "branch" && r.name.startsWith(RUN_BRANCH_PREFIX);

  function sortRefs(refs) {
    const def = app.info.default_branch;
    const rank = (r) => (r.name === def ? 0 : isRunBranch(r) ? 2 : 1);
    return refs.slice().sort((a, b) => rank(a) - rank(b) || a.name.localeCompare(b.name));
  }

  function setCurrentRef(ref) {
    if (!ref) return;
    app.currentRef = ref;
    $("#nav-tables").setAttribute("href", href("tables", ref));
  }

  /** Becomes the current ref when it names a branch or a tag. */
  function noteRef(ref) {
    if (app.refs && app.refs.some((r) => r.name === ref)) setCurrentRef(ref);
  }

  /**
   * A select of branches and tags plus a free ref expression. With `onPick`, choosing
   * navigates; without, the caller reads `value()` (the expression wins when filled).
   */
  function refPicker({ selectId, exprId, refs, value, onPick }) {
    const select = el("select", { id: selectId, title: "Branch or tag" });
    const sorted = sortRefs(refs);
    const groups = [
      ["Branches", sorted.filter((r) => r.kind === "branch" && !isRunBranch(r))],
      ["Tags", sorted.filter((r) => r.kind === "tag")],
      ["Run branches", sorted.filter(isRunBranch)],
    ];
    const known = refs.some((r) => r.name === value);
    if (!known) select.append(el("option", { value: "", disabled: true }, "(expression)"));
    for (const [label, list] of groups) {
      if (list.length) select.append(el("optgroup", { label }, list.map((r) => el("option", { value: r.name }, r.name))));
    }
    const expr = el("input", {
      id: exprId, type: "text", class: "mono", spellcheck: "false", autocomplete: "off",
      placeholder: "or a ref expression: commit id, branch@<hex>", title: "Any ref expression; wins over the list when filled",
    });
    if (known) select.value = value;
    else if (onPick) { select.value = ""; expr.value = value || ""; } else {
      select.value = refs.some((r) => r.name === app.info.default_branch) ? app.info.default_branch : "";
      expr.value = value || "";
    }
    const parts = [el("label", { class: "picker-label", for: selectId }, "Ref"), select, expr];
    if (onPick) {
      select.addEventListener("change", () => select.value && onPick(select.value));
      expr.addEventListener("keydown", (e) => { if (e.key === "Enter" && expr.value.trim()) onPick(expr.value.trim()); });
      parts.push(el("button", { type: "button", class: "btn", on: { click: () => onPick(expr.value.trim() || select.value) } }, "Go"));
    }
    return {
      node: el("div", { class: "picker" }, parts),
      value: () => expr.value.trim() || select.value || app.info.default_branch,
    };
  }

  // ------------------------------------------------------------------ page: refs

  async function renderRefs(ctx, params, main) {
    const refs = await getRefs(ctx, true);
    const branches = sortRefs(refs.filter((r) => r.kind === "branch"));
    const tags = sortRefs(refs.filter((r) => r.kind === "tag"));
    main.append(
      pageHead("Refs", el("span", { class: "muted" }, `${plural(branches.length, "branch", "branches")} · ${plural(tags.length, "tag", "tags")}`)),
      el("h2", null, "Branches"),
      refTable("branches", branches, "No branches."),
      el("h2", null, "Tags"),
      refTable("tags", tags, "No tags yet: `lh tag create NAME --from REF` makes one."));
  }

  function refTable(id, refs, emptyText) {
    const def = app.info.default_branch;
    const rows = refs.map((r) => el("tr", { class: "ref", dataset: { ref: r.name } },
      el("td", { class: "name" }, link(ellipsis(r.name), href("graph", r.name), { class: "ref-name" })),
      el("td", null, idEl(r.head, href("commit", r.head))),
      el("td", { class: "flags" },
        r.name === def ? badge("default", "default") : null,
        r.protected ? badge("protected", "protected", r.required_checks && r.required_checks.length ? "required checks: " + r.required_checks.join(", ") : "changes only by a merge") : null,
        isRunBranch(r) ? badge("run", "run", "the branch of a run (kept after a failure)") : null),
      el("td", { class: "actions" },
        link("tables", href("tables", r.name)), " ",
        link("sql", href("sql", r.name)), " ",
        r.name !== def ? link(`diff with ${def}`, href("diff", def, r.name)) : null)));
    return el("table", { id, class: "grid refs" },
      th("Name", "Head", "", ""),
      el("tbody", null, rows.length ? rows : empty(emptyText, 4)));
  }

  // ------------------------------------------------------------------ commit graph layout

  /**
   * Lays out a ref's history like `git log --graph`. `main` is the first-parent line,
   * newest first (lane 0); `sideLogs` maps a merge commit's id to the log of its second
   * parent. Each merge's side (its commits not already in the graph: older merges are
   * taken first, so a side stops where it forked) goes right below the merge, in a lane
   * of its own, lanes reused once free.
   * Returns {rows: [{commit, lane, side}], edges: [{from, to, kind}], stubs: [row], lanes}.
   */
  function layoutGraph(main, sideLogs) {
    const inGraph = new Set(main.map((c) => c.id));
    const sides = new Map();
    for (let i = main.length - 1; i >= 0; i--) {
      const m = main[i];
      if (!m.parents || m.parents.length < 2) continue;
      const taken = [];
      for (const c of sideLogs.get(m.id) || []) {
        if (inGraph.has(c.id)) break;
        taken.push(c);
      }
      taken.forEach((c) => inGraph.add(c.id));
      if (taken.length) sides.set(m.id, taken);
    }
    const rows = [];
    const rowOf = new Map();
    const push = (commit, side) => { rowOf.set(commit.id, rows.length); rows.push({ commit, lane: 0, side }); };
    for (const m of main) {
      push(m, null);
      for (const c of sides.get(m.id) || []) push(c, m.id);
    }
    const edges = [];
    const stubs = [];
    rows.forEach((r, i) => {
      (r.commit.parents || []).forEach((p, k) => {
        const j = rowOf.get(p);
        if (j === undefined) {
          if (k === 0) stubs.push(i);
          return;
        }
        let kind = k > 0 ? "merge" : "normal";
        if (k === 0 && r.side && rows[j].side !== r.side) kind = "fork";
        edges.push({ from: i, to: j, kind });
      });
    });
    // A side that forks from the newest commit of an older side continues its lane
    // (a branch merged twice); the sides of a lane are one group.
    const group = new Map();
    const find = (side) => { while (group.has(side)) side = group.get(side); return side; };
    for (const e of edges) {
      const a = rows[e.from], b = rows[e.to];
      if (e.kind === "fork" && b.side && rowOf.get(sides.get(b.side)[0].id) === e.to && find(a.side) !== find(b.side)) {
        group.set(find(b.side), find(a.side));
      }
    }
    // The rows each group's lane is busy: from its first child to its last parent.
    const span = new Map();
    const touch = (side, row) => {
      if (!side) return;
      side = find(side);
      const s = span.get(side) || { side, start: row, end: row };
      s.start = Math.min(s.start, row);
      s.end = Math.max(s.end, row);
      span.set(side, s);
    };
    rows.forEach((r, i) => touch(r.side, i));
    for (const e of edges) {
      for (const side of [rows[e.from].side, rows[e.to].side]) { touch(side, e.from); touch(side, e.to); }
    }
    for (const i of stubs) touch(rows[i].side, i + 1);
    const laneEnds = []; // laneEnds[k] = last busy row of lane k + 1
    const laneOf = new Map();
    [...span.values()].sort((a, b) => a.start - b.start || a.end - b.end).forEach((s) => {
      let k = laneEnds.findIndex((end) => end <= s.start);
      if (k < 0) { k = laneEnds.length; laneEnds.push(0); }
      laneEnds[k] = s.end;
      laneOf.set(s.side, k + 1);
    });
    rows.forEach((r) => { r.lane = r.side ? laneOf.get(find(r.side)) : 0; });
    return { rows, edges, stubs, lanes: laneEnds.length + 1 };
  }

  // ------------------------------------------------------------------ page: graph

  async function renderGraph(ctx, ref, selectId, main) {
    ref = ref || app.currentRef || app.info.default_branch;
    const [refs, page] = await Promise.all([
      getRefs(ctx, true), // fresh: the rows are labelled with the refs at them
      ctx.api(`/api/v1/log?ref=${enc(ref)}&limit=${LOG_PAGE}`),
    ]);
    noteRef(ref);
    const g = {
      ref, main: page.commits || [], next: page.next_page_token || null,
      sideLogs: new Map(), byId: new Map(), selected: null, selectSeq: 0,
      body: el("div", { class: "graph-body" }),
      detail: el("aside", { id: "commit-detail", class: "panel" }),
      more: el("div", { class: "more" }),
    };
    g.main.forEach((c) => g.byId.set(c.id, c));
    await loadSides(ctx, g, g.main);
    const picker = refPicker({ selectId: "ref", exprId: "ref-expr", refs, value: ref, onPick: (r) => { location.hash = href("graph", r); } });
    main.append(
      pageHead("History", el("code", { class: "ref-title", title: ref }, ref)),
      el("div", { class: "toolbar" }, picker.node,
        el("span", { class: "spacer" }),
        link("tables", href("tables", ref)), link("sql", href("sql", ref))),
      el("div", { class: "graph-page" },
        el("section", { class: "graph-main" }, g.body, g.more),
        g.detail));
    drawGraph(ctx, g);
    if (!g.main.length) {
      g.detail.append(el("p", { class: "muted" }, "No commits."));
      return;
    }
    const wanted = selectId ? ([...g.byId.keys()].find((id) => id === selectId || id.startsWith(selectId)) || selectId) : g.main[0].id;
    await selectCommit(ctx, g, wanted);
  }

  async function loadSides(ctx, g, commits) {
    const merges = commits.filter((c) => c.parents && c.parents.length >= 2 && !g.sideLogs.has(c.id));
    const logs = await Promise.all(merges.map((m) =>
      ctx.api(`/api/v1/log?ref=${enc(atCommit(m.parents[1]))}&limit=${SIDE_PAGE}`).then((p) => p.commits || [], (e) => {
        if (isAbort(e) || e.status === 401) throw e;
        return []; // an unreadable side: the first-parent line still shows
      })));
    merges.forEach((m, i) => {
      g.sideLogs.set(m.id, logs[i]);
      logs[i].forEach((c) => { if (!g.byId.has(c.id)) g.byId.set(c.id, c); });
    });
  }

  async function loadMore(ctx, g) {
    const page = await ctx.api(`/api/v1/log?ref=${enc(g.ref)}&limit=${LOG_PAGE}&page_token=${enc(g.next)}`);
    const onMain = new Set(g.main.map((c) => c.id));
    const fresh = (page.commits || []).filter((c) => !onMain.has(c.id));
    g.main.push(...fresh);
    fresh.forEach((c) => g.byId.set(c.id, c));
    g.next = page.next_page_token || null;
    await loadSides(ctx, g, fresh);
    drawGraph(ctx, g);
  }

  function drawGraph(ctx, g) {
    const layout = layoutGraph(g.main, g.sideLogs);
    const width = 12 + layout.lanes * LANE_W;
    const height = Math.max(layout.rows.length, 1) * ROW_H;
    const x = (lane) => 10 + lane * LANE_W;
    const y = (row) => row * ROW_H + ROW_H / 2;
    const svg = svgEl("svg", { id: "graph", class: "graph", width, height, viewBox: `0 0 ${width} ${height}`, "aria-hidden": "true" });
    const select = (id) => ctx.task(() => selectCommit(ctx, g, id, true));
    for (const e of layout.edges) {
      const a = layout.rows[e.from];
      const b = layout.rows[e.to];
      const [xa, ya, xb, yb] = [x(a.lane), y(e.from), x(b.lane), y(e.to)];
      let d;
      if (a.lane === b.lane) d = `M${xa} ${ya}V${yb}`;
      else if (b.lane > a.lane) d = `M${xa} ${ya}C${xa} ${ya + ROW_H / 2} ${xb} ${ya + ROW_H / 2} ${xb} ${ya + ROW_H}V${yb}`;
      else d = `M${xa} ${ya}V${yb - ROW_H}C${xa} ${yb - ROW_H / 2} ${xb} ${yb - ROW_H / 2} ${xb} ${yb}`;
      svg.append(svgEl("path", {
        d, class: ["edge", e.kind !== "normal" && e.kind, "lane-" + (Math.max(a.lane, b.lane) % 8)],
        dataset: { from: a.commit.id, to: b.commit.id },
      }));
    }
    for (const i of layout.stubs) {
      const r = layout.rows[i];
      svg.append(svgEl("path", { d: `M${x(r.lane)} ${y(i)}V${y(i) + ROW_H * 0.8}`, class: ["edge-more", "lane-" + (r.lane % 8)] }));
    }
    const refsAt = new Map();
    for (const r of app.refs || []) {
      if (!refsAt.has(r.head)) refsAt.set(r.head, []);
      refsAt.get(r.head).push(r);
    }
    const list = el("div", { class: "commit-list" },
      el("div", { class: "graph-head" }, el("span", { class: "c-id" }, "Commit"), el("span", { class: "c-msg" }, "Message"),
        el("span", { class: "c-author" }, "Author"), el("span", { class: "c-time" }, "Time")));
    layout.rows.forEach((r, i) => {
      const c = r.commit;
      const merge = (c.parents || []).length >= 2;
      const dot = svgEl("g", { class: ["commit", merge && "merge", "lane-" + (r.lane % 8)], dataset: { commit: c.id }, on: { click: () => select(c.id) } },
        svgEl("title", null, `${shortId(c.id)} ${firstLine(c.message)}`),
        svgEl("circle", { class: "commit-dot", cx: x(r.lane), cy: y(i), r: merge ? 5 : 4 }));
      svg.append(dot);
      list.append(el("div", {
        class: ["commit-row", merge && "merge", r.side && "side"], dataset: { commit: c.id },
        on: { click: (e) => { if (!e.target.closest("a")) select(c.id); } },
      },
      el("code", { class: "c-id", title: c.id }, shortId(c.id)),
      el("span", { class: "c-msg" },
        (refsAt.get(c.id) || []).map((ref) => badge(ref.name, "ref-label " + (ref.kind === "tag" ? "tag" : "branch"), `${ref.kind} ${ref.name}`)),
        ellipsis(firstLine(c.message) || "(no message)", "msg"),
        propBadges(c.properties)),
      el("span", { class: "c-author" }, ellipsis(c.author)),
      el("span", { class: "c-time" }, timeEl(c.timestamp))));
    });
    replace(g.body, el("div", { class: "graph-svg" }, svg), list);
    if (!layout.rows.length) replace(g.body, el("p", { class: "muted pad" }, "No commits."));
    replace(g.more, g.next ? el("button", { id: "load-more", type: "button", class: "btn", on: { click: () => ctx.task(() => loadMore(ctx, g)) } }, "Load more") : null);
    markSelected(g);
  }

  function propBadges(props) {
    if (!props) return null;
    return NOTABLE_PROPS.filter((k) => props[k] !== undefined && props[k] !== null).map((k) => {
      const v = String(props[k]);
      const label = k === "lh.run" ? "run " + shortId(v) : `${k.slice(3)}: ${v.length > 24 ? v.slice(0, 23) + "…" : v}`;
      const b = el("span", { class: "prop-badge", title: `${k} = ${v}`, dataset: { prop: k } }, label);
      return k === "lh.run" ? el("a", { href: href("run", v), class: "prop-link" }, b) : b;
    });
  }

  function markSelected(g) {
    for (const node of document.querySelectorAll(".commit-row.selected, g.commit.selected")) node.classList.remove("selected");
    if (!g.selected) return;
    for (const node of document.querySelectorAll(".commit-row[data-commit], g.commit[data-commit]")) {
      if (node.dataset.commit === g.selected) node.classList.add("selected");
    }
  }

  async function selectCommit(ctx, g, id, byUser) {
    const seq = ++g.selectSeq;
    g.selected = id;
    markSelected(g);
    if (byUser) history.replaceState(null, "", location.pathname + location.search + href("graph", g.ref, id));
    let commit = g.byId.get(id);
    if (!commit) {
      replace(g.detail, el("p", { class: "muted" }, "Loading…"));
      commit = await ctx.api(`/api/v1/commits/${enc(id)}`);
      if (seq !== g.selectSeq) return;
      g.byId.set(commit.id, commit);
      g.selected = commit.id;
      markSelected(g);
    }
    const changed = el("ul", { id: "changed-tables", class: "changed" });
    renderCommitDetail(ctx, g, commit, changed);
    const parent = (commit.parents || [])[0];
    if (!parent) {
      changed.append(el("li", { class: "empty muted" }, "no parent: this is the first commit"));
      return;
    }
    changed.append(el("li", { class: "empty muted" }, "Loading…"));
    const diff = await ctx.api(`/api/v1/diff?from=${enc(atCommit(parent))}&to=${enc(atCommit(commit.id))}`);
    if (seq !== g.selectSeq) return;
    replace(changed);
    for (const t of diff.tables || []) {
      const at = t.change === "removed" ? parent : commit.id;
      changed.append(el("li", { dataset: { table: t.table, change: t.change } },
        changeBadge(t.change),
        link(ellipsis(t.table), href("table", at, t.table), { class: "table-link" }),
        el("span", { class: "snapshots muted mono small", title: "snapshot ids, before → after" }, snapshotArrow(t))));
    }
    if (!(diff.tables || []).length) changed.append(el("li", { class: "empty muted" }, "no table changed"));
  }

  function renderCommitDetail(ctx, g, c, changed) {
    const parentLinks = (c.parents || []).map((p, i) => el("button", {
      type: "button", class: "link-button mono", title: p + (i === 0 ? " (first parent)" : " (merged)"),
      on: { click: () => ctx.task(() => selectCommit(ctx, g, p, true)) },
    }, shortId(p)));
    replace(g.detail,
      el("div", { class: "panel-head" },
        el("h3", null, (c.parents || []).length >= 2 ? "Merge commit" : "Commit"),
        el("span", { class: "spacer" }),
        link("tables", href("tables", c.id)), link("sql", href("sql", c.id))),
      facts([
        ["Id", el("code", { class: "full-id" }, c.id)],
        ["Author", c.author],
        ["Time", timeEl(c.timestamp)],
        ["Parents", parentLinks.length ? parentLinks : el("span", { class: "muted" }, "none (first commit)")],
      ]),
      el("pre", { class: "message" }, c.message || "(no message)"),
      el("h4", null, "Properties"),
      kvTable(c.properties, "props", (k, v) => (k === "lh.run" ? link(ellipsis(v), href("run", v)) : ellipsis(v))),
      el("h4", null, "Changed tables"),
      changed);
  }

  function changeBadge(change) {
    return badge(change, "change change-" + String(change).replace(/[^a-z]/gi, ""));
  }

  function snapshotArrow(t) {
    const s = (p) => (p && p.snapshot_id !== null && p.snapshot_id !== undefined ? String(p.snapshot_id) : "—");
    return `${s(t.from)} → ${s(t.to)}`;
  }

  // ------------------------------------------------------------------ page: tables

  async function renderTables(ctx, ref, main) {
    ref = ref || app.currentRef || app.info.default_branch;
    const [refs, list] = await Promise.all([getRefs(ctx), ctx.api(`/api/v1/tables?ref=${enc(ref)}`)]);
    noteRef(ref);
    const namespaceOf = (name) => (name.lastIndexOf(".") > 0 ? name.slice(0, name.lastIndexOf(".")) : "");
    const tables = (list.tables || []).slice()
      .sort((a, b) => namespaceOf(a.name).localeCompare(namespaceOf(b.name)) || a.name.localeCompare(b.name));
    const picker = refPicker({ selectId: "ref", exprId: "ref-expr", refs, value: ref, onPick: (r) => { location.hash = href("tables", r); } });
    const filter = el("input", { id: "table-filter", type: "search", placeholder: "Filter tables", autocomplete: "off", spellcheck: "false" });
    const tbody = el("tbody");
    let ns = null;
    for (const t of tables) {
      const dot = t.name.lastIndexOf(".");
      const space = namespaceOf(t.name);
      if (space !== ns) {
        ns = space;
        tbody.append(el("tr", { class: "group", dataset: { namespace: space } }, el("th", { colspan: 3 }, space || "(no namespace)")));
      }
      const p = t.pointer || {};
      tbody.append(el("tr", { dataset: { table: t.name } },
        el("td", { class: "name" }, link(el("span", { class: "ellipsis", title: t.name },
          el("span", { class: "muted" }, dot > 0 ? t.name.slice(0, dot + 1) : ""), t.name.slice(dot + 1)), href("table", ref, t.name))),
        el("td", { class: "mono" }, p.snapshot_id !== null && p.snapshot_id !== undefined ? String(p.snapshot_id) : el("span", { class: "muted" }, "no snapshot")),
        el("td", { class: "mono muted" }, ellipsis(p.table_uuid || ""))));
    }
    if (!tables.length) tbody.append(empty("No tables at this ref. `lh import` or a run of a project makes some.", 3));
    filter.addEventListener("input", () => filterTables(tbody, filter.value.trim().toLowerCase()));
    main.append(
      pageHead("Tables", el("code", { class: "ref-title", title: ref }, ref),
        el("span", { class: "muted" }, "at commit "), idEl(list.commit, href("commit", list.commit)),
        el("span", { class: "muted" }, ` · ${plural(tables.length, "table", "tables")}`)),
      el("div", { class: "toolbar" }, picker.node, el("span", { class: "spacer" }), filter),
      el("table", { id: "tables", class: "grid tables" }, th("Table", "Snapshot", "Table UUID"), tbody));
  }

  function filterTables(tbody, q) {
    let group = null;
    let shown = 0;
    const close = () => { if (group) group.hidden = shown === 0; };
    for (const tr of tbody.children) {
      if (tr.classList.contains("group")) { close(); group = tr; shown = 0; continue; }
      if (!tr.dataset.table) continue;
      tr.hidden = !!q && !tr.dataset.table.toLowerCase().includes(q);
      if (!tr.hidden) shown++;
    }
    close();
  }

  // ------------------------------------------------------------------ page: table

  async function renderTable(ctx, ref, name, main) {
    if (!name) throw new ApiError("No table named in the address.", { hint: "Open a table from the Tables page." });
    ref = ref || app.currentRef;
    const sql = `SELECT * FROM ${quoteIdent(name)} LIMIT ${PREVIEW_ROWS}`;
    // Started together; the preview's failure is shown in place, not as the page's.
    const preview = ctx.api("/api/v1/query", { body: { sql, ref, max_rows: PREVIEW_ROWS } }).then((r) => ({ r }), (e) => ({ e }));
    const [d] = await Promise.all([ctx.api(`/api/v1/tables/${enc(name)}?ref=${enc(ref)}`), getRefs(ctx)]);
    noteRef(ref);
    const p = d.pointer || {};
    const current = p.snapshot_id !== null && p.snapshot_id !== undefined ? String(p.snapshot_id) : null;
    const openSql = () => {
      sessionStorage.setItem(SQL_KEY, `SELECT *\nFROM ${quoteIdent(name)}\nLIMIT 100`);
      location.hash = href("sql", ref);
    };
    const partition = d.partition_by ? d.partition_by : "unpartitioned";
    main.append(
      pageHead(d.name, el("span", { class: "muted" }, "@"), link(el("code", { class: "ref-title", title: ref }, ref), href("graph", ref)),
        el("span", { class: "spacer" }), link("all tables", href("tables", ref)),
        el("button", { type: "button", class: "btn", on: { click: openSql } }, "Query in SQL")),
      facts([
        ["Rows", el("span", { class: "num" }, fmtInt(d.rows))],
        ["Files", fmtInt(d.files)],
        ["Size", el("span", { title: fmtInt(d.size_bytes) + " bytes" }, fmtBytes(d.size_bytes))],
        ["Delete files", d.delete_files === undefined ? undefined : fmtInt(d.delete_files)],
        ["Format version", `v${d.format_version}`],
        ["Partitioning", el("span", { class: ["mono", !d.partition_by && "muted"], title: d.partition_spec_id !== undefined ? `spec id ${d.partition_spec_id}` : null }, partition), "partitioning"],
        ["Snapshot", current ? el("code", null, current) : null],
        ["Table UUID", p.table_uuid ? el("code", null, p.table_uuid) : null],
        ["Location", el("code", null, ellipsis(d.location))],
        ["Metadata", p.metadata_location ? el("code", null, ellipsis(p.metadata_location)) : null],
        ["Commit read", idEl(d.commit, href("commit", d.commit))],
      ], "table-facts"),
      el("div", { class: "two-col" },
        el("section", null, el("h2", null, "Schema ", el("span", { class: "muted small" }, plural((d.columns || []).length, "column", "columns"))), schemaTable(d.columns || [])),
        el("section", null, el("h2", null, "Snapshots ", el("span", { class: "muted small" }, fmtInt((d.snapshots || []).length))), snapshotsTable(d.snapshots || [], current))),
      el("h2", null, "Preview ", el("code", { class: "muted small" }, sql)));
    const pv = await preview;
    if (pv.e) {
      if (isAbort(pv.e) || pv.e.status === 401) throw pv.e;
      main.append(el("div", { class: "inline-error" }, el("strong", null, pv.e.message), pv.e.hint ? el("div", null, pv.e.hint) : null));
    } else {
      main.append(el("p", { class: "muted small" }, pv.r.truncated ? `first ${fmtInt(pv.r.rows.length)} rows` : plural(pv.r.rows.length, "row", "rows")),
        el("div", { class: "result-wrap" }, resultTable("preview", pv.r)));
    }
  }

  function schemaTable(columns) {
    return el("table", { id: "schema", class: "grid schema" }, th("Id", "Name", "Type", "Required"),
      el("tbody", null, columns.length ? columns.map((c) => el("tr", { dataset: { column: c.name } },
        el("td", { class: "num muted" }, String(c.id)),
        el("td", { class: "mono" }, ellipsis(c.name)),
        el("td", { class: "mono type" }, ellipsis(c.type)),
        el("td", null, c.required ? "required" : el("span", { class: "muted" }, "optional")))) : empty("No columns.", 4)));
  }

  function snapshotsTable(snapshots, current) {
    const sv = (s, k) => (s.summary && s.summary[k] !== undefined ? fmtInt(s.summary[k]) : "");
    const rows = snapshots.slice(0, 200).map((s) => {
      const id = String(s.snapshot_id);
      const summary = Object.entries(s.summary || {}).map(([k, v]) => `${k} = ${v}`).join("\n");
      return el("tr", { dataset: { snapshot: id } },
        el("td", { class: "mono" }, id, id === current ? badge("current", "current") : null),
        el("td", null, timeEl(s.timestamp)),
        el("td", { title: summary || null }, badge(s.operation, "op op-" + String(s.operation).replace(/[^a-z]/gi, ""))),
        el("td", { class: "num" }, sv(s, "added-records")),
        el("td", { class: "num" }, sv(s, "deleted-records")),
        el("td", { class: "num" }, sv(s, "total-records")),
        el("td", { class: "num" }, sv(s, "total-data-files")));
    });
    if (snapshots.length > 200) rows.push(empty(`${fmtInt(snapshots.length - 200)} older snapshots not shown`, 7));
    return el("table", { id: "snapshots", class: "grid snapshots" },
      th("Snapshot", "Time", "Operation", "Added rows", "Deleted rows", "Total rows", "Data files"),
      el("tbody", null, rows.length ? rows : empty("No snapshots: the table is empty.", 7)));
  }

  // ------------------------------------------------------------------ SQL results

  function resultTable(id, r) {
    const columns = r.columns || [];
    const numeric = columns.map((c) => NUMERIC_TYPE.test(String(c.type || "")));
    const head = el("thead", null, el("tr", null, columns.map((c, i) => el("th", {
      title: c.type, class: numeric[i] ? "num" : null, dataset: { column: c.name, type: c.type },
    }, el("div", { class: "col-name" }, c.name), el("div", { class: "col-type" }, c.type)))));
    const body = el("tbody");
    for (const row of r.rows || []) {
      body.append(el("tr", null, row.map((v, i) => {
        if (v === null || v === undefined) return el("td", { class: "null" }, el("span", { class: "null" }, "NULL"));
        const s = typeof v === "string" ? v : JSON.stringify(v);
        return el("td", { class: numeric[i] ? "num" : null, title: s.length > 40 || s.includes("\n") ? s : null }, s);
      })));
    }
    const table = el("table", { id, class: "grid result" }, head, body);
    // The empty state stays out of the table: its body holds result rows only.
    if ((r.rows || []).length) return table;
    return el("div", null, table, el("p", { class: "empty-result muted" }, columns.length ? "No rows." : "The statement returned nothing."));
  }

  // ------------------------------------------------------------------ page: sql

  async function renderSql(ctx, ref, main) {
    ref = ref || app.currentRef || app.info.default_branch;
    const refs = await getRefs(ctx);
    noteRef(ref);
    const picker = refPicker({ selectId: "query-ref", exprId: "query-ref-expr", refs, value: ref });
    const textarea = el("textarea", {
      id: "sql", class: "mono", spellcheck: "false", autocomplete: "off", autocapitalize: "off", rows: 10,
      placeholder: "SELECT * FROM ns.table LIMIT 10", "aria-label": "SQL",
    });
    textarea.value = sessionStorage.getItem(SQL_KEY) || "";
    const button = el("button", { id: "run-query", type: "button", class: "btn primary", title: "Ctrl+Enter / ⌘+Enter" }, "Run");
    const status = el("div", { id: "query-status", class: "status-line" });
    const output = el("div", { class: "result-wrap" });
    const run = () => {
      if (button.disabled) return;
      const selected = textarea.value.slice(textarea.selectionStart, textarea.selectionEnd);
      const sql = selected.trim() ? selected : textarea.value;
      if (!sql.trim()) { textarea.focus(); return; }
      sessionStorage.setItem(SQL_KEY, textarea.value);
      ctx.task(() => runQuery(ctx, { sql, ref: picker.value(), button, status, output }));
    };
    button.addEventListener("click", run);
    textarea.addEventListener("keydown", (e) => {
      if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); run(); }
    });
    textarea.addEventListener("input", () => sessionStorage.setItem(SQL_KEY, textarea.value));
    main.append(
      pageHead("SQL", el("span", { class: "muted" }, `read-only · at most ${fmtInt(MAX_ROWS)} rows · times out after ${fmtDuration(app.info.query_timeout_ms)}`)),
      el("div", { class: "toolbar" }, picker.node),
      textarea,
      el("div", { class: "toolbar" }, button, el("span", { class: "muted small" }, "Ctrl+Enter runs (the selection, if any)"), el("span", { class: "spacer" }), status),
      output);
    output.append(el("p", { class: "muted" }, "Results show here."));
    textarea.focus();
  }

  async function runQuery(ctx, { sql, ref, button, status, output }) {
    button.disabled = true;
    replace(status, el("span", { class: "spinner" }), " running…");
    output.classList.add("stale");
    try {
      const r = await ctx.api("/api/v1/query", { body: { sql, ref, max_rows: MAX_ROWS } });
      if (!ctx.alive) return;
      noteRef(ref);
      const n = (r.rows || []).length;
      replace(status,
        el("span", { class: "rows" }, plural(n, "row", "rows")),
        r.truncated ? el("span", { class: "truncated" }, ` · truncated at ${plural(n, "row", "rows")}`) : null,
        " · commit ", idEl(r.commit, r.commit ? href("commit", r.commit) : null),
        ` · ${fmtDuration(Number(r.elapsed_ms))}`);
      replace(output, resultTable("result", r));
    } catch (e) {
      if (ctx.alive && !isAbort(e)) {
        replace(status, el("span", { class: "failed" }, "failed"));
        replace(output);
      }
      throw e;
    } finally {
      button.disabled = false;
      output.classList.remove("stale");
    }
  }

  // ------------------------------------------------------------------ runs

  function runDuration(run) {
    if (run.finished_at) return fmtDuration(between(run.created_at, run.finished_at));
    if (run.status === "running") return fmtDuration(between(run.created_at, "now")) + " …";
    return "—";
  }

  function nodesSummary(nodes) {
    if (!nodes || !nodes.length) return "no nodes";
    const count = (...st) => nodes.filter((n) => st.includes(n.status)).length;
    const parts = [`${count("done", "passed", "warned", "cached")}/${nodes.length} done`];
    const extra = [["cached", count("cached")], ["running", count("running")], ["failed", count("failed")],
      ["warned", count("warned")], ["skipped", count("skipped")], ["cancelled", count("cancelled")]];
    for (const [label, n] of extra) if (n) parts.push(`${n} ${label}`);
    return parts.join(", ");
  }

  async function renderRuns(ctx, main) {
    const { runs = [] } = await ctx.api("/api/v1/runs?limit=100");
    const rows = runs.map((r) => el("tr", { class: "run", dataset: { run: r.id, status: r.status } },
      el("td", null, idEl(r.id, href("run", r.id))),
      el("td", null, ellipsis(r.project)),
      el("td", null, statusBadge(r.status)),
      el("td", null, link(ellipsis(r.target), href("graph", r.target))),
      el("td", null, ellipsis(r.author)),
      el("td", null, timeEl(r.created_at)),
      el("td", { class: "num" }, runDuration(r)),
      el("td", { class: "small" }, nodesSummary(r.nodes))));
    main.append(
      pageHead("Runs", el("span", { class: "muted" }, plural(runs.length, "run", "runs")), el("span", { class: "spacer" }),
        el("button", { type: "button", class: "btn", on: { click: () => onRoute() } }, "Refresh")),
      el("table", { id: "runs", class: "grid runs" },
        th("Run", "Project", "Status", "Target", "Author", "Started", "Duration", "Nodes"),
        el("tbody", null, rows.length ? rows : empty("No runs yet. `lh run DIR` runs a project's pipeline.", 8))));
  }

  // ------------------------------------------------------------------ DAG layout

  const baseName = (name) => String(name).replace(/\[[^\]]*\]$/, "");
  const partitionOf = (name) => { const m = /\[([^\]]*)\]$/.exec(String(name)); return m ? m[1] : null; };
  const lastPart = (name) => { const s = baseName(name); return s.slice(s.lastIndexOf(".") + 1); };

  /** The edges [producer, consumer] of a run's nodes: `depends_on`, else derived from inputs. */
  function dagEdges(nodes) {
    const names = new Set(nodes.map((n) => n.name));
    const seen = new Set();
    const edges = [];
    const add = (from, to) => {
      const key = from + "\u0000" + to;
      if (from !== to && names.has(from) && !seen.has(key)) { seen.add(key); edges.push([from, to]); }
    };
    if (nodes.some((n) => Array.isArray(n.depends_on) && n.depends_on.length)) {
      for (const n of nodes) for (const d of n.depends_on || []) add(d, n.name);
      return edges;
    }
    // Old runs: a model makes the table named like it. The whole name first; the last
    // dotted part only when one of the two names has no namespace.
    const models = nodes.filter((n) => n.kind === "model");
    const hasNamespace = (name) => baseName(name).includes(".");
    const producersOf = (input) => {
      const exact = models.filter((m) => baseName(m.name) === input);
      if (exact.length) return exact;
      return models.filter((m) => lastPart(m.name) === lastPart(input) && !(hasNamespace(m.name) && hasNamespace(input)));
    };
    for (const n of nodes) {
      for (const input of n.inputs || []) {
        const candidates = producersOf(baseName(input)).filter((p) => p.name !== n.name);
        const part = partitionOf(n.name);
        const same = part === null ? [] : candidates.filter((p) => partitionOf(p.name) === part);
        for (const p of same.length ? same : candidates) add(p.name, n.name);
      }
    }
    return edges;
  }

  /**
   * A left-to-right layered layout: layer = longest path from a source; edges over
   * several layers get dummy points; order within a layer by barycenter sweeps.
   * Returns {nodes: [{node, x, y, w, h}], edges: [{from, to, points}], width, height}.
   */
  function layoutDag(nodes, size = {}) {
    const W = size.w || 210, H = size.h || 58;
    const GAP_X = size.gapX || 70, GAP_Y = size.gapY || 16, DUMMY_H = 10, PAD = 12;
    const edges = dagEdges(nodes);
    const index = new Map(nodes.map((n, i) => [n.name, i]));
    const preds = nodes.map(() => []);
    const succs = nodes.map(() => []);
    for (const [a, b] of edges) { preds[index.get(b)].push(index.get(a)); succs[index.get(a)].push(index.get(b)); }
    // Longest path from a source; a cycle (never expected) is cut where it closes.
    const layer = new Array(nodes.length).fill(-1);
    const onStack = new Array(nodes.length).fill(false);
    const depth = (i) => {
      if (layer[i] >= 0) return layer[i];
      onStack[i] = true;
      let l = 0;
      for (const p of preds[i]) if (!onStack[p]) l = Math.max(l, depth(p) + 1);
      onStack[i] = false;
      layer[i] = l;
      return l;
    };
    nodes.forEach((_, i) => depth(i));
    // Items per layer: nodes, and dummies of the edges that cross a layer.
    const items = [];
    const layers = [];
    const addItem = (item) => {
      item.id = items.length;
      items.push(item);
      (layers[item.layer] = layers[item.layer] || []).push(item);
      return item;
    };
    nodes.forEach((n, i) => addItem({ node: n, layer: layer[i], h: H, preds: [], succs: [] }));
    const chains = [];
    for (const [a, b] of edges) {
      const ia = index.get(a), ib = index.get(b);
      if (layer[ib] <= layer[ia]) continue; // a back edge of a cycle: not drawn
      const chain = [items[ia]];
      for (let l = layer[ia] + 1; l < layer[ib]; l++) chain.push(addItem({ dummy: true, layer: l, h: DUMMY_H, preds: [], succs: [] }));
      chain.push(items[ib]);
      for (let k = 1; k < chain.length; k++) { chain[k].preds.push(chain[k - 1]); chain[k - 1].succs.push(chain[k]); }
      chains.push({ from: a, to: b, chain });
    }
    for (let l = 0; l < layers.length; l++) layers[l] = layers[l] || [];
    // Barycenter ordering: down sweeps by predecessors, up sweeps by successors.
    const pos = new Map();
    const number = (list) => list.forEach((it, k) => pos.set(it, k));
    layers.forEach(number);
    const sortBy = (list, neighbours) => {
      const key = new Map(list.map((it) => {
        const ns = neighbours(it);
        return [it, ns.length ? ns.reduce((s, o) => s + pos.get(o), 0) / ns.length : pos.get(it)];
      }));
      list.sort((a, b) => key.get(a) - key.get(b) || pos.get(a) - pos.get(b));
      number(list);
    };
    for (let iter = 0; iter < 4; iter++) {
      for (let l = 1; l < layers.length; l++) sortBy(layers[l], (it) => it.preds);
      for (let l = layers.length - 2; l >= 0; l--) sortBy(layers[l], (it) => it.succs);
    }
    for (let l = 1; l < layers.length; l++) sortBy(layers[l], (it) => it.preds);
    // Vertical places: the first layer stacked; later items near their predecessors'
    // middle, never overlapping the item above.
    const centre = (it) => it.y + it.h / 2;
    layers.forEach((list, l) => {
      let bottom = -Infinity;
      for (const it of list) {
        const want = l === 0 || !it.preds.length ? (bottom === -Infinity ? 0 : bottom + GAP_Y)
          : it.preds.reduce((s, p) => s + centre(p), 0) / it.preds.length - it.h / 2;
        it.y = bottom === -Infinity ? Math.max(want, 0) : Math.max(want, bottom + GAP_Y);
        bottom = it.y + it.h;
      }
    });
    const top = Math.min(0, ...items.map((it) => it.y));
    for (const it of items) {
      it.y += PAD - top;
      it.x = PAD + it.layer * (W + GAP_X);
    }
    const height = Math.max(0, ...items.map((it) => it.y + it.h)) + PAD;
    const width = PAD * 2 + layers.length * W + Math.max(0, layers.length - 1) * GAP_X;
    const placed = items.filter((it) => !it.dummy).map((it) => ({ node: it.node, x: it.x, y: it.y, w: W, h: it.h }));
    const lines = chains.map(({ from, to, chain }) => {
      const points = [[chain[0].x + W, centre(chain[0])]];
      for (const it of chain.slice(1, -1)) points.push([it.x, centre(it)], [it.x + W, centre(it)]);
      const last = chain[chain.length - 1];
      points.push([last.x, centre(last)]);
      return { from, to, points };
    });
    return { nodes: placed, edges: lines, width: Math.max(width, 0), height: Math.max(height, 0) };
  }

  /** A path through points with horizontal tangents: smooth left-to-right edges. */
  function smoothPath(points) {
    let d = `M${points[0][0]} ${points[0][1]}`;
    for (let k = 1; k < points.length; k++) {
      const [x0, y0] = points[k - 1];
      const [x1, y1] = points[k];
      if (y0 === y1) d += `L${x1} ${y1}`;
      else {
        const mx = (x0 + x1) / 2;
        d += `C${mx} ${y0} ${mx} ${y1} ${x1} ${y1}`;
      }
    }
    return d;
  }

  // ------------------------------------------------------------------ page: run

  async function renderRun(ctx, id, main) {
    if (!id) throw new ApiError("No run named in the address.");
    const run = await ctx.api(`/api/v1/runs/${enc(id)}`);
    const view = {
      run, selected: null, allLogs: false, logs: null, nodeStatus: null,
      header: el("div", { id: "run-header" }),
      partitions: el("div", { id: "run-partitions" }),
      dag: el("div", { class: "dag-scroll" }),
      detail: el("section", { id: "node-detail", class: "panel" }),
    };
    main.append(view.header, view.partitions,
      el("div", { class: "dag-head" }, el("h2", null, "Nodes"), legend(), el("span", { class: "spacer" }),
        el("button", { id: "all-logs", type: "button", class: "btn", on: { click: () => ctx.task(() => openAllLogs(ctx, view)) } }, "All logs")),
      view.dag, view.detail);
    drawRun(ctx, view);
    view.detail.append(el("p", { class: "muted" }, "Select a node to see its details and logs."));
    if (run.status === "running") pollRun(ctx, view);
  }

  function drawRun(ctx, view) {
    renderRunHeader(view);
    renderPartitions(view);
    replace(view.dag, drawDag(ctx, view));
  }

  function renderRunHeader(view) {
    const r = view.run;
    const published = r.status === "succeeded";
    replace(view.header,
      pageHead(el("span", null, "Run ", el("code", { title: r.id }, shortId(r.id))), statusBadge(r.status),
        el("span", { class: "muted" }, r.project),
        r.status === "running" ? el("span", { class: "muted small live" }, "refreshing every 2 s") : null),
      facts([
        ["Project", r.project],
        ["Author", r.author],
        ["Target", link(el("code", null, r.target), href("graph", r.target))],
        ["Run branch", published
          ? el("span", null, el("code", null, r.run_branch), el("span", { class: "muted" }, " (deleted after publishing)"))
          : link(el("code", null, r.run_branch), href("graph", r.run_branch))],
        ["Started", timeEl(r.created_at)],
        ["Finished", r.finished_at ? timeEl(r.finished_at) : null],
        ["Duration", runDuration(r)],
        ["Input commit", idEl(r.input_commit, href("commit", r.input_commit))],
        ["Merge commit", r.merge_commit ? idEl(r.merge_commit, href("graph", r.target, r.merge_commit)) : null],
        ["Code hash", el("code", { title: r.code_hash }, shortId(r.code_hash))],
        ["Rerun of", r.rerun_of ? idEl(r.rerun_of, href("run", r.rerun_of)) : undefined],
        ["Options", el("span", null, r.no_cache ? badge("no cache", "opt") : null, r.strict ? badge("strict", "opt") : null,
          !r.no_cache && !r.strict ? el("span", { class: "muted" }, "defaults") : null)],
        ["Nodes", nodesSummary(r.nodes)],
        ["Params", Object.keys(r.params || {}).length ? kvTable(r.params, "params") : null],
      ], "run-facts"),
      r.error ? el("div", { class: "run-error" }, el("h4", null, "Error"), el("pre", { class: "error-text" }, r.error)) : null);
  }

  function renderPartitions(view) {
    const parts = view.run.partitions || [];
    if (!parts.length) { replace(view.partitions); return; }
    replace(view.partitions, el("h2", null, "Partitions ", el("span", { class: "muted small" }, fmtInt(parts.length))),
      el("table", { id: "partitions", class: "grid partitions" }, th("Partition", "Status", "Nodes"),
        el("tbody", null, parts.map((p) => el("tr", { dataset: { partition: p.partition, status: p.status } },
          el("td", { class: "mono" }, ellipsis(p.partition)),
          el("td", null, statusBadge(p.status)),
          el("td", { class: "small", title: (p.nodes || []).join("\n") }, plural((p.nodes || []).length, "node", "nodes")))))));
  }

  function legend() {
    return el("div", { class: "legend" }, NODE_STATUSES.map((s) => el("span", { class: "legend-item" },
      el("span", { class: "swatch status-" + s }), s)));
  }

  function clip(text, max) {
    const s = String(text);
    if (s.length <= max) return s;
    const tail = Math.floor((max - 1) / 2);
    return s.slice(0, max - 1 - tail) + "…" + s.slice(s.length - tail);
  }

  function drawDag(ctx, view) {
    const nodes = view.run.nodes || [];
    if (!nodes.length) return el("p", { class: "muted" }, "This run has no nodes.");
    const layout = layoutDag(nodes);
    const svg = svgEl("svg", { id: "dag", class: "dag", width: layout.width, height: layout.height, viewBox: `0 0 ${layout.width} ${layout.height}`, role: "img", "aria-label": "the run's nodes" },
      svgEl("defs", null, ["dag-arrow", "dag-arrow-active"].map((id) => svgEl("marker", {
        id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 8, markerHeight: 8, markerUnits: "userSpaceOnUse", orient: "auto-start-reverse",
      }, svgEl("path", { d: "M0 0L10 5L0 10z", class: id })))));
    for (const e of layout.edges) {
      const active = !!view.selected && (e.from === view.selected || e.to === view.selected);
      svg.append(svgEl("path", {
        d: smoothPath(e.points), class: ["dag-edge", active && "active"],
        "marker-end": active ? "url(#dag-arrow-active)" : "url(#dag-arrow)", dataset: { from: e.from, to: e.to },
      }));
    }
    for (const p of layout.nodes) {
      const n = p.node;
      const expectation = n.kind === "expectation";
      const dur = between(n.started_at, n.finished_at || (n.status === "running" ? "now" : null));
      const meta = [dur !== null ? fmtDuration(dur) : null, n.rows !== null && n.rows !== undefined ? plural(Number(n.rows), "row", "rows") : null]
        .filter(Boolean).join(" · ");
      const pad = expectation ? 16 : 10;
      const maxChars = Math.floor((p.w - 2 * pad) / 6.8);
      const g = svgEl("g", {
        class: ["node", expectation ? "expectation" : "model", view.selected === n.name && "selected"],
        dataset: { node: n.name, status: n.status }, transform: `translate(${p.x},${p.y})`, tabindex: 0,
        on: {
          click: () => ctx.task(() => selectNode(ctx, view, n.name)),
          keydown: (e) => { if (e.key === "Enter") ctx.task(() => selectNode(ctx, view, n.name)); },
        },
      },
      svgEl("title", null, `${n.name}\n${n.kind} · ${n.language} · ${n.status}${n.cached ? " (cached)" : ""}`),
      svgEl("rect", { class: "node-box", width: p.w, height: p.h, rx: expectation ? p.h / 2 : 6, ry: expectation ? p.h / 2 : 6 }),
      svgEl("text", { class: "node-name", x: pad, y: 18 }, clip(n.name, maxChars)),
      svgEl("text", { class: "node-sub", x: pad, y: 33 }, `${n.kind} · ${n.language}`),
      n.cached ? svgEl("text", { class: "node-cached", x: p.w - pad, y: 33, "text-anchor": "end" }, "cached") : null,
      meta ? svgEl("text", { class: "node-meta", x: pad, y: 48 }, meta) : null);
      svg.append(g);
    }
    return svg;
  }

  async function selectNode(ctx, view, name) {
    view.selected = name;
    view.allLogs = false;
    view.logs = null;
    replace(view.dag, drawDag(ctx, view));
    renderNodeDetail(ctx, view);
    await fetchLogs(ctx, view);
  }

  async function openAllLogs(ctx, view) {
    view.selected = null;
    view.allLogs = true;
    view.logs = null;
    replace(view.dag, drawDag(ctx, view));
    renderNodeDetail(ctx, view);
    await fetchLogs(ctx, view);
  }

  function renderNodeDetail(ctx, view) {
    const keepScroll = logsScroll();
    if (view.allLogs || !view.selected) {
      replace(view.detail,
        el("div", { class: "panel-head" }, el("h3", null, "All logs"), el("span", { class: "spacer" })),
        el("pre", { id: "node-logs", class: "logs" }, view.logs === null ? "Loading…" : view.logs || "(no output)"));
      keepScroll();
      return;
    }
    const n = (view.run.nodes || []).find((x) => x.name === view.selected);
    if (!n) { replace(view.detail, el("p", { class: "muted" }, "No node named " + view.selected)); return; }
    const dur = between(n.started_at, n.finished_at || (n.status === "running" ? "now" : null));
    const target = view.run.status === "succeeded" ? view.run.target : view.run.run_branch;
    replace(view.detail,
      el("div", { class: "panel-head" }, el("h3", null, ellipsis(n.name)), statusBadge(n.status), n.cached ? badge("cached", "cached") : null,
        el("span", { class: "spacer" })),
      facts([
        ["Kind", `${n.kind} · ${n.language}`],
        ["Location", el("code", null, n.location)],
        ["Started", n.started_at ? timeEl(n.started_at) : null],
        ["Finished", n.finished_at ? timeEl(n.finished_at) : null],
        ["Duration", dur !== null ? fmtDuration(dur) : null],
        ["Rows", n.rows !== null && n.rows !== undefined ? fmtInt(n.rows) : undefined],
        ["Reuse", n.reason ? el("span", { class: "reason" }, n.reason) : undefined],
        ["Inputs", (n.inputs || []).length ? el("ul", { class: "inputs" }, n.inputs.map((t) => el("li", null, link(el("code", null, t), href("table", target, t))))) : el("span", { class: "muted" }, "none")],
        ["Output", n.output && n.output.snapshot_id !== null && n.output.snapshot_id !== undefined ? el("code", null, "snapshot " + String(n.output.snapshot_id)) : undefined],
      ], "node-facts"),
      n.error ? el("div", null, el("h4", null, "Error"), el("pre", { class: "error-text" }, n.error)) : null,
      n.detail ? el("div", null, el("h4", null, "Detail"), el("pre", { class: "detail-text" }, n.detail)) : null,
      n.traceback ? el("div", null, el("h4", null, "Traceback"), el("pre", { class: "traceback" }, n.traceback)) : null,
      el("h4", null, "Logs"),
      el("pre", { id: "node-logs", class: "logs" }, view.logs === null ? "Loading…" : view.logs || "(no output)"));
    keepScroll();
  }

  /** Keeps a log that was scrolled to its end at its end after a redraw. */
  function logsScroll() {
    const pre = $("#node-logs");
    const atEnd = pre && pre.scrollHeight - pre.scrollTop - pre.clientHeight < 8;
    const top = pre ? pre.scrollTop : 0;
    return () => {
      const next = $("#node-logs");
      if (next && pre) next.scrollTop = atEnd ? next.scrollHeight : top;
    };
  }

  /** Fetches the logs the detail panel shows: the selected node's, or the whole run's. */
  async function fetchLogs(ctx, view) {
    const name = view.allLogs ? null : view.selected;
    if (!view.allLogs && !name) return;
    const path = `/api/v1/runs/${enc(view.run.id)}/logs` + (name === null ? "" : `?node=${enc(name)}`);
    const text = await ctx.api(path, { text: true });
    const current = name === null ? view.allLogs : !view.allLogs && view.selected === name;
    if (!ctx.alive || !current) return;
    view.logs = text;
    const keepScroll = logsScroll();
    const pre = $("#node-logs");
    if (pre) pre.textContent = text || "(no output)";
    keepScroll();
  }

  function pollRun(ctx, view) {
    ctx.later(async () => {
      try {
        const run = await ctx.api(`/api/v1/runs/${enc(view.run.id)}`);
        if (!ctx.alive) return;
        const before = new Map((view.run.nodes || []).map((n) => [n.name, n.status]));
        view.run = run;
        drawRun(ctx, view);
        const node = (run.nodes || []).find((n) => n.name === view.selected);
        if (view.selected || view.allLogs) renderNodeDetail(ctx, view);
        const refresh = view.allLogs || (node && (node.status === "running" || node.status !== before.get(node.name)));
        if (refresh) await fetchLogs(ctx, view).catch(() => {});
      } catch (e) {
        if (isAbort(e) || e.status === 401) return;
        // A failed refresh is retried at the next tick.
      }
      if (ctx.alive && view.run.status === "running") pollRun(ctx, view);
    }, RUN_POLL_MS);
  }

  // ------------------------------------------------------------------ page: diff

  async function renderDiff(ctx, from, to, main) {
    from = from || app.info.default_branch;
    to = to || "";
    const refs = await getRefs(ctx);
    const list = el("datalist", { id: "ref-names" }, sortRefs(refs).map((r) => el("option", { value: r.name })));
    const fromInput = el("input", { id: "diff-from", type: "text", class: "mono", list: "ref-names", value: from, spellcheck: "false", autocomplete: "off", placeholder: "from ref" });
    const toInput = el("input", { id: "diff-to", type: "text", class: "mono", list: "ref-names", value: to, spellcheck: "false", autocomplete: "off", placeholder: "to ref" });
    const go = () => {
      const f = fromInput.value.trim(), t = toInput.value.trim();
      if (!f || !t) { (f ? toInput : fromInput).focus(); return; }
      const hash = href("diff", f, t);
      if (location.hash === hash) onRoute(); else location.hash = hash;
    };
    const swap = () => { const f = fromInput.value; fromInput.value = toInput.value; toInput.value = f; };
    const form = el("form", { class: "toolbar diff-form", on: { submit: (e) => { e.preventDefault(); go(); } } },
      el("label", { for: "diff-from" }, "From"), fromInput,
      el("button", { type: "button", class: "btn ghost", title: "Swap", on: { click: swap } }, "⇄"),
      el("label", { for: "diff-to" }, "To"), toInput,
      el("button", { id: "diff-go", type: "submit", class: "btn primary" }, "Compare"), list);
    main.append(pageHead("Diff", el("span", { class: "muted" }, "the tables that differ between two refs")), form);
    if (!to) {
      main.append(el("p", { class: "muted" }, "Pick two refs (branches, tags, commit ids) to compare."));
      toInput.focus();
      return;
    }
    const d = await ctx.api(`/api/v1/diff?from=${enc(from)}&to=${enc(to)}`);
    const tables = d.tables || [];
    const counts = ["added", "removed", "changed"].map((c) => [c, tables.filter((t) => t.change === c).length]).filter(([, n]) => n);
    main.append(
      el("div", { id: "diff-summary", class: "summary" },
        el("strong", null, tables.length ? `${fmtInt(tables.length)} ${tables.length === 1 ? "table differs" : "tables differ"}` : "no difference"),
        counts.length ? el("span", { class: "muted" }, " (" + counts.map(([c, n]) => `${n} ${c}`).join(", ") + ")") : null),
      el("div", { class: "resolved muted small" },
        el("code", null, d.from), " = ", idEl(d.from_commit, href("commit", d.from_commit)),
        "   →   ", el("code", null, d.to), " = ", idEl(d.to_commit, href("commit", d.to_commit))),
      el("table", { id: "diff", class: "grid diff" }, th("Table", "Change", "From snapshot", "To snapshot"),
        el("tbody", null, tables.length ? tables.map((t) => el("tr", { dataset: { table: t.table, change: t.change } },
          el("td", { class: "name" }, link(ellipsis(t.table), href("table", t.change === "removed" ? from : to, t.table))),
          el("td", null, changeBadge(t.change)),
          el("td", { class: "mono" }, t.from && t.from.snapshot_id !== null && t.from.snapshot_id !== undefined ? String(t.from.snapshot_id) : el("span", { class: "muted" }, "—")),
          el("td", { class: "mono" }, t.to && t.to.snapshot_id !== null && t.to.snapshot_id !== undefined ? String(t.to.snapshot_id) : el("span", { class: "muted" }, "—")))) : empty("The two refs hold the same tables.", 4))));
  }

  // ------------------------------------------------------------------ router

  const ROUTES = {
    refs: { page: "refs", title: "Refs", render: (ctx, p, main) => renderRefs(ctx, p, main) },
    graph: { page: "graph", title: "History", render: (ctx, p, main) => renderGraph(ctx, p[0], p[1], main) },
    commit: { page: "graph", title: "Commit", render: (ctx, p, main) => renderGraph(ctx, atCommit(p[0]), p[0], main) },
    tables: { page: "tables", title: "Tables", render: (ctx, p, main) => renderTables(ctx, p[0], main) },
    table: { page: "table", title: "Table", render: (ctx, p, main) => renderTable(ctx, p[0], p.slice(1).join("/"), main) },
    sql: { page: "sql", title: "SQL", render: (ctx, p, main) => renderSql(ctx, p[0], main) },
    runs: { page: "runs", title: "Runs", render: (ctx, p, main) => renderRuns(ctx, main) },
    run: { page: "run", title: "Run", render: (ctx, p, main) => renderRun(ctx, p[0], main) },
    diff: { page: "diff", title: "Diff", render: (ctx, p, main) => renderDiff(ctx, p[0], p[1], main) },
  };

  function parseHash() {
    const raw = location.hash.replace(/^#\/?/, "");
    const parts = raw ? raw.split("/") : [];
    const decode = (s) => { try { return decodeURIComponent(s); } catch (_) { return s; } };
    return { name: parts.length ? decode(parts[0]) : "refs", params: parts.slice(1).map(decode).filter((s) => s !== "") };
  }

  function onRoute() {
    if (!app.info) return;
    const ctx = newContext();
    const { name, params } = parseHash();
    const route = Object.prototype.hasOwnProperty.call(ROUTES, name) ? ROUTES[name] : null;
    const main = $("#main");
    replace(main);
    window.scrollTo(0, 0);
    setPage(route ? route.page : "notfound");
    for (const a of document.querySelectorAll("#nav a")) {
      if (a.dataset.nav === (route && route.page === "table" ? "tables" : route && route.page)) a.setAttribute("aria-current", "page");
      else a.removeAttribute("aria-current");
    }
    document.title = `${route ? route.title : "Not found"}${params[0] ? " · " + params[0] : ""} · lh`;
    if (!route) {
      clearError();
      showError(new ApiError(`There is no page at ${location.hash}.`, { hint: "Use the links at the top." }));
      return;
    }
    ctx.task(() => route.render(ctx, params, main));
  }

  // ------------------------------------------------------------------ sign-in

  function readToken() {
    try {
      return sessionStorage.getItem(TOKEN_KEY) || localStorage.getItem(TOKEN_KEY) || null;
    } catch (_) {
      return null;
    }
  }

  /** The token in use was refused: it leaves the storages. A remembered token that is
   * another one (a refused token from the address) stays. */
  function forgetToken() {
    try {
      sessionStorage.removeItem(TOKEN_KEY);
      if (localStorage.getItem(TOKEN_KEY) === app.token) localStorage.removeItem(TOKEN_KEY);
    } catch (_) { /* storage off */ }
    app.token = null;
  }

  /** Sign out: the console's keys leave both storages (the token, the last SQL). */
  function signOut() {
    try {
      for (const store of [sessionStorage, localStorage]) {
        for (let i = store.length - 1; i >= 0; i--) {
          const key = store.key(i);
          if (key && key.startsWith("lh.")) store.removeItem(key);
        }
      }
    } catch (_) { /* storage off */ }
    app.token = null;
    app.currentRef = null;
    renderSignin(null);
  }

  /** A request was refused: the token is gone or revoked. Back to the sign-in page. */
  function signedOut(err) {
    forgetToken();
    renderSignin(err);
  }

  function renderSignin(err) {
    if (app.ctx) { app.ctx.dispose(); app.ctx = null; }
    app.info = null;
    app.refs = null;
    $("#topbar").hidden = true;
    setPage("signin");
    document.title = "Sign in · lh";
    const input = el("input", { id: "token", type: "password", class: "mono", placeholder: "lht_...", autocomplete: "off", spellcheck: "false", required: true });
    const remember = el("input", { id: "remember", type: "checkbox" });
    const submit = el("button", { type: "submit", class: "btn primary" }, "Sign in");
    const form = el("form", { id: "signin", class: "signin" },
      el("div", { class: "signin-logo" }, el("img", { src: "/console/favicon.svg", alt: "", width: 36, height: 36 }), el("span", null, "lh")),
      el("h1", null, "Sign in"),
      el("p", null, "Paste a token of this server. An admin makes one with ", el("code", null, "lh token create --user NAME --role ROLE"),
        "; or run ", el("code", null, "lh console"), " where the CLI is signed in: it opens this console signed in."),
      el("label", { for: "token" }, "Token"),
      input,
      el("label", { class: "check" }, remember, " Remember on this browser"),
      el("p", { class: "muted small" }, "Otherwise the token is forgotten when this tab is closed."),
      submit);
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const token = input.value.trim();
      if (!token) { input.focus(); return; }
      clearError();
      setState("loading");
      submit.disabled = true;
      try {
        const info = await api("/api/v1/info", { token, probe: true });
        forgetToken();
        (remember.checked ? localStorage : sessionStorage).setItem(TOKEN_KEY, token);
        app.token = token;
        enterApp(info);
      } catch (error) {
        showError(error);
        input.select();
      } finally {
        submit.disabled = false;
      }
    });
    replace($("#main"), form);
    clearError();
    if (err) showError(err); else setState("ready");
    input.focus();
  }

  function renderUser(info) {
    const auth = info.auth || {};
    const who = auth.user ? `${auth.user}${auth.role ? ` (${auth.role})` : ""}` : "";
    replace($("#user"),
      el("span", { id: "version", class: "version", title: `catalog ${info.catalog}\nwarehouse ${info.warehouse}${info.runtime ? "\nruntime " + info.runtime : ""}` }, `v${info.version}`),
      auth.mode === "off" ? badge("auth off", "auth-off", "the server runs with --no-auth") : null,
      who ? el("span", { id: "user-name", class: "user-name" }, who) : null,
      auth.mode === "off" ? null : el("button", {
        id: "signout", type: "button", class: "btn ghost",
        on: { click: signOut },
      }, "Sign out"));
  }

  function enterApp(info) {
    app.info = info;
    if (!app.currentRef) app.currentRef = info.default_branch;
    setCurrentRef(app.currentRef);
    renderUser(info);
    $("#topbar").hidden = false;
    const { name } = parseHash();
    if (!location.hash || location.hash === "#" || location.hash === "#/" || name === "signin") {
      history.replaceState(null, "", location.pathname + "#/refs");
    }
    onRoute();
  }

  async function start() {
    setState("loading");
    clearError();
    const hadToken = !!app.token;
    try {
      enterApp(await api("/api/v1/info", { probe: true }));
    } catch (e) {
      if (e.status === 401) {
        if (hadToken) forgetToken();
        renderSignin(hadToken ? e : null);
        return;
      }
      $("#topbar").hidden = true;
      setPage("error");
      replace($("#main"), el("div", { class: "unreachable" },
        el("p", null, "The console could not start."),
        el("button", { type: "button", class: "btn", on: { click: start } }, "Try again")));
      showError(e);
    }
  }

  /** Takes a token handed over in the address (`lh console`), out of the address and
   * the history; true when there was one. */
  function takeTokenFromAddress() {
    if (!location.hash.startsWith("#token=")) return false;
    let token = location.hash.slice("#token=".length);
    try { token = decodeURIComponent(token); } catch (_) { /* kept as it is */ }
    history.replaceState(null, "", location.pathname + "#/refs");
    if (!token) return false;
    // Another page can send this tab to such an address: a signed-in identity is only
    // replaced when the user says so.
    const current = app.token || readToken();
    if (current && current !== token &&
        !window.confirm("This address signs the console in with another token. Use it instead of the current one?")) {
      return false;
    }
    try { sessionStorage.setItem(TOKEN_KEY, token); } catch (_) { /* storage off: kept in memory */ }
    app.token = token;
    return true;
  }

  function boot() {
    takeTokenFromAddress();
    app.token = app.token || readToken();
    window.addEventListener("hashchange", () => {
      // An address of `lh console` opened in a tab already showing the console.
      if (takeTokenFromAddress()) { app.info = null; start(); return; }
      if (app.info) onRoute();
    });
    start();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", boot);
  else boot();
})();
