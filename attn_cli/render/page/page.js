// attn-cli html: the page's script. Standard web APIs only, no requests.
// Data: the manifest (JSON) and binary chunks (base64, maybe gzip), decoded on first use.
// Shapes: T tokens, H heads; weights (H, T, K) uint16 = round(w * 10^4), MASKED = hidden; K = T keys,
// or, for an encoder-decoder's cross-attention, the source's K tokens (trace().keys) beside T decoder rows.
"use strict";
(function () {
  const M = JSON.parse(document.getElementById("attn-manifest").textContent);
  const P = M.precision, SCALE = M.scale, MASKED = M.masked;
  const LINE_LIMIT = 6000; // lines drawn at once in the head view before it thins to the strongest
  const DETAIL_ROWS = 24; // keys listed for a focused token before "… more"
  const STEP_ROWS = 48; // keys in the step-by-step tables before it keeps the strongest
  const app = document.getElementById("app");
  const S = { t: M.start || 0, view: M.view || "heads", layer: 0, heads: new Set([0]), head: 0, focus: null, locked: false, query: 0, cell: null, log: false, norms: false };
  const cache = new Map();
  const STACK_NAMES = { encoder: "encoder self-attention (source × source)", decoder: "decoder self-attention (target × target, causal)", cross: "cross-attention (target rows × source columns)" };

  // -- numbers: Python's f"{x:.4f}" for a float32 (x * 10^4 is exact in a double) --
  function fixed(x) {
    if (x === Infinity) return "inf";
    if (x === -Infinity) return "-inf";
    if (Number.isNaN(x)) return "nan";
    const n = x * SCALE;
    let r = Math.round(n);
    if (r - n === 0.5 && r % 2 !== 0) r -= 1; // a tie rounds to even, as Python does
    const neg = x < 0 || Object.is(x, -0);
    let digits = (Math.abs(r) >= 1e21 ? BigInt(Math.abs(r)).toString() : String(Math.abs(r))).padStart(P + 1, "0");
    return (neg ? "-" : "") + digits.slice(0, digits.length - P) + "." + digits.slice(digits.length - P);
  }
  function fixedWeight(u) { return u === MASKED ? "masked" : fixed(u / SCALE); }

  // -- data --
  function chunk(id) {
    if (!cache.has(id)) cache.set(id, decode(id));
    return cache.get(id);
  }
  async function decode(id) {
    const meta = M.chunks[id];
    const text = document.getElementById(id).textContent.trim();
    const bin = atob(text);
    let bytes = new Uint8Array(bin.length);
    for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
    if (meta.encoding === "gzip-shuffled") {
      if (typeof DecompressionStream === "undefined") throw new Error("this browser cannot read the page's compressed data (it lacks DecompressionStream: Chrome 80, Firefox 113, Safari 16.4 or later)");
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      bytes = unshuffle(new Uint8Array(await new Response(stream).arrayBuffer()), meta.dtype === "u16" ? 2 : 4);
    }
    return meta.dtype === "u16" ? new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 2)
      : new Float32Array(bytes.buffer, bytes.byteOffset, bytes.byteLength / 4);
  }
  function unshuffle(planes, size) { // byte planes (size, N) back to numbers (N, size)
    const n = planes.length / size, out = new Uint8Array(planes.length);
    for (let b = 0; b < size; b++) { const from = b * n; for (let i = 0; i < n; i++) out[i * size + b] = planes[from + i]; }
    return out;
  }
  const trace = () => M.traces[S.t];
  const layerOf = () => trace().layers[S.layer];
  const T = () => trace().tokens.labels.length; // queries (rows)
  const keyTokens = () => trace().keys || trace().tokens; // the columns' tokens
  const K = () => keyTokens().labels.length; // keys (columns)
  async function load(layer, withScores) {
    const out = { w: layer.weights ? await chunk(layer.weights) : null, s: null, z: null, v: layer.norms ? await chunk(layer.norms) : null };
    if (withScores && layer.scores) {
      out.s = await chunk(layer.scores);
      out.z = layer.scaled && layer.scaled !== "derived" ? await chunk(layer.scaled) : null;
    }
    return out;
  }
  function scaledScore(layer, d, i) {
    if (!d.s) return null;
    if (d.w[i] === MASKED) return -Infinity;
    return d.z ? d.z[i] : Math.fround(d.s[i] / Math.fround(layer.divisor));
  }

  // -- colours --
  const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const dark = () => window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches;
  function headColour(h, heads) {
    const hue = Math.round((h * 360) / Math.max(heads, 1) + 210) % 360;
    return `hsl(${hue}, 72%, ${dark() ? 64 : 44}%)`;
  }
  // viridis, 9 stops, linearly interpolated
  const VIRIDIS = [[68, 1, 84], [72, 40, 120], [62, 74, 137], [49, 104, 142], [38, 130, 142], [31, 158, 137], [53, 183, 121], [109, 205, 89], [180, 222, 44], [253, 231, 37]];
  function viridis(v) {
    v = Math.min(1, Math.max(0, v)) * (VIRIDIS.length - 1);
    const i = Math.min(VIRIDIS.length - 2, Math.floor(v)), f = v - i, a = VIRIDIS[i], b = VIRIDIS[i + 1];
    return [a[0] + (b[0] - a[0]) * f, a[1] + (b[1] - a[1]) * f, a[2] + (b[2] - a[2]) * f];
  }
  function level(u) { // a fixed weight -> 0..1 on the colour scale
    const w = u / SCALE;
    if (!S.log) return w;
    return w <= 0 ? 0 : Math.max(0, (Math.log10(w) + P) / P);
  }
  function rgbOf(cssColour) {
    const c = document.createElement("canvas").getContext("2d");
    c.fillStyle = cssColour; c.fillRect(0, 0, 1, 1);
    return Array.from(c.getImageData(0, 0, 1, 1).data.slice(0, 3));
  }

  // -- small DOM helpers --
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else if (k === "style") e.setAttribute("style", v);
      else e.setAttribute(k, v === true ? "" : v);
    }
    for (const kid of kids.flat(Infinity)) if (kid !== null && kid !== undefined) e.append(kid instanceof Node ? kid : String(kid));
    return e;
  }
  function predicted(i) { // --predict: "next: a 0.8892, G 0.0672" for position i, or ""
    const p = trace().predictions;
    if (!p) return "";
    if (p.classified) return i === p.classified.position ? " · the classifier's labels: " + p.classified.labels.map((label, r) => `${label} ${p.classified.probs[r]}`).join(", ") : "";
    return (p.next ? " · next: " : " · predicted here: ") + p.labels[i].map((label, r) => `${label} ${p.probs[i][r]}`).join(", ");
  }
  function tokenButton(i, cls, extra, keySide) {
    const tk = keySide ? keyTokens() : trace().tokens, source = keySide && trace().keys;
    const special = tk.special[i];
    return el("button", Object.assign({
      class: "tok " + cls + (special ? " special" : ""), type: "button", "data-i": i,
      title: `${tk.labels[i]} · position ${tk.positions[i]} · id ${tk.ids[i]}` + (source ? " · source" : "") + (special ? " · special token added by the tokenizer" : "") + (source ? "" : predicted(i)),
    }, extra || {}), tk.labels[i]);
  }
  function heading(text) { return el("h2", { text }); }
  const busy = (on) => app.setAttribute("aria-busy", on ? "true" : "false");

  // -- the page --
  let main, controls, tip, repaintHeads = null;
  function frame() {
    app.textContent = "";
    const tr = trace();
    const header = el("header", {});
    header.append(el("h1", { text: "Attention, explored" + (tr.model.trained ? ": " + tr.model.name : ": the toy model") }));
    const stacks = M.traces.every((t) => t.stack); // an encoder-decoder: one trace per stack
    if (M.traces.length > 1) {
      const select = el("select", { id: "text-picker", "aria-label": stacks ? "Stack" : "Text", onchange: (e) => { S.t = Number(e.target.value); S.layer = 0; S.focus = null; S.locked = false; S.query = 0; S.cell = null; resetHeads(); frame(); } });
      M.traces.forEach((t, i) => {
        const words = t.text.replace(/\s+/g, " ");
        const name = stacks ? STACK_NAMES[t.stack] : `${i + 1}: ${words.length > 70 ? words.slice(0, 69) + "…" : words}`;
        select.append(el("option", { value: i, selected: i === S.t, text: name }));
      });
      header.append(el("div", { class: "picker" }, el("label", { for: "text-picker", text: stacks ? "Stack: " : `Text (${M.traces.length}): ` }), select));
    }
    header.append(el("div", { class: "text", id: "text", text: tr.text + (tr.pair !== null ? "\n— " + tr.pair : "") }));
    const dl = el("dl", { id: "about" });
    for (const [k, v] of tr.header) dl.append(el("div", {}, el("dt", { text: k }), el("dd", { text: v })));
    header.append(dl);
    header.append(el("p", { class: "command" }, el("span", { class: "small", text: "Reproduce: " }), el("code", { id: "command", text: M.command })));
    if (M.leftOut.length) header.append(el("div", { class: "notes", id: "left-out", role: "note" }, M.leftOut.map((n) => el("p", { text: n }))));
    app.append(header);

    const views = [["heads", "Head view"], ["matrix", "Matrix"]];
    if (tr.layers.length > 1 || tr.model.trained) views.push(["overview", "Model overview"]);
    for (const [kind, name] of Object.entries(COMBINED)) if (tr[kind]) views.push([kind, name]);
    for (const [kind, name] of Object.entries(LAYER_MAPS)) if (tr.layers.some((l) => l.maps && l.maps[kind.slice(6)])) views.push([kind, name]);
    if (tr.vectors) views.push(["steps", "Step by step"]);
    if (!views.some(([v]) => v === S.view)) S.view = "heads";
    const tabs = el("div", { class: "tabs", role: "tablist", "aria-label": "Views" });
    for (const [v, name] of views) {
      tabs.append(el("button", { type: "button", role: "tab", id: "tab-" + v, "data-view": v, "aria-selected": String(v === S.view), "aria-controls": "view", onclick: () => { S.view = v; draw(); } }, name));
    }
    tabs.addEventListener("keydown", (e) => {
      if (e.key !== "ArrowRight" && e.key !== "ArrowLeft") return;
      const i = views.findIndex(([v]) => v === S.view), j = (i + (e.key === "ArrowRight" ? 1 : views.length - 1)) % views.length;
      S.view = views[j][0]; draw(); document.getElementById("tab-" + S.view).focus();
    });
    app.append(tabs);
    controls = el("div", { class: "controls", id: "controls" });
    main = el("div", { id: "view", role: "tabpanel" });
    tip = el("div", { id: "tip", role: "tooltip", hidden: true });
    app.append(controls, main);
    document.body.append(tip);
    draw();
  }
  function resetHeads() { S.heads = new Set(Array.from({ length: Math.min(trace().layers[0].heads, 4) }, (_, h) => h)); S.head = 0; }

  function drawControls() {
    controls.textContent = "";
    const tr = trace();
    if (S.view !== "overview" && !combined(S.view)) {
      const select = el("select", { id: "layer-picker", "aria-label": "Layer", onchange: (e) => { S.layer = Number(e.target.value); S.cell = null; draw(); } });
      tr.layers.forEach((l, i) => select.append(el("option", { value: i, selected: i === S.layer, disabled: !l.weights, text: `layer ${l.index}` + (l.weights ? "" : " (left out)") })));
      controls.append(el("label", { for: "layer-picker", text: "Layer " }), select);
      const heads = oneMatrix(S.view) ? 0 : layerOf().heads; // a layer's own map: every head together, no chips
      const chips = el("div", { class: "chips", role: "group", "aria-label": S.view === "heads" ? "Heads shown" : "Head" });
      chips.append(el("span", { class: "small", text: S.view === "heads" ? "Heads:" : "Head:" }));
      for (let h = 0; h < heads; h++) {
        const on = S.view === "heads" ? S.heads.has(h) : S.head === h;
        chips.append(el("button", { type: "button", class: "chip", "data-head": h, "aria-pressed": String(on), style: `--c: ${headColour(h, heads)}`, title: `head ${h}`, onclick: () => {
          if (S.view === "heads") { if (S.heads.has(h)) S.heads.delete(h); else S.heads.add(h); } else S.head = h;
          draw();
        } }, String(h)));
      }
      if (S.view === "heads" && heads > 1) {
        chips.append(el("button", { type: "button", class: "linkish", id: "heads-all", onclick: () => { S.heads = new Set(Array.from({ length: heads }, (_, h) => h)); draw(); } }, "all"));
        chips.append(el("button", { type: "button", class: "linkish", id: "heads-none", onclick: () => { S.heads = new Set(); draw(); } }, "none"));
      }
      if (heads) controls.append(chips);
    }
    if (S.view === "matrix" && layerOf().norms) {
      const box = el("input", { type: "checkbox", id: "show-norms", checked: S.norms, onchange: (e) => { S.norms = e.target.checked; draw(); } });
      controls.append(el("label", { class: "small" }, box, " colour by the value-weighted norms ||a·f(x)|| (what each weight moves)"));
    }
    if (S.view === "matrix" || S.view === "overview" || oneMatrix(S.view)) {
      const box = el("input", { type: "checkbox", id: "log-scale", checked: S.log, onchange: (e) => { S.log = e.target.checked; draw(); } });
      controls.append(el("label", { class: "small" }, box, " log colour scale (long texts spread weight thin)"));
    }
  }

  let drawing = 0;
  async function draw() {
    const ticket = ++drawing;
    for (const b of app.querySelectorAll(".tabs button")) b.setAttribute("aria-selected", String(b.dataset.view === S.view));
    if (S.head >= layerOf().heads) S.head = 0;
    drawControls();
    hideTip();
    busy(true);
    try {
      const content = await ({ heads: headView, matrix: () => matrixView(), overview: overview, steps: steps, ...Object.fromEntries(Object.keys(COMBINED).map((k) => [k, () => combinedView(k)])),
        ...Object.fromEntries(Object.keys(LAYER_MAPS).map((k) => [k, () => layerMapView(k)])) })[S.view]();
      if (ticket !== drawing) return;
      main.textContent = "";
      main.append(content);
      if (content.after) content.after();
    } catch (err) {
      main.textContent = "";
      main.append(el("p", { class: "error", role: "alert", text: String(err && err.message || err) }));
    }
    if (ticket === drawing) { busy(false); document.body.dataset.ready = "1"; }
  }

  // -- head view: queries on the left, keys on the right, a line per pair --
  const thresholds = new Map();
  function strongest(d, layer, h, limit) { // the smallest fixed weight among the `limit` strongest lines of head h
    const key = `${S.t}/${layer.index}/${h}/${limit}`;
    if (thresholds.has(key)) return thresholds.get(key);
    const n = T() * K(), counts = new Uint32Array(SCALE + 1), base = h * n;
    for (let i = 0; i < n; i++) { const u = d.w[base + i]; if (u !== MASKED) counts[u]++; }
    let kept = 0, u = SCALE;
    for (; u > 0; u--) { if (kept + counts[u] > limit) break; kept += counts[u]; }
    const t = Math.max(u + 1, 1);
    thresholds.set(key, t);
    return t;
  }
  async function headView() {
    const layer = layerOf(), n = T(), m = K(), d = await load(layer, false);
    const row = Math.max(n, m) > 200 ? 15 : Math.max(n, m) > 60 ? 18 : 22;
    const wrap = el("div", { class: "headview", style: `--row: ${row}px; --tokfont: ${row < 20 ? "0.8em" : "0.95em"}` });
    const left = el("ol", { class: "left", "aria-label": "Queries" }), right = el("ol", { class: "right", "aria-label": trace().keys ? "Keys (source)" : "Keys" });
    for (let i = 0; i < n; i++) left.append(el("li", {}, tokenButton(i, "q", { "data-side": "q" })));
    for (let i = 0; i < m; i++) right.append(el("li", {}, tokenButton(i, "k", { "data-side": "k" }, true)));
    const width = 220, height = Math.max(n, m) * row;
    const canvas = el("canvas", { width: width * devicePixelRatio, height: Math.min(height * devicePixelRatio, 32000), style: `width: ${width}px; height: ${height}px`, "aria-hidden": "true" });
    const detail = el("aside", { class: "detail", id: "detail", "aria-live": "polite" });
    const note = el("p", { class: "small", id: "thinned" });
    wrap.append(
      el("div", {}, el("div", { class: "colhead", text: "query" }), left),
      el("div", {}, el("div", { class: "colhead", text: "attends to" }), canvas),
      el("div", {}, el("div", { class: "colhead", text: trace().keys ? "key (source)" : "key" }), right),
      detail,
    );
    const heads = [...S.heads].filter((h) => h < layer.heads).sort((a, b) => a - b);
    const paint = () => {
      const ctx = canvas.getContext("2d"), k = canvas.height / height;
      ctx.setTransform(k, 0, 0, k, 0, 0);
      ctx.clearRect(0, 0, width, height);
      ctx.lineWidth = heads.length > 4 ? 1.5 : 2;
      let thinned = 0, total = 0;
      heads.forEach((h, slot) => {
        ctx.strokeStyle = headColour(h, layer.heads);
        // each head's lines start and end a little apart within the row, so the colours do not cover each other
        const dy = heads.length > 1 ? ((slot + 0.5) / heads.length - 0.5) * row * 0.6 : 0;
        const base = h * n * m;
        const limit = S.focus ? 0 : strongest(d, layer, h, Math.floor(LINE_LIMIT / heads.length));
        for (let q = 0; q < n; q++) {
          if (S.focus && S.focus.side === "q" && S.focus.i !== q) continue;
          for (let kk = 0; kk < m; kk++) {
            if (S.focus && S.focus.side === "k" && S.focus.i !== kk) continue;
            const u = d.w[base + q * m + kk];
            if (u === MASKED || u === 0) continue;
            total++;
            if (u < limit) { thinned++; continue; }
            ctx.globalAlpha = Math.min(1, u / SCALE);
            ctx.beginPath(); ctx.moveTo(0, (q + 0.5) * row + dy); ctx.lineTo(width, (kk + 0.5) * row + dy); ctx.stroke();
          }
        }
      });
      ctx.globalAlpha = 1;
      note.textContent = thinned ? `Showing the ${(total - thinned).toLocaleString("en")} strongest of ${total.toLocaleString("en")} lines; hover or click a token to see all of its lines.` : "";
      for (const b of wrap.querySelectorAll(".tok")) {
        const on = S.focus && b.dataset.side === S.focus.side && Number(b.dataset.i) === S.focus.i;
        b.classList.toggle("focused", !!on);
        b.classList.toggle("locked", !!(on && S.locked));
        b.setAttribute("aria-pressed", String(!!(on && S.locked)));
      }
      fillDetail(detail, layer, d, heads);
    };
    const focus = (side, i) => { if (S.locked) return; S.focus = { side, i }; paint(); };
    const blur = () => { if (S.locked) return; S.focus = null; paint(); };
    wrap.addEventListener("mouseover", (e) => { const b = e.target.closest(".tok"); if (b) focus(b.dataset.side, Number(b.dataset.i)); });
    wrap.addEventListener("mouseout", (e) => { const b = e.target.closest(".tok"); if (b && !(e.relatedTarget && e.relatedTarget.closest && e.relatedTarget.closest(".tok"))) blur(); });
    wrap.addEventListener("focusin", (e) => { const b = e.target.closest(".tok"); if (b) focus(b.dataset.side, Number(b.dataset.i)); });
    wrap.addEventListener("click", (e) => {
      const b = e.target.closest(".tok"); if (!b) return;
      const side = b.dataset.side, i = Number(b.dataset.i);
      if (S.locked && S.focus && S.focus.side === side && S.focus.i === i) { S.locked = false; }
      else { S.locked = true; S.focus = { side, i }; if (side === "q") S.query = i; }
      paint();
    });
    repaintHeads = paint;
    const box = el("div", {}, wrap, note, el("p", { class: "small", text: (trace().keys ? "Lines join each decoder input (left) to the source tokens it attends to (right)" : "Lines join each query (left) to the keys it attends to (right)") + ", one colour per head, as opaque as the weight. Hover or focus a token to follow it; click to keep it; Esc lets go. Special tokens are in italics." }));
    box.after = paint;
    return box;
  }
  function fillDetail(detail, layer, d, heads) {
    detail.textContent = "";
    const n = T(), m = K(), qtk = trace().tokens, ktk = keyTokens();
    if (!S.focus) { detail.append(el("p", { class: "small", text: "Hover, focus or click a token to list its weights here." })); return; }
    if (!heads.length) { detail.append(el("p", { class: "small", text: "No head is switched on." })); return; }
    const { side, i } = S.focus;
    const at = (h, other) => d.w[h * n * m + (side === "q" ? i * m + other : other * m + i)];
    const own = side === "q" ? qtk : ktk, tk = side === "q" ? ktk : qtk, count = side === "q" ? m : n; // the focused token's list, the others'
    detail.append(el("h3", { id: "detail-title", text: side === "q" ? `${own.labels[i]} (query ${own.positions[i]}) attends to` : `Who attends to ${own.labels[i]} (key ${own.positions[i]})` }));
    const p = trace().predictions;
    if (p && p.classified && side === "q" && i === p.classified.position) detail.append(el("p", { class: "small", id: "detail-predictions", text: predicted(i).slice(3) }));
    else if (p && !p.classified && side === "q") detail.append(el("p", { class: "small", id: "detail-predictions", text: (p.next ? "The model's next token here: " : "The model's fillers here: ") + p.labels[i].map((label, r) => `${label} ${p.probs[i][r]}`).join(", ") }));
    const order = Array.from({ length: count }, (_, j) => j);
    const best = (j) => Math.max(...heads.map((h) => { const u = at(h, j); return u === MASKED ? -1 : u; }));
    order.sort((a, b) => best(b) - best(a) || a - b);
    const shown = order.slice(0, count <= DETAIL_ROWS + 4 ? count : DETAIL_ROWS);
    const table = el("table", { id: "detail-table" });
    table.append(el("thead", {}, el("tr", {}, el("th", { text: side === "q" ? "key" : "query" }), heads.map((h) => el("th", { style: `--c: ${headColour(h, layer.heads)}` }, el("span", { class: "sw" }), `head ${h}`)))));
    const body = el("tbody", {});
    for (const j of shown) {
      body.append(el("tr", {}, el("td", { class: "tok" + (tk.special[j] ? " special" : ""), text: tk.labels[j] }), heads.map((h) => {
        const u = at(h, j);
        return el("td", { class: "num" + (u === MASKED ? " masked" : ""), "data-head": h, "data-other": j, text: u === MASKED ? "masked" : fixedWeight(u) });
      })));
    }
    table.append(body);
    detail.append(table);
    if (shown.length < count) detail.append(el("p", { class: "small", text: `… ${count - shown.length} more (every weight: the matrix view's tooltip)` }));
  }

  // -- matrix: the weights of one head on a canvas, with a tooltip --
  // the maps through the layers, one T x T for every head together: their views' names
  const COMBINED = { rollout: "Rollout", flow: "Flow", alti: "ALTI", value_zeroing_rollout: "Value zeroing rollout", attention_gradient: "Attention x gradient" };
  // each layer's own maps (--what value-zeroing, alti, attention-gradient): a view each, "layer-" and the JSON name
  const LAYER_MAPS = { "layer-value_zeroing": "Value zeroing", "layer-alti": "ALTI by layer", "layer-attention_gradient": "Gradient x weights by layer" };
  function combined(kind) { return Object.hasOwn(COMBINED, kind); }
  function oneMatrix(kind) { return combined(kind) || Object.hasOwn(LAYER_MAPS, kind); } // one T x T for every head together
  function mapName(kind) { return (COMBINED[kind] || LAYER_MAPS[kind]).toLowerCase(); }
  async function combinedView(kind) { // a map through the layers (the rollout, the flow, ...), drawn as a head's weights are
    const r = trace()[kind];
    const layer = { index: r.through, heads: 1, weights: r.weights, scores: null, norms: null, divisor: 1, divisorText: "", masked: r.masked, scale: r.scale };
    return matrixView({ layer, h: 0, kind });
  }
  function explainedText() { // attention x gradient's target, in words
    const t = trace().explained;
    if (!t) return "the target's logit";
    const what = { label: `label ${t.label}`, next: `the next token “${t.label}”`, mask: `the mask's filler “${t.label}”` }[t.kind];
    return `the target: ${what}'s logit ${fixed(t.logit)} (${t.predicted ? "predicted" : "as asked"}) at ${t.position === null ? "the mean of every position" : "position " + t.position}`;
  }
  async function layerMapView(kind) { // the chosen layer's own map
    const r = (layerOf().maps || {})[kind.slice(6)];
    if (!r || !r.weights) return el("p", { class: "small", text: `Layer ${layerOf().index}'s ${mapName(kind)} map is not on this page (see above).` });
    const layer = { index: r.through, heads: 1, weights: r.weights, scores: null, norms: null, divisor: 1, divisorText: "", masked: r.masked, scale: r.scale };
    return matrixView({ layer, h: 0, kind });
  }
  async function matrixView(opts) {
    const kind = opts ? opts.kind : S.norms && layerOf().norms ? "norms" : "weights";
    const layer = opts ? opts.layer : layerOf(), n = T(), m = oneMatrix(kind) ? n : K(), d = await load(layer, !oneMatrix(kind)), h = opts ? opts.h : S.head;
    const tk = trace().tokens, ktk = oneMatrix(kind) ? tk : keyTokens(), big = Math.max(n, m); // rows: queries; columns: keys
    let top = 0; // the norms' colour scale: 0 to the head's largest
    if (kind === "norms") for (let i = h * n * m; i < (h + 1) * n * m; i++) if (d.w[i] !== MASKED && d.v[i] > top) top = d.v[i];
    const shade = (i) => { // a cell's place on the colour scale
      if (kind !== "norms") return level(d.w[i]);
      const v = d.v[i] / (top || 1);
      return !S.log ? v : v <= 0 ? 0 : Math.max(0, (Math.log10(v) + P) / P);
    };
    const what = combined(kind) ? `${mapName(kind)} through layer ${layer.index}` : oneMatrix(kind) ? `${mapName(kind)} of layer ${layer.index}` : kind === "norms" ? `value-weighted norms of head ${h}, layer ${layer.index}` : `attention weights of head ${h}, layer ${layer.index}`;
    const avail = Math.max(240, Math.min(main.clientWidth || 900, 1100) - 40);
    const labels = big <= 64;
    const fontPx = (c) => Math.min(13, Math.max(9, c - 3));
    const short = (s) => (s.length > 18 ? s.slice(0, 17) + "…" : s);
    let cell = Math.max(1, Math.min(34, Math.floor(avail / big))), margin = 0;
    if (labels) {
      const c = document.createElement("canvas").getContext("2d");
      c.font = `${fontPx(cell)}px system-ui, sans-serif`;
      margin = Math.ceil(12 + Math.max(...tk.labels.concat(ktk.labels).map((s) => c.measureText(short(s)).width)));
      cell = Math.max(1, Math.min(34, Math.floor((avail - margin) / big)));
    }
    const wide = margin + cell * m, tall = margin + cell * n;
    const canvas = el("canvas", { id: "matrix", tabindex: 0, "data-margin": margin, "data-cell": cell, "data-layer": layer.index, "data-head": h, width: wide * devicePixelRatio, height: tall * devicePixelRatio, style: `width: ${wide}px; height: ${tall}px`,
      "data-kind": kind, role: "img", "aria-label": `${what}: ${n} queries by ${m} keys${ktk !== tk ? " (the source's tokens)" : ""}; arrow keys move between cells` });
    const overlay = el("canvas", { class: "overlay", width: wide * devicePixelRatio, height: tall * devicePixelRatio, style: `width: ${wide}px; height: ${tall}px` });
    const wrap = el("div", { class: "matrixwrap" }, canvas, overlay);
    const paint = () => {
      const ctx = canvas.getContext("2d");
      ctx.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
      ctx.clearRect(0, 0, wide, tall);
      const img = new ImageData(m, n), masked = rgbOf(css("--masked")), base = h * n * m;
      for (let i = 0; i < n * m; i++) {
        const u = d.w[base + i], c = u === MASKED ? masked : viridis(shade(base + i));
        img.data[4 * i] = c[0]; img.data[4 * i + 1] = c[1]; img.data[4 * i + 2] = c[2]; img.data[4 * i + 3] = 255;
      }
      const off = el("canvas", { width: m, height: n });
      off.getContext("2d").putImageData(img, 0, 0);
      ctx.imageSmoothingEnabled = false;
      ctx.drawImage(off, margin, margin, cell * m, cell * n);
      if (labels) {
        ctx.font = `${fontPx(cell)}px system-ui, sans-serif`;
        ctx.textBaseline = "middle";
        for (let i = 0; i < n; i++) { // the queries, down the left
          ctx.fillStyle = tk.special[i] ? css("--special") : css("--fg");
          ctx.textAlign = "right"; ctx.fillText(short(tk.labels[i]), margin - 6, margin + (i + 0.5) * cell);
        }
        for (let j = 0; j < m; j++) { // the keys, along the top
          ctx.fillStyle = ktk.special[j] ? css("--special") : css("--fg");
          ctx.save(); ctx.translate(margin + (j + 0.5) * cell, margin - 6); ctx.rotate(-Math.PI / 2.6); ctx.textAlign = "left"; ctx.fillText(short(ktk.labels[j]), 0, 0); ctx.restore();
        }
        if (cell >= 22 && big <= 16) { // numbers in the cells, two decimals (the tooltip has every digit), at a size that fits
          const shown = [];
          for (let q = 0; q < n; q++) for (let k = 0; k < m; k++) {
            const u = d.w[base + q * m + k], v = kind === "norms" ? d.v[base + q * m + k] : u / SCALE;
            if (u !== MASKED) shown.push([q, k, base + q * m + k, v < 10 ? v.toFixed(2).replace(/^0\./, ".") : v.toFixed(1)]);
          }
          let px = Math.min(11, Math.floor(cell / 2.5)), widest = 0;
          for (; px >= 7; px--) {
            ctx.font = `${px}px ui-monospace, monospace`;
            widest = Math.max(0, ...shown.map((c) => ctx.measureText(c[3]).width));
            if (widest <= cell - 4) break;
          }
          if (px >= 7) {
            ctx.textAlign = "center";
            for (const [q, k, i, text] of shown) {
              ctx.fillStyle = shade(i) > 0.6 ? "#000" : "#fff";
              ctx.fillText(text, margin + (k + 0.5) * cell, margin + (q + 0.5) * cell);
            }
            canvas.dataset.numberFont = px; canvas.dataset.numberWidth = widest.toFixed(1); // what the tests check fits
          }
        }
      }
    };
    const mark = () => {
      const ctx = overlay.getContext("2d");
      ctx.setTransform(devicePixelRatio, 0, 0, devicePixelRatio, 0, 0);
      ctx.clearRect(0, 0, wide, tall);
      if (!S.cell || S.cell.q >= n || S.cell.k >= m) return;
      ctx.strokeStyle = css("--focus"); ctx.lineWidth = 2;
      ctx.strokeRect(margin + S.cell.k * cell - 1, margin + S.cell.q * cell - 1, cell + 2, cell + 2);
      if (cell < 6) { ctx.globalAlpha = 0.5; ctx.strokeRect(margin, margin + S.cell.q * cell, cell * m, cell); ctx.strokeRect(margin + S.cell.k * cell, margin, cell, cell * n); ctx.globalAlpha = 1; }
    };
    const cellAt = (e) => {
      const r = canvas.getBoundingClientRect(), x = e.clientX - r.left - margin, y = e.clientY - r.top - margin;
      const k = Math.floor(x / cell), q = Math.floor(y / cell);
      return q >= 0 && k >= 0 && q < n && k < m ? { q, k } : null;
    };
    const show = (c, x, y) => {
      S.cell = c; mark();
      if (!c) { hideTip(); return; }
      showTip(cellTip(layer, d, h, c.q, c.k, kind), x, y);
    };
    canvas.addEventListener("mousemove", (e) => show(cellAt(e), e.clientX, e.clientY));
    canvas.addEventListener("mouseleave", () => { hideTip(); });
    canvas.addEventListener("click", (e) => { const c = cellAt(e); if (c) { S.query = c.q; S.focus = { side: "q", i: c.q }; S.locked = true; } });
    canvas.addEventListener("keydown", (e) => {
      const moves = { ArrowUp: [-1, 0], ArrowDown: [1, 0], ArrowLeft: [0, -1], ArrowRight: [0, 1], Home: [0, -m], End: [0, m] };
      if (e.key === "Escape") { S.cell = null; mark(); hideTip(); return; }
      if (e.key === "Enter" && S.cell) { S.query = S.cell.q; S.focus = { side: "q", i: S.cell.q }; S.locked = true; return; }
      if (!moves[e.key]) return;
      e.preventDefault();
      const c = S.cell || { q: 0, k: 0 };
      const q = Math.min(n - 1, Math.max(0, c.q + moves[e.key][0])), k = Math.min(m - 1, Math.max(0, c.k + moves[e.key][1]));
      const r = canvas.getBoundingClientRect();
      show({ q, k }, r.left + margin + (k + 1) * cell, r.top + margin + (q + 1) * cell);
    });
    canvas.addEventListener("blur", hideTip);
    const legend = el("div", { class: "legend" });
    const bar = el("canvas", { width: 160, height: 12 });
    const bctx = bar.getContext("2d");
    for (let x = 0; x < 160; x++) { const c = viridis(x / 159); bctx.fillStyle = `rgb(${c[0]},${c[1]},${c[2]})`; bctx.fillRect(x, 0, 1, 12); }
    const name = kind === "norms" ? "||a·f(x)||" : oneMatrix(kind) ? mapName(kind) : "weight";
    const high = kind === "norms" ? fixed(top) : layer.scale ? fixed(layer.scale) : "1";
    legend.append(el("span", { text: S.log ? `${name} ${kind === "norms" ? fixed(top / SCALE) : "10⁻⁴"}` : `${name} 0` }), bar, el("span", { text: high }), el("span", { class: "swatch" }),
      el("span", { text: oneMatrix(kind) ? "masked: nothing reaches this query from this key" : "masked: the query may not see this key" }));
    const about = kind === "attention_gradient" || kind === "layer-attention_gradient"
      ? (kind === "attention_gradient" ? `Attention x gradient through layer ${layer.index} (Chefer et al. 2021): R = I, then R += Abar R for each layer, Abar the mean over heads of the positive part of (the gradient of the target's logit with respect to the weights) x (the weights)` : `Layer ${layer.index}'s Abar (Chefer et al. 2021): the mean over heads of the positive part of (the target logit's gradient with respect to the weights) x (the weights)`) + `; ${explainedText()}. Not shares of a row: coloured from 0 to the largest (${fixed(layer.scale || 0)}).`
      : kind === "layer-value_zeroing"
      ? `Layer ${layer.index}'s value zeroing (Mohebbi et al. 2023): each key's value vectors zeroed in every head and the layer run again; a cell is the cosine distance of the query's output from the one without the zeroing, each row normalized to sum 1.`
      : kind === "layer-alti"
      ? `Layer ${layer.index}'s ALTI (Ferrando et al. 2022): token j's contribution to position i's attention block output, max(0, ||y_i||₁ − ||y_i − T_i(x_j)||₁), each row normalized to sum 1.`
      : kind === "alti"
      ? `ALTI through layer ${layer.index} (Ferrando et al. 2022): each layer's attention block output written as a sum over input tokens (heads, residual and norm); token j's contribution to position i is max(0, ||y_i||₁ − ||y_i − T_i(x_j)||₁), rows normalized, and the layers' maps multiplied from layer 0 up. Rows are queries, columns keys; each row sums to 1.`
      : kind === "value_zeroing_rollout"
      ? `Value zeroing through layer ${layer.index} (Mohebbi et al. 2023): in each layer, each key's value vectors zeroed in every head and the layer run again; a cell is the cosine distance of the query's layer output from the one without the zeroing, rows normalized, and the layers' maps multiplied from layer 0 up (no residual added). Each row sums to 1.`
      : kind === "flow"
      ? `Attention flow through layer ${layer.index} (Abnar & Zuidema 2020): the rollout's mixed weights (each layer's mean over all heads, half the identity, rows renormalized) as the capacities of a graph through the layers; a cell is the maximum flow from the query's position after the last layer to the key token, each row normalized to sum 1.`
      : kind === "rollout"
      ? `Attention rollout through layer ${layer.index} (Abnar & Zuidema 2020): each layer's weights averaged over all its heads, half the identity added for the residual, rows renormalized, multiplied from layer 0 up. Rows are queries, columns keys; a cell is how much of the key token reaches the query's position; each row sums to 1.`
      : kind === "norms"
        ? `Head ${h} of layer ${layer.index}, coloured by the value-weighted norm ||a·f(x)|| (Kobayashi et al. 2020): the weight times the size of what the key sends through this head and W_o, from 0 to the head's largest (${fixed(top)}). A big weight on a key that sends little is dark here.`
        : ktk !== tk ? `Head ${h} of layer ${layer.index}, cross-attention: rows are the decoder's inputs, columns the source's tokens; each row sums to 1.`
          : `Head ${h} of layer ${layer.index}: rows are queries, columns keys; each row sums to 1.`;
    const box = el("div", {},
      el("p", { class: "small", text: about + ` Point at a cell (or focus the matrix and use the arrow keys) for its numbers` + (big <= 16 ? " (the cells show two decimals)." : ".") + (d.s || oneMatrix(kind) ? "" : " The raw and scaled scores of this layer are left out of the page (see above).") }),
      wrap, legend);
    box.after = () => { paint(); mark(); };
    return box;
  }
  function cellTip(layer, d, h, q, k, kind) {
    const n = T(), m = oneMatrix(kind) ? n : K(), tk = trace().tokens, ktk = oneMatrix(kind) ? tk : keyTokens(), i = h * n * m + q * m + k, u = d.w[i];
    const rows = [["query", `${tk.labels[q]} (${tk.positions[q]})`], [ktk !== tk ? "key (source)" : "key", `${ktk.labels[k]} (${ktk.positions[k]})`]];
    if (oneMatrix(kind)) {
      const value = u === MASKED ? "0 (no path)" : layer.scale ? fixed((u / SCALE) * layer.scale) : fixedWeight(u);
      rows.push(combined(kind) ? ["layers", `0 to ${layer.index}, every head`] : ["layer", `${layer.index}, every head`], [mapName(kind), value, kind.replace("layer-", "")]);
      const dl = el("dl", {}, rows.map(([k2, v, f]) => [el("dt", { text: k2 }), el("dd", { "data-field": f || k2.replace(" ", "-"), text: v })]));
      return el("div", {}, dl);
    }
    rows.push(["head", `${h}, layer ${layer.index}`], ["weight", u === MASKED ? "0 (masked)" : fixedWeight(u)]);
    if (d.v) rows.push(["norm ||a·f(x)||", u === MASKED ? "0 (masked)" : fixed(d.v[i])]);
    if (d.s) {
      rows.push(["raw score", fixed(d.s[i])]);
      rows.push(["scaled score", fixed(scaledScore(layer, d, i)) + (layer.divisorText ? ` (raw / ${layer.divisorText})` : "")]);
    } else rows.push(["scores", "left out of this page"]);
    const dl = el("dl", {}, rows.map(([k2, v]) => [el("dt", { text: k2 }), el("dd", { "data-field": k2.replace(" ", "-"), text: v })]));
    return el("div", {}, u === MASKED ? el("p", { text: "masked: the query may not see this key", style: "margin: 0 0 4px" }) : null, dl);
  }
  function showTip(content, x, y) {
    tip.textContent = ""; tip.append(content); tip.hidden = false;
    const w = tip.offsetWidth, hgt = tip.offsetHeight;
    tip.style.left = Math.max(4, Math.min(window.innerWidth - w - 8, x + 14)) + "px";
    tip.style.top = Math.max(4, y + 14 + hgt > window.innerHeight ? y - hgt - 10 : y + 14) + "px";
  }
  function hideTip() { if (tip) tip.hidden = true; }

  // -- model overview: a thumbnail per kept layer and head --
  async function overview() {
    const tr = trace(), n = T(), m = K(), big = Math.max(n, m), px = big >= 64 ? 64 : big * Math.max(1, Math.floor(64 / big));
    const grid = el("div", { class: "overview", id: "overview" });
    const masked = rgbOf(css("--masked"));
    const data = await Promise.all(tr.layers.map((l) => l.weights ? load(l, false) : null));
    const after = [];
    // head labels over the columns: each as wide as a thumbnail (canvas border 1, button border 2), so they wrap alike
    const heads = Math.max(...tr.layers.map((l) => l.heads)), thumbWidth = px + 6;
    const labels = el("div", { class: "thumbs headnames", "aria-hidden": "true" });
    for (let h = 0; h < heads; h++) labels.append(el("span", { class: "headname", style: `width: ${thumbWidth}px`, text: thumbWidth >= 46 ? `head ${h}` : String(h) }));
    grid.append(el("div", { class: "lname" }), labels);
    tr.layers.forEach((layer, li) => {
      const thumbs = el("div", { class: "thumbs" });
      if (!data[li]) {
        thumbs.append(el("span", { class: "small", text: "left out of this page to keep it small (see the note above)" }));
      } else {
        for (let h = 0; h < layer.heads; h++) {
          const c = el("canvas", { width: px, height: px, style: `width: ${px}px; height: ${px}px` });
          thumbs.append(el("button", { type: "button", class: "thumb", "data-layer": layer.index, "data-head": h, title: `layer ${layer.index}, head ${h}: open in the matrix`, "aria-label": `layer ${layer.index}, head ${h}`,
            onclick: () => { S.layer = li; S.head = h; S.heads = new Set([h]); S.view = "matrix"; S.cell = null; draw(); } }, c));
          after.push(() => thumbnail(c, data[li].w, h, n, m, px, masked));
        }
      }
      grid.append(el("div", { class: "lname", text: `layer ${layer.index}` }), thumbs);
    });
    grid.style.gridTemplateColumns = "max-content 1fr";
    const box = el("div", {}, el("p", { class: "small", text: `Every kept layer and head (${tr.model.layers} layers of ${tr.model.heads} heads in the model). Each square is a head's weights, queries down, keys across` + (tr.keys ? ` (${n} decoder inputs × ${m} source tokens)` : "") + `; bright = strong. Click one to open it.` + (big > px ? ` Squares of ${big} tokens show the largest weight of each block.` : "") }), grid);
    box.after = () => after.forEach((f) => f());
    return box;
  }
  function thumbnail(canvas, w, h, n, m, px, masked) { // rows: n queries; columns: m keys
    const img = new ImageData(px, px), base = h * n * m;
    for (let y = 0; y < px; y++) for (let x = 0; x < px; x++) {
      const q0 = Math.floor((y * n) / px), q1 = Math.max(q0 + 1, Math.floor(((y + 1) * n) / px));
      const k0 = Math.floor((x * m) / px), k1 = Math.max(k0 + 1, Math.floor(((x + 1) * m) / px));
      let best = -1;
      for (let q = q0; q < q1; q++) for (let k = k0; k < k1; k++) { const u = w[base + q * m + k]; if (u !== MASKED && u > best) best = u; }
      const c = best < 0 ? masked : viridis(level(best)), o = 4 * (y * px + x);
      img.data[o] = c[0]; img.data[o + 1] = c[1]; img.data[o + 2] = c[2]; img.data[o + 3] = 255;
    }
    canvas.getContext("2d").putImageData(img, 0, 0);
  }

  // -- the toy model step by step, for one query and one head --
  async function steps() {
    const tr = trace(), layer = tr.layers[0], n = T(), tk = tr.tokens, h = S.head, q = Math.min(S.query, n - 1), toy = tr.toy;
    const d = await load(layer, true), v = await chunk(tr.vectors.chunk), parts = tr.vectors.parts;
    const part = (name) => parts[name] ? { data: v, offset: parts[name].offset, shape: parts[name].shape } : null;
    const vec = (p, ...index) => { // the row at `index` of a (.., rows, cols) part
      let o = p.offset, stride = p.shape.reduce((a, b) => a * b, 1);
      for (let i = 0; i < index.length; i++) { stride /= p.shape[i]; o += index[i] * stride; }
      return v.subarray(o, o + stride);
    };
    const X = part("x"), Q = part("queries"), K = part("keys"), V = part("values"), C = part("context"), DROP = part("dropped");
    const box = el("div", { class: "steps", id: "steps" });
    const pick = el("div", { class: "querypick", role: "group", "aria-label": "Query" });
    for (let i = 0; i < n; i++) {
      pick.append(tokenButton(i, "pick", { "aria-pressed": String(i === q), onclick: () => { S.query = i; draw(); } }));
    }
    box.append(el("p", { class: "small", text: `Query (click one), head ${h} of ${layer.heads}:` }), pick);
    const cols = (p) => p.shape[p.shape.length - 1];
    const MAXD = 8;
    const vectorCells = (row) => Array.from(row.slice(0, MAXD), (x) => el("td", { class: "num", text: fixed(x) })).concat(row.length > MAXD ? [el("td", { class: "small", text: `… ${row.length - MAXD} more` })] : []);
    const dimHead = (p, name) => Array.from({ length: Math.min(cols(p), MAXD) }, (_, j) => el("th", { text: `${name}${j}` }));
    const sec = (title, formula, ...kids) => el("section", {}, el("h3", { text: title }), formula ? el("div", { class: "formula", text: formula }) : null, ...kids);
    // the keys listed: all of them, or the strongest around the query for long texts
    let keys = Array.from({ length: n }, (_, j) => j);
    const base = h * n * n + q * n;
    let cut = null;
    if (n > STEP_ROWS) {
      const visible = keys.filter((j) => d.w[base + j] !== MASKED);
      keys = visible;
      if (visible.length > STEP_ROWS) {
        const others = visible.filter((j) => j !== q).sort((a, b) => d.w[base + b] - d.w[base + a] || a - b);
        keys = [q, ...others.slice(0, STEP_ROWS - 1)].sort((a, b) => a - b);
      }
      cut = el("p", { class: "small", id: "step-cut", text: `${keys.length} of the ${visible.length} keys this query can see are listed` + (keys.length < visible.length ? ": the query itself and the strongest weights." : ".") + (visible.length < n ? ` The other ${n - visible.length} keys are masked.` : "") });
    }
    const label = (j) => el("td", { class: "tokcell" + (tk.special[j] ? " special tok" : ""), text: `${tk.labels[j]}` });
    if (X) box.append(sec("1. The input X", `x_${q} = the embedding of ${tk.labels[q]}` + (tr.model.inputText.includes("positions") ? " plus its position" : "") + ` (${cols(X)} numbers)`,
      el("table", {}, el("tr", {}, el("th", { class: "tokcell", text: "token" }), dimHead(X, "d")), el("tr", { class: "is-query" }, label(q), vectorCells(vec(X, q))))));
    box.append(sec("2. Query, keys and values", toy.projections ? `q = x W_q^T, k_j = x_j W_k^T, v_j = x_j W_v^T (head ${h}: d_k ${toy.dK}, d_v ${toy.dV})` : "no projections: q = k = v = x",
      el("table", { id: "step-qkv" }, el("tr", {}, el("th", { class: "tokcell", text: "" }), dimHead(Q, "q")), el("tr", { class: "is-query" }, label(q), vectorCells(vec(Q, h, q)))),
      el("table", {}, el("tr", {}, el("th", { class: "tokcell", text: "key" }), dimHead(K, "k")), keys.map((j) => el("tr", { class: j === q ? "is-query" : "" }, label(j), vectorCells(vec(K, h, j)))))));
    let bestKey = -1, bestU = -1;
    for (const j of keys) { const u = d.w[base + j]; if (u !== MASKED && u > bestU) { bestU = u; bestKey = j; } }
    const rows = keys.map((j) => {
      const i = base + j, u = d.w[i];
      return el("tr", { class: (j === q ? "is-query " : "") + (j === bestKey ? "is-max" : ""), "data-key": j }, label(j),
        el("td", { class: "num", "data-field": "raw", text: d.s ? fixed(d.s[i]) : "—" }),
        el("td", { class: "num", "data-field": "scaled", text: d.s ? (u === MASKED ? fixed(Math.fround(d.s[i] / Math.fround(layer.divisor))) : fixed(scaledScore(layer, d, i))) : "—" }),
        el("td", { class: "num", "data-field": "mask", text: u === MASKED ? "-inf" : (d.s ? fixed(scaledScore(layer, d, i)) : "—") }),
        el("td", { class: "num w", "data-field": "weight", text: u === MASKED ? "0" : fixedWeight(u) }, u === MASKED ? null : el("span", { class: "bar", style: `width: ${Math.round((u / SCALE) * 60)}px` })),
        DROP ? el("td", { class: "num", "data-field": "dropped", text: fixed(vec(DROP, h, q)[j]) }) : null);
    });
    const divisor = layer.divisorText ? `/ ${layer.divisorText}` : "(no scaling)";
    box.append(sec("3–6. Scores, scaling, mask, softmax",
      `score_j = q · k_j;  scaled_j = score_j ${divisor};  masked: -inf where the query may not see the key${toy.causal ? " (causal: every later token)" : " (nothing is hidden here)"};  w_j = exp(scaled_j) / Σ exp(scaled)`,
      cut, el("table", { id: "step-scores" },
        el("tr", {}, el("th", { class: "tokcell", text: "key" }), el("th", { text: "3. raw q·k" }), el("th", { text: `4. scaled ${divisor}` }), el("th", { text: "5. masked" }), el("th", { text: "6. softmax weight" }), DROP ? el("th", { text: `after dropout ${toy.dropout}` }) : null),
        rows)));
    const ctxRow = vec(C, h, q);
    box.append(sec("7. The context vector", `context_${q} = Σ_j ${DROP ? "dropped_j" : "w_j"} v_j  (${tk.labels[q]}'s new vector, head ${h})`,
      el("table", {}, el("tr", {}, el("th", { class: "tokcell", text: "value" }), dimHead(V, "v")), keys.map((j) => el("tr", { class: j === q ? "is-query" : "" }, label(j), vectorCells(vec(V, h, j)))),
        el("tr", { class: "is-query", id: "step-context" }, el("td", { class: "tokcell", text: "context" }), vectorCells(ctxRow)))));
    if (!d.s) box.append(el("p", { class: "small", text: "The raw scores are left out of this page (see the note above)." }));
    return box;
  }

  // -- start --
  resetHeads();
  window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => draw());
  document.addEventListener("keydown", (e) => {
    if (e.key !== "Escape") return;
    hideTip();
    S.locked = false; S.focus = null;
    if (S.view === "heads" && repaintHeads) repaintHeads();
  });
  try { frame(); } catch (err) { app.textContent = ""; app.append(el("p", { class: "error", role: "alert", text: String(err && err.message || err) })); busy(false); }
})();
