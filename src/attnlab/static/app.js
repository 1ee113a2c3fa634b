// attnlab attention explorer: two panels, each a model explored on the same input (POST /api/explore), with
// four views of any of its attention maps: heatmap, model view (layers x heads), head view (lines), neuron view
// (queries and keys), a word-level toggle, and PNG/SVG export. Weights are fetched a layer at a time.
// Plain DOM, SVG and canvas: no libraries, no build step, no network beyond this server's own /api.
// Embedded (a notebook's inline explorer, `attnlab.app.views.exploration_html`): the page carries one exploration
// as JSON in <script id="attnlab-data">; the data layer below answers from it, never the network, and one panel
// shows it at once. Everything else is the same code.
"use strict";

let MODELS = [];
const SVG_NS = "http://www.w3.org/2000/svg";
const HEAD_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                     "#bcbd22", "#7f7f7f", "#393b79", "#637939"];
const MAX_LINES = 20000;  // head view: above this many lines, weights under MIN_LINE are not drawn
const MIN_LINE = 0.02;
const MAX_TABLE_CELLS = 4000;  // larger heatmaps are drawn on a canvas: a 16,000-cell table freezes the page
const large = () => document.body.classList.contains("large");  // the "large text" switch (projectors)
const RAMP_HI = [13, 71, 161];  // the weight ramp's top (vmax); its 0 end is the theme's --ramp-lo

function el(tag, attrs = {}, text = "") {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

function svgEl(tag, attrs = {}, text = "") {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

const q = (panel, sel) => panel.querySelector(sel);

// ------------------------------------------------------------------------------------------ theme
// light or dark: style.css's colours are custom properties that <html data-theme="dark"> overrides. The choice
// (each panel's "theme" select): "auto" follows the system's prefers-color-scheme, live; "light" and "dark" are
// remembered in localStorage (this page's origin; where storage is off, for this page only)
const THEME_KEY = "attnlab-theme";
const SYSTEM_DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
const THEME = {choice: urlTheme() || (() => {  // classroom.js: ?theme= in the address comes first
  try {
    const v = localStorage.getItem(THEME_KEY);
    return v === "light" || v === "dark" ? v : "auto";
  } catch (err) { return "auto"; }
})()};

function applyTheme() {
  const dark = THEME.choice === "dark" || (THEME.choice === "auto" && !!SYSTEM_DARK && SYSTEM_DARK.matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  document.querySelectorAll("select.theme").forEach(s => { s.value = THEME.choice; });
}

function setTheme(choice) {
  THEME.choice = choice;
  try {
    if (choice === "auto") localStorage.removeItem(THEME_KEY);
    else localStorage.setItem(THEME_KEY, choice);
  } catch (err) { /* storage off: the choice holds for this page */ }
  rethemed();
}

// canvases are painted with the theme's ramp: the panels are drawn again
function rethemed() {
  applyTheme();
  document.querySelectorAll(".panel").forEach(p => { if (p.result) render(p); });
}

applyTheme();
if (SYSTEM_DARK) SYSTEM_DARK.addEventListener("change", () => { if (THEME.choice === "auto") rethemed(); });

// the theme's colours for what is painted or exported: background, text, secondary text, the ramp's 0 end
function themeColors() {
  const css = getComputedStyle(document.documentElement);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {bg: v("--bg", "#fff"), fg: v("--fg", "#222"), muted: v("--muted", "#555"), lo: v("--ramp-lo", "#ffffff")};
}

function hexRGB(hex) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
  return m ? m.slice(1).map(h => parseInt(h, 16)) : [255, 255, 255];
}

// ------------------------------------------------------------------------------------------ data
function currentMap(panel) {
  return panel.result.maps.find(m => m.key === q(panel, ".map").value);
}

function wordsOn(panel) { return q(panel, ".words").checked; }

// the rows' and columns' names of what the views show: pieces or words, cut to the sentence filter's block
function labels(panel, map) {
  const [rows, cols] = wordsOn(panel) ? [map.row_words, map.col_words] : [map.rows, map.cols];
  const s = pairSlice(panel, map);  // classroom.js
  return s ? [rows.slice(s.r0, s.r1), cols.slice(s.c0, s.c1)] : [rows, cols];
}

// {models, exploration, weights: {"map/layer/words": [head][row][col]}, neuron: {"map/layer/head": payload}}
const EMBEDDED = (() => {
  const node = document.getElementById("attnlab-data");
  return node ? JSON.parse(node.textContent) : null;
})();

function embedded(table, id) {
  if (!(id in EMBEDDED[table])) throw new Error(`${table} ${id} is not in this page's data`);
  return EMBEDDED[table][id];
}

async function getJSON(url) {
  const resp = await fetch(url);
  const data = await resp.json();
  if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
  return data;
}

async function getModels() {
  return EMBEDDED ? EMBEDDED.models : (await fetch("/api/models")).json();
}

async function postExplore(body) {
  if (EMBEDDED) return EMBEDDED.exploration;
  const resp = await fetch("/api/explore", {method: "POST", headers: {"Content-Type": "application/json"},
                                            body: JSON.stringify(body)});
  const data = await resp.json();
  if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
  return data;
}

// the step player's context vectors of one layer, {layer, context: [step][dim]}; cached per exploration
async function getSteps(panel, layer) {
  const id = `steps/${layer}`;
  if (!panel.cache.has(id)) {
    panel.cache.set(id, EMBEDDED ? Promise.resolve(embedded("steps", String(layer)))
                                 : getJSON(`/api/explore/${panel.result.id}/steps?layer=${layer}`));
  }
  return panel.cache.get(id);
}

async function getNeuron(panel, key, layer, head) {
  if (EMBEDDED) return embedded("neuron", `${key}/${layer}/${head}`);
  return getJSON(`/api/explore/${panel.result.id}/neuron?map=${encodeURIComponent(key)}&layer=${layer}&head=${head}`);
}

// one layer of one map, [head][row][col]; cached per exploration
async function layerWeights(panel, key, layer, words = wordsOn(panel)) {
  const id = `${key}/${layer}/${words}`;
  if (!panel.cache.has(id)) {
    const url = `/api/explore/${panel.result.id}/weights?map=${encodeURIComponent(key)}&layer=${layer}&words=${words}`;
    panel.cache.set(id, EMBEDDED ? Promise.resolve(embedded("weights", id)) : getJSON(url).then(d => d.weights));
  }
  return panel.cache.get(id);
}

function meanOfHeads(heads) {
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((s, h) => s + h[i][j], 0) / heads.length));
}

function selectedMatrix(panel, heads) {
  const head = q(panel, ".head").value;
  return head === "mean" ? meanOfHeads(heads) : heads[Number(head)];
}

function rowMax(row) { return Math.max(1e-9, ...row); }

// ------------------------------------------------------------------------------------------ heatmap
// what the rows and the columns are; a pair map under the sentence filter (panel given): the two sentences
function axisNames(map, panel = null) {
  const s = panel && pairSlice(panel, map);  // classroom.js
  return s ? [`queries (sentence ${s.key[0]})`, `keys (sentence ${s.key[1]})`]
           : [map.row_name || "rows", map.col_name || "columns"];
}

function sharedScale(panel) { return q(panel, ".scale").value === "shared"; }

// the weight drawn darkest: the largest of these matrices (per map), or 1 (shared: every map, layer and head on
// one scale, weights being probabilities)
function scaleTop(panel, mats) {
  return sharedScale(panel) ? 1 : Math.max(1e-9, ...mats.map(w => Math.max(...w.map(rowMax))));
}

// a colour scale: white (0) to blue (vmax; null: each thumbnail its own largest), what it colours, the axes'
// names, and the uniform weight 1/n (n keys: a row spread evenly over them) marked on the ramp and printed: a map
// near 1/n everywhere attends to nothing in particular, however dark a per-map scale draws it
function legend(panel, vmax, what, n) {
  const map = currentMap(panel);
  const [rowName, colName] = axisNames(map, panel);
  const u = 1 / Math.max(1, n);
  const box = el("div", {class: "legend", "data-scale": sharedScale(panel) ? "shared" : "map",
                         "data-uniform": u.toFixed(4)});
  const top = vmax === null ? "each its largest" : vmax === 1 ? "1" : `${vmax.toFixed(3)} (this map's max)`;
  const ramp = el("span", {class: "ramp"});
  if (vmax !== null) {
    const at = Math.min(1, u / vmax);
    box.dataset.uniformAt = at.toFixed(4);
    ramp.append(el("span", {class: "uniform", style: `left: calc(${(100 * at).toFixed(2)}% - 1px)`,
                            title: `uniform weight 1/${n} = ${u.toFixed(3)}`}));
  }
  box.append(el("span", {}, "0"), ramp, el("span", {class: "top"}, top),
             el("span", {class: "uniform-note"}, `| uniform 1/n = ${u.toFixed(3)} (n = ${n} ${colName} tokens` +
                (map.causal ? "; a causal row sees fewer" : "") + ")"),
             el("span", {class: "note"}, `${what}; rows: ${rowName} (queries), columns: ${colName} (keys)`));
  return box;
}

async function renderHeatmap(panel, box) {
  const map = currentMap(panel);
  const [rows, cols] = labels(panel, map);
  const w = selectedMatrix(panel, await viewWeights(panel, map.key, Number(q(panel, ".layer").value)));
  const vmax = scaleTop(panel, [w]);
  panel.exporter = () => heatmapSVG(w, rows, cols, exportTitle(panel, layerHeadText(panel)), vmax, axisNames(map, panel));
  panel.exportName = layerHeadParts(panel)[1];
  box.append(legend(panel, vmax, sharedScale(panel) ? "attention weight, shared scale (0 to 1)" :
                                                    "attention weight, scaled to this map's largest", cols.length));
  const strip = q(panel, ".source-strip");  // words joined as written: no sentencepiece mark
  (wordsOn(panel) || !map.col_strip ? cols : sliceLabels(pairSlice(panel, map), map.col_strip))
    .forEach((s, j) => strip.append(el("span", {"data-j": j}, s)));
  if (projectorOn()) {  // classroom.js: fitted to the panel's width
    fittedHeatmap(panel, box, w, rows, cols, vmax);
    return;
  }
  if (rows.length * cols.length > MAX_TABLE_CELLS) {
    canvasHeatmap(panel, box, w, rows, cols, vmax);
    return;
  }
  const table = el("table", {class: "heatmap"});
  const thead = el("thead");
  const top = el("tr");
  top.append(el("th", {class: "corner"}));
  cols.forEach((s, j) => top.append(el("th", {class: "src", "data-j": j}, s)));
  thead.append(top);
  table.append(thead);
  const body = el("tbody");
  const html = [];
  rows.forEach((t, i) => {
    html.push(`<tr data-i="${i}"><th class="tgt" data-i="${i}">${esc(t)}</th>`);
    w[i].forEach((x, j) => {
      html.push(`<td class="cell" data-i="${i}" data-j="${j}" data-w="${x.toFixed(4)}" title="${esc(t)} \u2192 ` +
                `${esc(cols[j])}: ${x.toFixed(3)}" style="background: rgba(13, 71, 161, ` +
                `${Math.min(1, x / vmax).toFixed(3)})"></td>`);
    });
    html.push("</tr>");
  });
  body.innerHTML = html.join("");  // one parse: a 100 x 160 map is 16,000 cells
  table.append(body);
  // hovering or tapping (a tap is a click) an output token (its label or any cell of its row) highlights the
  // row, the source token it attends to most (its column) and shades the source strip by the row's weights
  const pick = ev => {
    const target = ev.target.closest("[data-i]");
    if (target) highlight(panel, w, Number(target.dataset.i));
  };
  table.addEventListener("mouseover", pick);
  table.addEventListener("click", pick);
  table.addEventListener("mouseleave", () => highlight(panel, w, -1));
  // the grid scrolls in its own box, its labels sticky (style.css): the page never gets wider than the screen
  const wrap = el("div", {class: "heatmap-box"});
  wrap.append(table);
  box.append(wrap);
}

// weights as pixels, the theme's --ramp-lo (0) to RAMP_HI (vmax and above): a long map's cells, the model view's
// thumbnails
function paintWeights(canvas, w, vmax) {
  const R = w.length, C = w[0].length, lo = hexRGB(themeColors().lo);
  canvas.width = C;
  canvas.height = R;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(C, R);
  for (let i = 0; i < R; i++) {
    for (let j = 0; j < C; j++) {
      const a = Math.min(1, w[i][j] / vmax), p = 4 * (i * C + j);
      for (let c = 0; c < 3; c++) img.data[p + c] = lo[c] - Math.round(a * (lo[c] - RAMP_HI[c]));
      img.data[p + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
}

// a long input's heatmap: one pixel per weight on a canvas scaled up to `cell` px, the labels as elements that
// stay beside their cells (sticky) while the box scrolls; the hovered row and its most-attended column outlined
function canvasHeatmap(panel, box, w, rows, cols, vmax) {
  const cell = large() ? 16 : 12, R = rows.length, C = cols.length;
  const measure = el("canvas").getContext("2d");
  measure.font = `${large() ? 14 : 11}px sans-serif`;
  const left = Math.ceil(10 + Math.max(...rows.map(t => measure.measureText(t).width)));
  const top = Math.ceil(10 + Math.max(...cols.map(t => measure.measureText(t).width)));
  const wrap = el("div", {class: "heatmap-box canvas-box", "data-rows": R, "data-cols": C,
                          style: `--cell: ${cell}px`});
  const head = el("div", {class: "hm-top", style: `height: ${top}px`});
  const colBox = el("div", {class: "hm-cols"});
  colBox.innerHTML = cols.map((s, j) => `<span class="col-label" data-j="${j}">${esc(s)}</span>`).join("");
  head.append(el("div", {class: "hm-corner", style: `width: ${left}px`}), colBox);
  const rowBox = el("div", {class: "hm-rows", style: `width: ${left}px`});
  rowBox.innerHTML = rows.map((t, i) => `<div class="row-label" data-i="${i}">${esc(t)}</div>`).join("");
  const cells = el("div", {class: "hm-cells", style: `width: ${C * cell}px; height: ${R * cell}px`});
  const canvas = el("canvas", {class: "heatmap-canvas"});
  paintWeights(canvas, w, vmax);
  const rowHl = el("div", {class: "hm-row-hl", hidden: ""}), colHl = el("div", {class: "hm-col-hl", hidden: ""});
  cells.append(canvas, rowHl, colHl);
  const body = el("div", {class: "hm-body"});
  body.append(rowBox, cells);
  const inner = el("div", {class: "hm"});
  inner.append(head, body);
  wrap.append(inner);
  box.append(wrap);
  const spans = q(panel, ".source-strip").children;
  const show = i => {
    wrap.querySelectorAll(".hl").forEach(e => e.classList.remove("hl"));
    [...spans].forEach(s => { s.style.background = ""; });
    rowHl.hidden = colHl.hidden = i < 0;
    if (i < 0) return;
    const row = w[i], best = row.indexOf(Math.max(...row)), m = rowMax(row);
    rowHl.style.top = `${i * cell}px`;
    colHl.style.left = `${best * cell}px`;
    rowBox.children[i].classList.add("hl");
    colBox.children[best].classList.add("hl");
    [...spans].forEach((s, j) => { s.style.background = `rgba(255, 193, 7, ${(row[j] / m).toFixed(3)})`; });
    cells.title = `${rows[i]}: most attended ${cols[best]} (${row[best].toFixed(3)})`;
  };
  const fromCells = ev => {
    const r = canvas.getBoundingClientRect();
    show(Math.max(0, Math.min(R - 1, Math.floor((ev.clientY - r.top) / cell))));
  };
  cells.addEventListener("mousemove", fromCells);
  cells.addEventListener("click", fromCells);
  const fromLabel = ev => {
    const t = ev.target.closest(".row-label");
    if (t) show(Number(t.dataset.i));
  };
  rowBox.addEventListener("mouseover", fromLabel);
  rowBox.addEventListener("click", fromLabel);
  wrap.addEventListener("mouseleave", () => show(-1));
}

function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

function highlight(panel, w, i) {
  panel.querySelectorAll(".hl, .hl-col").forEach(e => e.classList.remove("hl", "hl-col"));
  const strip = panel.querySelectorAll(".source-strip span");
  strip.forEach(s => { s.style.background = ""; });
  if (i < 0) return;
  const row = w[i];
  const best = row.indexOf(Math.max(...row));
  panel.querySelectorAll(`table.heatmap [data-i="${i}"]`).forEach(e => e.classList.add("hl"));
  panel.querySelectorAll(`table.heatmap td[data-j="${best}"]`).forEach(e => e.classList.add("hl-col"));
  q(panel, `table.heatmap th.src[data-j="${best}"]`).classList.add("hl");
  const m = rowMax(row);
  strip.forEach((s, j) => { s.style.background = `rgba(255, 193, 7, ${(row[j] / m).toFixed(3)})`; });
}

// ------------------------------------------------------------------------------------------ model view
async function renderModel(panel, box) {
  const map = currentMap(panel);
  const shared = sharedScale(panel);
  const [rows, cols] = labels(panel, map);
  box.append(legend(panel, shared ? 1 : null, shared ? "each thumbnail: attention weight, shared scale (0 to 1)" :
                                              "each thumbnail scaled to its own largest weight", cols.length));
  // the heads ticked in the head picker (every head, unless a double-click showed one alone: classroom.js)
  const shown = selectedHeads(panel, map.heads), some = shown.length < map.heads;
  const fit = thumbFit(panel, map, rows, cols, Math.max(1, shown.length));
  const grid = el("div", {class: "model-grid", "data-thumb": fit.size, "data-labels": fit.rows.length ? "1" : "0",
                          "data-heads": shown.join(",")});
  grid.style.gridTemplateColumns = `${fit.layerW}px repeat(${Math.max(1, shown.length)}, ${fit.size}px)`;
  grid.append(el("span"));
  shown.forEach(h => {
    const name = el("span", {class: "grid-label head-name", "data-head": h,
                             title: "double-click: this head alone (again: every head)"},
                    map.heads > 1 ? `head ${h + 1}` : "");
    name.addEventListener("dblclick", () => soloHead(panel, h));
    grid.append(name);
  });
  box.append(grid);
  const heads = some ? `; head${shown.length === 1 ? "" : "s"} ${shown.map(h => h + 1).join(", ") || "none"} of ` +
                       `${map.heads} shown (double-click it again, or tick the heads above, for every head)` : "";
  box.append(el("p", {class: "note"}, "Click or tap a thumbnail to open it as a heatmap" + (map.heads > 1 ?
    "; double-click a head (its name or a thumbnail) to show it alone" : "") + `${heads}.`));
  const thumbs = [];
  for (let l = 0; l < map.layers; l++) {
    grid.append(el("span", {class: "grid-label"}, map.layers > 1 || map.heads > 1 ? `layer ${l + 1}` : ""));
    shown.forEach((h, col) => {
      const fig = el("figure", {class: "thumb", "data-layer": l, "data-head": h,
                                title: `layer ${l + 1}, head ${h + 1}: click to open` +
                                       (map.heads > 1 ? ", double-click for this head alone" : "")});
      const canvas = el("canvas");
      thumbFigure(fig, canvas, fit, rows, cols);
      // a click opens the thumbnail once it is not the first of a double-click: the second click (detail 2)
      // cancels the first's opening
      fig.addEventListener("click", ev => {
        clearTimeout(panel.thumbClick);
        if (ev.detail > 1) return;
        panel.thumbClick = setTimeout(() => {
          q(panel, ".layer").value = String(l);
          q(panel, ".head").value = String(h);
          setView(panel, "heatmap");
        }, map.heads > 1 ? 300 : 0);
      });
      fig.addEventListener("dblclick", () => { if (map.heads > 1) soloHead(panel, h); });
      grid.append(fig);
      thumbs.push([l, h, canvas, col]);
    });
  }
  // layer by layer: the first row shows before the last one has arrived
  for (let l = 0; l < map.layers; l++) {
    const weights = await viewWeights(panel, map.key, l);  // classroom.js: the sentence filter's block
    thumbs.filter(t => t[0] === l).forEach(([, h, canvas]) => paintWeights(canvas, weights[h],
                                                                           scaleTop(panel, [weights[h]])));
  }
  const n = cols.length, filter = pairSlice(panel, map);
  panel.exportName = [some ? `heads${shown.map(h => h + 1).join("-")}` : "", filter ? `pair${filter.key}` : "",
                      wordsOn(panel) ? "words" : ""].filter(Boolean).join("-");
  const what = [some ? `head${shown.length === 1 ? "" : "s"} ${shown.map(h => h + 1).join(", ")} of every layer` :
                "every layer and head", filter ? `sentences ${filter.name}` : "",
                shared ? "shared scale" : "each its own scale"].filter(Boolean).join(", ");
  panel.exporter = () => modelSVG(map, thumbs, exportTitle(panel, what), n, shown);
}

// how the model view's thumbnails fill the panel's width: `size` px a cell (at most 240, 320 with large text),
// each a square map of `map` px with, when there is room, the rows' token names on its left (`left` px) and the
// columns' above it (`top` px), every k-th so that they never overlap: the shown rows' and columns' indices. Room:
// each strip at most 40% of the cell, a map of 48 px at least.
function thumbFit(panel, map, rows, cols, columns = map.heads) {
  const big = large(), gap = 4, font = big ? 13 : 10, line = Math.ceil(font * 1.25);
  const measure = el("canvas").getContext("2d");
  measure.font = `${big ? 15 : 11}px system-ui, sans-serif`;  // .model-grid's labels
  const layerW = map.layers > 1 || map.heads > 1 ? Math.ceil(measure.measureText(`layer ${map.layers}`).width) + 6 : 0;
  const avail = (q(panel, ".view-box").clientWidth || 540) - 8;
  const size = Math.max(24, Math.floor(Math.min(big ? 320 : 240, (avail - layerW - gap * columns) / columns)));
  measure.font = `${font}px sans-serif`;  // .thumb-label
  const widest = ts => Math.ceil(Math.max(0, ...ts.map(t => measure.measureText(t).width)));
  const left = widest(rows) + 6, top = widest(cols) + 6, side = size - left;
  // every k-th of n labels along `length` px, each `line` px tall and centred on its token: from the first whose
  // box starts inside the map to the last whose box ends inside it
  const every = (n, length) => {
    const step = length / n, k = Math.ceil(line / step), shown = [];
    const fits = i => (i + 0.5) * step + line / 2 <= length;
    for (let i = Math.max(0, Math.ceil(line / 2 / step - 0.5)); i < n && fits(i); i += k) shown.push(i);
    return shown;
  };
  const none = {layerW, size, font, line, left: 0, top: 0, map: size, rows: [], cols: []};
  if (left > 0.4 * size || top > 0.4 * size || side < 48) return none;
  const shown = {rows: every(rows.length, side), cols: every(cols.length, side)};
  if (!shown.rows.length || !shown.cols.length) return none;
  return {layerW, size, font, line, left, top, map: side, ...shown};
}

// one thumbnail: the canvas (painted later) and its token names as `fit` places them
function thumbFigure(fig, canvas, fit, rows, cols) {
  fig.style.width = `${fit.size}px`;
  fig.style.height = `${fit.top + fit.map}px`;
  Object.assign(canvas.style, {left: `${fit.left}px`, top: `${fit.top}px`, width: `${fit.map}px`,
                               height: `${fit.map}px`});
  fig.append(canvas);
  if (!fit.rows.length) return;
  const step = [fit.map / rows.length, fit.map / cols.length];
  const rowBox = el("div", {class: "thumb-rows", style: `left: 0; top: ${fit.top}px; width: ${fit.left}px; ` +
                                                       `height: ${fit.map}px; font-size: ${fit.font}px`});
  fit.rows.forEach(i => rowBox.append(el("span", {class: "thumb-label", "data-i": i, style: `top: ` +
    `${((i + 0.5) * step[0] - fit.line / 2).toFixed(1)}px; line-height: ${fit.line}px`}, rows[i])));
  const colBox = el("div", {class: "thumb-cols", style: `left: ${fit.left}px; top: 0; width: ${fit.map}px; ` +
                                                       `height: ${fit.top}px; font-size: ${fit.font}px`});
  fit.cols.forEach(j => colBox.append(el("span", {class: "thumb-label", "data-j": j, style: `left: ` +
    `${((j + 0.5) * step[1] - fit.line / 2).toFixed(1)}px; line-height: ${fit.line}px; width: ${fit.line}px`},
                                         cols[j])));
  fig.append(rowBox, colBox);
}

// ------------------------------------------------------------------------------------------ head view
function selectedHeads(panel, n) {
  const boxes = [...panel.querySelectorAll(".head-picker input")];
  return boxes.length === n ? boxes.filter(b => b.checked).map(b => Number(b.value)) : [...Array(n).keys()];
}

function fillHeadPicker(panel, map) {
  const picker = q(panel, ".head-picker");
  picker.replaceChildren(el("span", {}, "heads shown (colour = head; double-click one to show it alone, " +
                                        "again for every head): "));
  panel.dataset.solo = "";
  for (let h = 0; h < map.heads; h++) {
    const label = el("label", {style: `color: ${HEAD_COLORS[h % HEAD_COLORS.length]}`, "data-head": h,
                               title: "click: show or hide; double-click: this head alone (again: every head)"});
    const box = el("input", {type: "checkbox", value: h});
    box.checked = true;
    box.addEventListener("change", () => { panel.dataset.solo = ""; render(panel); });
    label.addEventListener("dblclick", ev => { ev.preventDefault(); soloHead(panel, h); });  // classroom.js
    label.append(box, ` ${h + 1} `);
    picker.append(label);
  }
}

// bertviz's head view, both sides live: the rows' tokens on the left, the columns' on the right, a line per pair
// and selected head (colour = head, opacity = weight, width growing with it). Hovering or tapping a token on
// either side keeps its lines only and draws, beside the other side's tokens, bars of its weights (the mean over
// the heads shown, each head's share in its colour). A tap pins the focus; tapping the token again frees it.
async function renderHead(panel, box) {
  const map = currentMap(panel);
  const [rows, cols] = labels(panel, map);
  const [rowName, colName] = axisNames(map, panel);
  const layer = Number(q(panel, ".layer").value);
  const all = await viewWeights(panel, map.key, layer);  // classroom.js: the sentence filter's block
  const heads = selectedHeads(panel, all.length);
  const font = large() ? 16 : projectorOn() ? 15 : 12, dy = large() ? 24 : projectorOn() ? 21 : 17;
  const bar = large() ? 56 : 40;
  const measure = el("canvas").getContext("2d");
  measure.font = `bold ${font}px sans-serif`;
  const widest = ts => Math.ceil(Math.max(...ts.map(t => measure.measureText(t).width)));
  const wl = widest([rowName, ...rows]), wr = widest([colName, ...cols]);
  const avail = Math.max(300, (q(panel, ".view-box").clientWidth || 540) - 4);
  const span = Math.max(80, Math.min(projectorOn() ? 720 : 360, avail - 2 * bar - wl - wr - 28));
  const xl = bar + 6 + wl, x0 = xl + 6, x1 = x0 + span, xr = x1 + 6, width = xr + wr + 6 + bar;
  const yOf = k => 2 * dy + k * dy, mid = -Math.round(font / 3);
  const height = yOf(Math.max(rows.length, cols.length)) + 4;
  panel.exportName = [layerHeadParts(panel, null)[1], all.length > 1 ? `heads${heads.map(h => h + 1).join("-")}` : ""]
    .filter(Boolean).join("-");
  const svg = svgEl("svg", {class: "head-view", width, height, viewBox: `0 0 ${width} ${height}`,
                            style: `font-size: ${font}px`});
  svg.append(svgEl("text", {x: xl, y: dy, "text-anchor": "end", class: "side-name"}, rowName),
             svgEl("text", {x: xr, y: dy, class: "side-name"}, colName));
  const total = rows.length * cols.length * heads.length;
  const floor = total > MAX_LINES ? MIN_LINE : 0;
  let skipped = 0;
  const groups = rows.map((_, i) => svgEl("g", {class: "lines", "data-i": i}));
  heads.forEach(h => {
    const w = all[h], color = HEAD_COLORS[h % HEAD_COLORS.length];
    rows.forEach((_, i) => {
      cols.forEach((_, j) => {
        if (w[i][j] < floor) { skipped++; return; }
        groups[i].append(svgEl("line", {x1: x0, y1: yOf(i) + mid, x2: x1, y2: yOf(j) + mid, stroke: color,
                                        "stroke-opacity": w[i][j].toFixed(3),
                                        "stroke-width": (1 + 3 * w[i][j]).toFixed(2),
                                        "data-i": i, "data-j": j, "data-h": h}));
      });
    });
  });
  groups.forEach(g => svg.append(g));
  rows.forEach((t, i) => svg.append(svgEl("text", {x: xl, y: yOf(i), "text-anchor": "end", class: "row-token",
                                                    "data-i": i}, t)));
  cols.forEach((t, j) => svg.append(svgEl("text", {x: xr, y: yOf(j), class: "col-token", "data-j": j}, t)));
  const bars = svgEl("g", {class: "bars"});
  svg.append(bars);
  const geometry = {all, heads, bars, rows, cols, bar, font, yOf, left: 2, right: width - bar - 2};
  const at = ev => {
    const t = ev.target.closest("text.row-token, text.col-token");
    if (!t) return null;
    return t.classList.contains("row-token") ? ["row", Number(t.dataset.i)] : ["col", Number(t.dataset.j)];
  };
  let pinned = null;
  svg.addEventListener("mouseover", ev => { const f = at(ev); if (f) headFocus(svg, geometry, ...f); });
  svg.addEventListener("click", ev => {
    const f = at(ev);
    if (!f) return;
    pinned = pinned && pinned[0] === f[0] && pinned[1] === f[1] ? null : f;
    headFocus(svg, geometry, ...(pinned || [null, -1]));
  });
  svg.addEventListener("mouseleave", () => headFocus(svg, geometry, ...(pinned || [null, -1])));
  svg.addEventListener("dblclick", ev => {  // a head's line: that head alone, or every head again
    const line = ev.target.closest("line[data-h]");
    if (line) soloHead(panel, Number(line.dataset.h));
  });
  const shown = all.length === 1 ? "" : heads.length ? `head${heads.length > 1 ? "s" : ""} ` +
                `${heads.map(h => h + 1).join(", ")} of ${all.length}` : "no head (tick one below)";
  const where = [map.layers > 1 || all.length > 1 ? `Layer ${layer + 1} of ${map.layers}` : "", shown]
    .filter(Boolean).join(": ");
  // rows are the queries: for a cross-attention the target (decoder) side, attending to the source's keys
  box.append(el("p", {class: "note head-note"}, `${where ? `${where}: ` : ""}a line from each query on the ` +
                `left (rows: ${rowName}) to each key it attends to on the right (columns: ${colName}); ` +
                "colour = head, opacity and width = weight. Hover or tap a token on either side: its lines only, " +
                "and bars of its weights beside the other side (mean of the heads shown)."));
  if (skipped) box.append(el("p", {class: "note"}, `${skipped.toLocaleString()} lines of weight under ${MIN_LINE} ` +
                                                  "not drawn (a long input)"));
  const wrap = el("div", {class: "head-box"});
  wrap.append(svg);
  box.append(wrap);
  panel.exporter = () => {
    const copy = svg.cloneNode(true);
    copy.setAttribute("xmlns", SVG_NS);
    copy.classList.remove("focus-row", "focus-col");
    copy.querySelectorAll(".on, .hl").forEach(e => e.classList.remove("on", "hl"));
    copy.querySelector("g.bars").replaceChildren();
    const what = [layerHeadParts(panel, null)[0], shown].filter(Boolean).join(", ");
    return standalone(copy.outerHTML, width, height, exportTitle(panel, `${what}${what ? " " : ""}(lines)`));
  };
}

// side "row" or "col" and a token's index (-1: no focus): that token's lines, bars beside the other side
function headFocus(svg, g, side, k) {
  svg.querySelectorAll(".on, .hl").forEach(e => e.classList.remove("on", "hl"));
  svg.classList.toggle("focus-row", side === "row" && k >= 0);
  svg.classList.toggle("focus-col", side === "col" && k >= 0);
  g.bars.replaceChildren();
  if (k < 0) return;
  if (side === "row") {
    svg.querySelector(`g.lines[data-i="${k}"]`).classList.add("on");
    svg.querySelector(`text.row-token[data-i="${k}"]`).classList.add("hl");
  } else {
    svg.querySelectorAll(`line[data-j="${k}"]`).forEach(l => l.classList.add("on"));
    svg.querySelector(`text.col-token[data-j="${k}"]`).classList.add("hl");
  }
  const others = side === "row" ? g.cols : g.rows;
  others.forEach((_, m) => {
    const weight = h => (side === "row" ? g.all[h][k][m] : g.all[h][m][k]);
    const mean = g.heads.reduce((s, h) => s + weight(h), 0) / Math.max(1, g.heads.length);
    const bar = svgEl("g", {class: "bar", "data-k": m, "data-w": mean.toFixed(4)});
    bar.append(svgEl("title", {}, `${mean.toFixed(3)} (mean of the heads shown)`));
    let x = 0;
    g.heads.forEach(h => {
      const len = weight(h) / g.heads.length * g.bar;
      bar.append(svgEl("rect", {x: side === "row" ? g.right + x : g.left + g.bar - x - len,
                                y: g.yOf(m) - g.font * 0.8, width: Math.max(0, len), height: g.font * 0.8,
                                fill: HEAD_COLORS[h % HEAD_COLORS.length]}));
      x += len;
    });
    g.bars.append(bar);
  });
}

// ------------------------------------------------------------------------------------------ neuron view
function colorOf(v, vmax) {
  const a = Math.min(1, Math.abs(v) / vmax).toFixed(3);
  return v >= 0 ? `rgba(33, 102, 172, ${a})` : `rgba(178, 24, 43, ${a})`;
}

// why a map has no neuron view, and which maps of this exploration have one (never a map it does not have)
function noNeuron(panel, map) {
  const have = panel.result.maps.filter(m => m.neuron).map(m => m.title);
  const why = panel.result.family === "rnn" ? "an RNN's attention scores are not dot products of projected " +
                                              "queries and keys" :
    "not a dot-product attention with its queries and keys (a rollout, an alignment, or weights given alone)";
  return `The neuron view needs queries and keys (the vectors of a dot-product attention); the ${map.title} has none ` +
         `(${why}). ` + (have.length ? `Maps of this input that have them: ${have.join(", ")}.` :
                                      "No map of this input has them: the heatmap, model and head views show it.");
}

async function renderNeuron(panel, box) {
  const whole = currentMap(panel);
  if (!whole.neuron) {
    box.append(el("p", {class: "note neuron-none"}, noNeuron(panel, whole)));
    panel.exporter = null;
    return;
  }
  const [rowName, colName] = axisNames(whole, panel);
  const layer = Number(q(panel, ".layer").value);
  const mean = q(panel, ".head").value === "mean";
  const head = mean ? 0 : Number(q(panel, ".head").value);
  // classroom.js: the sentence filter's queries and keys
  const [map, n] = pairNeuron(panel, whole, await getNeuron(panel, whole.key, layer, head));
  const info = el("p", {class: "note"}, `Layer ${layer + 1}, head ${head + 1}` +
                  `${mean ? " (the neuron view shows one head: pick it above)" : ""}; pieces, not words. Hover or ` +
                  `tap a query (${rowName}): its query q, each key k (${colName}), their elementwise product ` +
                  `q\u00d7k; sum(q\u00d7k) \u00d7 ${n.scale.toFixed(4)} (1/\u221ad) is the score before the ` +
                  "softmax, the weight after it." + (map.causal ? " Causal: a query sees the keys up to its own " +
                  "position, later ones are masked; the last query is shown first." : ""));
  const wrap = el("div", {class: "neuron"});
  const strip = el("div", {class: "queries"});
  strip.append(el("span", {class: "side-name"}, `${rowName}:`));
  map.rows.forEach((t, i) => strip.append(el("span", {class: "query-token", "data-i": i}, t)));
  const right = el("div", {class: "neuron-detail"});
  wrap.append(strip, right);
  box.append(info, wrap);
  const show = i => {
    strip.querySelectorAll(".hl").forEach(e => e.classList.remove("hl"));
    strip.querySelector(`[data-i="${i}"]`).classList.add("hl");
    neuronDetail(right, n, map, i);
  };
  const pick = ev => {
    const t = ev.target.closest(".query-token");
    if (t) show(Number(t.dataset.i));
  };
  strip.addEventListener("mouseover", pick);
  strip.addEventListener("click", pick);
  show(map.causal ? map.rows.length - 1 : 0);  // a causal map's first query sees one key, the rest masked
  panel.exportName = layerHeadParts(panel, String(head), false)[1];
  panel.exporter = () => {
    const i = Number(strip.querySelector(".hl").dataset.i);
    return neuronSVG(n, map, i, exportTitle(panel, `${layerHeadParts(panel, String(head), false)[0]}, query ` +
                                                   `${i + 1} (${map.rows[i]})`));
  };
}

// one query's detail, compact: each key with its score and weight beside it, then k and q x k
function neuronDetail(box, n, map, i) {
  const qi = n.q[i];
  const vmax = Math.max(1e-9, ...qi.map(Math.abs), ...n.k.flat().map(Math.abs));
  const pmax = Math.max(1e-9, ...n.k.flatMap(k => k.map((x, d) => Math.abs(x * qi[d]))));
  // a long input's vectors as one small canvas each (10,000s of spans would freeze the page), a short one's as
  // spans carrying their values
  const big = n.k.length * qi.length > 4000;
  const vec = (v, m, cls) => big ? `<canvas class="vec ${cls}" width="${v.length * 5}" height="11"></canvas>` :
    `<span class="vec ${cls}">` + v.map(x => `<span class="v" data-v="${x}" style="background:${colorOf(x, m)}" ` +
                                         `title="${x.toFixed(4)}"></span>`).join("") + "</span>";
  const [, colName] = axisNames(map);
  const unmasked = n.scores[i].filter(s => s !== null).length;
  const html = [`<table class="neuron-table" data-scale="${n.scale}" data-i="${i}"><thead>` +
                `<tr><th>${esc(colName)}</th><th>score</th><th>weight</th><th>k</th><th>q\u00d7k</th></tr>` +
                `<tr class="q-row"><th colspan="3">query q of ${esc(map.rows[i])} (${unmasked} of ${n.k.length} ` +
                `keys seen)</th><td>${vec(qi, vmax, "q")}</td><td></td></tr></thead><tbody>`];
  n.k.forEach((k, j) => {
    const s = n.scores[i][j], w = n.weights[i][j];
    const prod = k.map((x, d) => x * qi[d]);
    html.push(`<tr class="key-row${s === null ? " masked" : ""}" data-j="${j}"><th>${esc(map.cols[j])}</th>` +
              `<td class="score" data-score="${s === null ? "" : s}">${s === null ? "masked" : s.toFixed(3)}</td>` +
              `<td class="weight"><span class="wbar" style="width: ${(w * 40).toFixed(1)}px"></span>` +
              `${w.toFixed(3)}</td><td>${vec(k, vmax, "k")}</td><td>${vec(prod, pmax, "prod")}</td></tr>`);
  });
  html.push("</tbody></table>");
  box.innerHTML = html.join("");
  if (!big) return;
  const paint = (canvas, v, m) => {
    const ctx = canvas.getContext("2d");
    v.forEach((x, d) => { ctx.fillStyle = colorOf(x, m); ctx.fillRect(d * 5, 0, 4, 11); });
  };
  paint(box.querySelector("canvas.q"), qi, vmax);
  box.querySelectorAll("tr.key-row").forEach((tr, j) => {
    paint(tr.querySelector("canvas.k"), n.k[j], vmax);
    paint(tr.querySelector("canvas.prod"), n.k[j].map((x, d) => x * qi[d]), pmax);
  });
}

// ------------------------------------------------------------------------------------------ export
// an export's title, two lines: model, map and what is shown (layer, head); the input
function exportTitle(panel, what) {
  const map = currentMap(panel);
  const input = panel.sentence || panel.result.input || "";
  const short = input.length > 110 ? `${input.slice(0, 110)}\u2026` : input;
  return [`${q(panel, ".model").value}: ${map.title}${what ? `, ${what}` : ""}`, short ? `input: \u201c${short}\u201d` : ""]
    .filter(Boolean);
}

function standalone(inner, width, height, title) {
  // an SVG file of its own: the theme's background (white, or the dark theme's when it is on) and text colour,
  // the title's lines above the view
  const {bg, fg} = themeColors();
  const lines = Array.isArray(title) ? title : [title];
  const head = 18 * lines.length + 8;
  const wide = Math.max(width, ...lines.map(t => Math.ceil(6.6 * t.length) + 8));
  const body = inner.replace(/^<svg[^>]*>/, "").replace(/<\/svg>$/, "");
  const texts = lines.map((t, k) => `<text x="4" y="${18 * k + 14 - head}"${k ? "" : ' font-weight="bold"'}>` +
                                    `${esc(t)}</text>`).join("");
  return `<svg xmlns="${SVG_NS}" width="${wide}" height="${height + head}" viewBox="0 ${-head} ${wide} ` +
         `${height + head}" font-family="sans-serif" font-size="12" fill="${fg}"><rect x="0" y="${-head}" ` +
         `width="${wide}" height="${height + head}" fill="${bg}"/>${texts}<style>line{stroke-linecap:round}</style>` +
         `${body}</svg>`;
}

// an exported colour scale: the ramp's 0 end to blue (top), at (x, y); `uniform` [1/n, its place on the ramp 0..1
// or null] marks and prints the uniform weight
function legendSVG(x, y, top, what, uniform = null) {
  const steps = [`<rect x="${x + 12}" y="${y}" width="120" height="12" fill="${themeColors().lo}"/>`,  // 0
                 ...[...Array(24).keys()].map(k => `<rect x="${x + 12 + 5 * k}" y="${y}" width="5" height="12" ` +
                                                   `fill="rgb(13,71,161)" fill-opacity="${(k / 23).toFixed(3)}"/>`)];
  const [u, at] = uniform || [null, null];
  const mark = at === null ? "" : `<line class="uniform" x1="${x + 12 + 120 * at}" x2="${x + 12 + 120 * at}" ` +
                                  `y1="${y - 3}" y2="${y + 15}" stroke="#ff6f00" stroke-width="2"/>`;
  const note = u === null ? "" : `; uniform 1/n = ${u.toFixed(3)}`;
  return `<text x="${x}" y="${y + 10}">0</text>${steps.join("")}<rect x="${x + 12}" y="${y}" width="120" ` +
         `height="12" fill="none" stroke="#999" stroke-width="0.5"/>${mark}<text x="${x + 138}" y="${y + 10}">` +
         `${esc(top)}  ${esc(what + note)}</text>`;
}

function heatmapSVG(w, rows, cols, title, vmax, [rowName, colName]) {
  const cell = 14;
  const left = 8 + 7 * Math.max(...rows.map(s => s.length)), top = 8 + 7 * Math.max(...cols.map(s => s.length));
  const width = Math.max(left + cell * cols.length + 10, 420), height = top + cell * rows.length + 40;
  const {muted, lo} = themeColors();
  const parts = [`<text x="4" y="14" fill="${muted}">rows: ${esc(rowName)}</text>`,
                 `<text x="4" y="30" fill="${muted}">columns: ${esc(colName)}</text>`,
                 `<rect x="${left}" y="${top}" width="${cell * cols.length}" height="${cell * rows.length}" ` +
                 `fill="${lo}"/>`];  // the cells' base: weight 0
  cols.forEach((s, j) => parts.push(`<text transform="translate(${left + j * cell + 10},${top - 4}) rotate(-90)">` +
                                    `${esc(s)}</text>`));
  rows.forEach((t, i) => {
    parts.push(`<text x="${left - 4}" y="${top + i * cell + 11}" text-anchor="end">${esc(t)}</text>`);
    w[i].forEach((x, j) => parts.push(`<rect x="${left + j * cell}" y="${top + i * cell}" width="${cell}" ` +
                                      `height="${cell}" fill="rgb(13,71,161)" ` +
                                      `fill-opacity="${Math.min(1, x / vmax).toFixed(3)}"/>`));
  });
  parts.push(legendSVG(left, top + cell * rows.length + 14, vmax === 1 ? "1" : `max ${vmax.toFixed(3)}`,
                       vmax === 1 ? "attention weight (shared scale)" : "attention weight (this map's largest)",
                       [1 / cols.length, Math.min(1, 1 / cols.length / vmax)]));
  return standalone(`<svg>${parts.join("")}</svg>`, width, height, title);
}

// the thumbnails [layer, head, canvas, column] of the heads `shown`, one column each
function modelSVG(map, thumbs, title, n, shown) {
  const size = 96, gap = 8, left = 60, top = 20;
  const parts = [];
  shown.forEach((h, col) => {
    if (map.heads > 1) parts.push(`<text x="${left + col * (size + gap)}" y="${top - 6}">head ${h + 1}</text>`);
  });
  thumbs.forEach(([l, , canvas, col]) => {
    if (col === 0 && (map.layers > 1 || map.heads > 1)) {
      parts.push(`<text x="4" y="${top + l * (size + gap) + size / 2}">layer ${l + 1}</text>`);
    }
    parts.push(`<image x="${left + col * (size + gap)}" y="${top + l * (size + gap)}" width="${size}" ` +
               `height="${size}" preserveAspectRatio="none" style="image-rendering:pixelated" ` +
               `href="${canvas.toDataURL("image/png")}"/>`);
  });
  const bottom = top + map.layers * (size + gap);
  const shared = title[0].includes("shared");
  parts.push(legendSVG(left, bottom + 4, shared ? "1" : "max", "attention weight",
                       [1 / n, shared ? 1 / n : null]));
  return standalone(`<svg>${parts.join("")}</svg>`, Math.max(left + shown.length * (size + gap), 360), bottom + 24,
                    title);
}

function neuronSVG(n, map, i, title) {
  const c = 8, left = 90, Dh = n.q[i].length, top = 30;
  const vmax = Math.max(1e-9, ...n.q[i].map(Math.abs), ...n.k.flat().map(Math.abs));
  const parts = [`<text x="4" y="${top - 12}">q (${esc(map.rows[i])})</text>`];
  n.q[i].forEach((x, d) => parts.push(`<rect x="${left + d * c}" y="${top - 20}" width="${c}" height="${c}" ` +
                                      `fill="${colorOf(x, vmax)}"/>`));
  n.k.forEach((k, j) => {
    const y = top + 4 + j * (c + 2);
    parts.push(`<text x="${left - 4}" y="${y + c}" text-anchor="end">${esc(map.cols[j])}</text>`);
    k.forEach((x, d) => {
      parts.push(`<rect x="${left + d * c}" y="${y}" width="${c}" height="${c}" fill="${colorOf(x, vmax)}"/>`);
      parts.push(`<rect x="${left + (Dh + 2) * c + d * c}" y="${y}" width="${c}" height="${c}" ` +
                 `fill="${colorOf(x * n.q[i][d], vmax * vmax)}"/>`);
    });
    const s = n.scores[i][j];
    parts.push(`<text x="${left + (2 * Dh + 4) * c}" y="${y + c}">${s === null ? "masked" : s.toFixed(3)}</text>`);
  });
  return standalone(`<svg>${parts.join("")}</svg>`, left + (2 * Dh + 12) * c, top + n.k.length * (c + 2) + 10,
                    title);
}

function download(panel, blob, fmt) {
  // the file's name records what it shows: attnlab-MODEL-MAP-VIEW[-layerL][-head or mean][-words].FMT
  const shows = panel.exportName ? `-${panel.exportName}` : "";
  const a = el("a", {href: URL.createObjectURL(blob), download: `attnlab-${q(panel, ".model").value}-` +
                     `${q(panel, ".map").value}-${panel.view}${shows}.${fmt}`});
  document.body.append(a);
  a.click();
  a.remove();
  panel.dataset.exported = `${fmt}:${blob.size}`;
}

async function exportView(panel, fmt) {
  if (!panel.exporter) return;
  const svg = panel.exporter();
  const blob = new Blob([svg], {type: "image/svg+xml"});
  if (fmt === "svg") { download(panel, blob, "svg"); return; }
  const img = new Image();
  const url = URL.createObjectURL(blob);
  await new Promise((ok, fail) => { img.onload = ok; img.onerror = fail; img.src = url; });
  const scale = 2;
  const canvas = el("canvas", {width: img.width * scale, height: img.height * scale});
  const ctx = canvas.getContext("2d");
  ctx.scale(scale, scale);
  ctx.drawImage(img, 0, 0);
  URL.revokeObjectURL(url);
  canvas.toBlob(png => download(panel, png, "png"), "image/png");
}

// ------------------------------------------------------------------------------------------ decoding
// a hypothesis as the lists show it: an empty one named, never a bare score
function hypothesisText(text) { return text === "" ? "(empty)" : text; }

function renderDecoding(panel, r) {
  const nbest = q(panel, ".nbest");
  nbest.replaceChildren();
  r.nbest.forEach(h => nbest.append(el("li", {}, `${h.score.toFixed(3)}  ${hypothesisText(h.text)}`)));
  const tokens = q(panel, ".tokens");
  tokens.replaceChildren();
  const tip = q(panel, ".tip");
  r.choices.forEach((c, t) => {
    const span = el("span", {class: "tok" + (c.generated ? "" : " prompt"), "data-t": t, "data-p": c.prob},
                    c.strip ?? c.label);
    span.style.background = `rgba(255, 152, 0, ${(1 - c.prob).toFixed(3)})`;  // the more hesitant, the darker
    tokens.append(span);
  });
  // the shading explained: darker is less sure
  decodingLegend(panel, r.choices.length > 0);
  tokens.onmouseover = tokens.onclick = ev => {  // hover, or tap (a click)
    const span = ev.target.closest(".tok");
    if (!span) return;
    const c = r.choices[Number(span.dataset.t)];
    tip.replaceChildren(el("b", {}, `${c.label}: p = ${c.prob.toFixed(3)}`));
    const list = el("ol");
    c.top.forEach(a => list.append(el("li", {class: a.piece === c.piece ? "chosen" : "", "data-p": a.prob},
                                      `${a.label}  ${a.prob.toFixed(3)}`)));
    tip.append(list);
    // under the hovered token, kept inside the panel on a narrow screen
    tip.style.left = `${Math.max(0, Math.min(span.offsetLeft, tokens.clientWidth - tip.offsetWidth))}px`;
    tip.style.top = `${span.offsetTop + span.offsetHeight + 2}px`;
    tip.hidden = false;
  };
  tokens.onmouseleave = () => { tip.hidden = true; };
}

function decodingLegend(panel, shown) {
  const box = q(panel, ".decoding");
  box.querySelector(".prob-legend")?.remove();
  if (!shown) return;
  const note = el("p", {class: "prob-legend note"});
  note.append("each token shaded by how unsure the model was: p = 1 ", el("span", {class: "ramp prob"}),
              " p = 0 (p: its probability; hover or tap a token for the top 5)");
  q(panel, ".tokens").after(note);
}

// ------------------------------------------------------------------------------------------ panel
// what the layer and head selectors mean in this view: the model view shows every layer and head, the head view
// the heads ticked in its picker (as lines), so the selectors they do not use are hidden
function syncControls(panel) {
  const map = currentMap(panel);
  const single = map.layers === 1 && map.heads === 1;
  q(panel, ".layer").closest("label").hidden = single || panel.view === "model";
  q(panel, ".head").closest("label").hidden = single || panel.view === "model" || panel.view === "head";
  q(panel, ".pair-box").hidden = map.split === null || map.split === undefined || panel.view === "player";
}

// what a view shows, for titles and file names: a map of one layer and one head (an RNN's alignment) names
// neither, one of one head (a rollout) no head; [text, name]: ["layer 2, mean of heads, words", "layer2-mean-words"]
function layerHeadParts(panel, head = q(panel, ".head").value, words = wordsOn(panel)) {
  const map = currentMap(panel), layer = Number(q(panel, ".layer").value) + 1;
  const text = [], name = [];
  if (map.layers > 1 || map.heads > 1) { text.push(`layer ${layer}`); name.push(`layer${layer}`); }
  if (map.heads > 1 && head !== null) {
    text.push(head === "mean" ? "mean of heads" : `head ${Number(head) + 1}`);
    name.push(head === "mean" ? "mean" : `head${Number(head) + 1}`);
  }
  const pair = pairSlice(panel, map, words);  // classroom.js: the sentence filter
  if (pair) { text.push(`sentences ${pair.name}`); name.push(`pair${pair.key}`); }
  if (words) { text.push("words"); name.push("words"); }
  return [text.join(", "), name.join("-")];
}

function layerHeadText(panel) { return layerHeadParts(panel)[0]; }

function fillLayerHead(panel) {
  const map = currentMap(panel);
  const layer = q(panel, ".layer"), head = q(panel, ".head");
  panel.querySelectorAll(".lh").forEach(l => { l.hidden = map.layers === 1 && map.heads === 1; });
  layer.replaceChildren();
  head.replaceChildren();
  for (let l = 0; l < map.layers; l++) layer.append(el("option", {value: l}, `${l + 1}`));
  layer.value = String(map.layers - 1);  // the last layer, as `attnlab plot attention`
  if (map.heads > 1) head.append(el("option", {value: "mean"}, `mean of ${map.heads}`));
  for (let h = 0; h < map.heads; h++) head.append(el("option", {value: h}, `${h + 1}`));
  head.value = map.heads > 1 ? "mean" : "0";
  fillHeadPicker(panel, map);
}

function setView(panel, view) {
  panel.view = view;
  panel.querySelectorAll(".views button").forEach(b => b.classList.toggle("active", b.dataset.view === view));
  render(panel);
}

const RENDERERS = {heatmap: renderHeatmap, model: renderModel, head: renderHead, neuron: renderNeuron,
                   player: renderPlayer};  // player.js

async function render(panel) {
  if (!panel.result) return;
  const token = (panel.renderToken || 0) + 1;
  panel.renderToken = token;
  const t0 = performance.now();
  panel.dataset.view = panel.view;
  panel.dataset.rendered = "0";
  const box = q(panel, ".view-box");
  const strip = q(panel, ".source-strip");
  const fresh = el("div");
  strip.replaceChildren();
  q(panel, ".head-picker").hidden = (panel.view !== "head" && panel.view !== "model") || currentMap(panel).heads < 2;
  syncControls(panel);
  panel.exporter = null;
  panel.exportName = "";
  try {
    await RENDERERS[panel.view](panel, fresh);
  } catch (err) {
    fresh.replaceChildren(el("p", {class: "note"}, `error: ${err.message}`));
  }
  if (token !== panel.renderToken) return;  // a newer render started meanwhile
  box.replaceChildren(...fresh.childNodes);
  // time to first paint of the view, for benchmarks/explorer_render.py
  requestAnimationFrame(() => setTimeout(() => {
    if (token !== panel.renderToken) return;
    panel.dataset.renderMs = (performance.now() - t0).toFixed(1);
    panel.dataset.rendered = "1";
  }, 0));
}

async function explorePanel(panel, sentence, sentenceB) {
  const name = q(panel, ".model").value;
  const status = q(panel, ".status");
  const model = MODELS.find(m => m.name === name);
  q(panel, ".translation").textContent = "";
  q(panel, ".warning").hidden = true;
  q(panel, ".view-box").replaceChildren();
  q(panel, ".source-strip").replaceChildren();
  q(panel, ".nbest").replaceChildren();
  q(panel, ".tokens").replaceChildren();
  q(panel, ".viewbar").hidden = true;
  panel.result = null;
  panel.sentence = model && model.kind === "pair" ? `${sentence} / ${sentenceB}` : sentence;  // export titles
  if (!name) { panel.dataset.state = "idle"; status.textContent = ""; return; }
  panel.dataset.state = "loading";
  status.textContent = "exploring ...";
  const body = {model: name, sentence, beam: Number(q(panel, ".beam").value) || null};
  if (model.kind === "pair") body.sentence_b = sentenceB;
  if (model.kind === "generation") body.max_new = Number(q(panel, ".max-new").value) || 40;
  const t0 = performance.now();
  try {
    const data = await postExplore(body);
    panel.result = data;
    panel.cache = new Map();
    q(panel, ".translation").textContent = data.output === "" && data.choices.length ? "(empty)" : data.output;
    const warn = q(panel, ".warning");
    warn.hidden = !data.warning;
    warn.textContent = data.warning ? `\u26a0 ${data.warning}` : "";
    const shape = data.maps.map(m => `${m.key} ${m.layers}\u00d7${m.heads}`).join(", ");
    const family = EMBEDDED ? "" : ` (${data.family}${data.kind === "translation" ? `, beam ${data.beam}` : ""})`;
    status.textContent = `${name}${family}: ` +
                         `${shape}${data.seconds == null ? "" : `; ${data.seconds.toFixed(2)} s`}`;
    renderDecoding(panel, data);
    q(panel, '.views button[data-view="player"]').hidden = !data.steps;  // translations with attention
    const select = q(panel, ".map");
    select.replaceChildren(...data.maps.map(m => el("option", {value: m.key}, m.title)));
    select.value = data.maps[0].key;
    fillLayerHead(panel);
    q(panel, ".viewbar").hidden = data.maps.length === 0;
    if (!data.maps.length) {
      q(panel, ".view-box").append(el("p", {}, "This model has no attention (attention = none): nothing to show."));
      panel.dataset.state = "done";
      return;
    }
    panel.dataset.fetchMs = (performance.now() - t0).toFixed(1);
    await render(panel);
    panel.dataset.state = "done";
  } catch (err) {
    panel.dataset.state = "error";
    status.textContent = `error: ${err.message}`;
  }
}

function setupPanel(panel, index) {
  panel.append(document.getElementById("panel-template").content.cloneNode(true));
  panel.view = "heatmap";
  const select = q(panel, ".model");
  if (index > 0) select.append(el("option", {value: ""}, "(none)"));
  MODELS.forEach(m => select.append(el("option", {value: m.name},
    `${m.name} (${m.family}, ${m.attention}${m.trained_on && m.trained_on.length ? `; English: ${m.trained_on.join(" + ")}` : ""})`)));
  select.value = index < MODELS.length ? MODELS[index].name : "";
  const beam = q(panel, ".beam");
  const sync = () => {
    const m = MODELS.find(x => x.name === select.value);
    beam.value = m ? m.beam : "";
    q(panel, ".beam-box").hidden = !!m && m.kind !== "translation";
    q(panel, ".new-box").hidden = !m || m.kind !== "generation";
  };
  sync();
  select.addEventListener("change", sync);
  q(panel, ".map").addEventListener("change", () => { fillLayerHead(panel); render(panel); });
  for (const cls of [".layer", ".head", ".words", ".scale", ".pair"]) {
    q(panel, cls).addEventListener("change", () => render(panel));
  }
  q(panel, ".large").addEventListener("change", ev => setLarge(ev.target.checked));
  const projector = q(panel, "button.projector");  // classroom.js
  projector.setAttribute("aria-pressed", String(projectorOn()));
  projector.addEventListener("click", () => setProjector(!projectorOn()));
  q(panel, ".theme").value = THEME.choice;
  q(panel, ".theme").addEventListener("change", ev => setTheme(ev.target.value));
  panel.querySelectorAll(".views button").forEach(b => b.addEventListener("click", () => setView(panel,
                                                                                                 b.dataset.view)));
  panel.querySelectorAll("button.export").forEach(b => b.addEventListener("click", () => exportView(panel,
                                                                                                   b.dataset.format)));
  q(panel, `.views button[data-view="heatmap"]`).classList.add("active");
}

// the "large text" switch, one for the page (each panel has a copy): bigger labels, cells and lines
function setLarge(on) {
  document.body.classList.toggle("large", on);
  document.querySelectorAll(".panel").forEach(p => {
    const box = p.querySelector("input.large");
    if (box) box.checked = on;
    if (p.result) render(p);
  });
}

// embedded: one panel, no form, the exploration shown at once; inside an iframe (a notebook's output) the frame
// follows the page's height (a srcdoc frame is of its parent's origin; elsewhere its fixed height stays)
async function showEmbedded(panels) {
  for (const e of [document.querySelector("header"), document.getElementById("form"), document.querySelector("footer"),
                   ...panels.slice(1)]) e.hidden = true;
  document.body.classList.add("embedded");
  setupPanel(panels[0], 0);
  q(panels[0], ".controls").hidden = true;
  const fit = () => {
    try {
      if (window.frameElement) window.frameElement.style.height = `${document.documentElement.offsetHeight + 8}px`;
    } catch (err) { /* a cross-origin host: keep the frame's own height */ }
  };
  new ResizeObserver(fit).observe(document.body);
  await explorePanel(panels[0], "", null);
  document.body.dataset.ready = "1";
}

async function main() {
  applyUrlProjector();  // classroom.js: ?projector=1
  MODELS = await getModels();
  const panels = [...document.querySelectorAll(".panel")];
  if (EMBEDDED) { await showEmbedded(panels); return; }
  panels.forEach(setupPanel);
  const m = MODELS[0];
  document.getElementById("limits").textContent =
    `at most ${m.max_chars} characters and ${m.max_src_tokens} tokens; models: ${MODELS.map(x => x.name).join(", ")}`;
  if (MODELS.some(x => x.kind === "pair")) document.querySelectorAll(".pair-only").forEach(e => { e.hidden = false; });
  document.getElementById("form").addEventListener("submit", ev => {
    ev.preventDefault();
    const sentence = document.getElementById("sentence").value;
    const sentenceB = document.getElementById("sentence-b").value;
    panels.forEach(p => explorePanel(p, sentence, sentenceB));
  });
  document.body.dataset.ready = "1";
}

main();
