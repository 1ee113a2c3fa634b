// attnlab attention explorer: two panels, each a model explored on the same input (POST /api/explore), with
// four views of any of its attention maps: heatmap, model view (layers x heads), head view (lines), neuron view
// (queries and keys), a word-level toggle, and PNG/SVG export. Weights are fetched a layer at a time.
// Plain DOM, SVG and canvas: no libraries, no build step, no network beyond this server's own /api.
// Embedded (a notebook's inline explorer, `attnlab.views.exploration_html`): the page carries one exploration
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

// ------------------------------------------------------------------------------------------ data
function currentMap(panel) {
  return panel.result.maps.find(m => m.key === q(panel, ".map").value);
}

function wordsOn(panel) { return q(panel, ".words").checked; }

function labels(panel, map) {
  return wordsOn(panel) ? [map.row_words, map.col_words] : [map.rows, map.cols];
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

async function getNeuron(panel, key, layer, head) {
  if (EMBEDDED) return embedded("neuron", `${key}/${layer}/${head}`);
  return getJSON(`/api/explore/${panel.result.id}/neuron?map=${encodeURIComponent(key)}&layer=${layer}&head=${head}`);
}

// one layer of one map, [head][row][col]; cached per exploration
async function layerWeights(panel, key, layer) {
  const words = wordsOn(panel);
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
async function renderHeatmap(panel, box) {
  const map = currentMap(panel);
  const [rows, cols] = labels(panel, map);
  const w = selectedMatrix(panel, await layerWeights(panel, map.key, Number(q(panel, ".layer").value)));
  panel.exporter = () => heatmapSVG(w, rows, cols, `${map.title}, ${layerHeadText(panel)}`);
  if (rows.length * cols.length > MAX_TABLE_CELLS) {
    canvasHeatmap(panel, box, w, rows, cols);
    return;
  }
  const vmax = Math.max(1e-9, ...w.map(rowMax));
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
                `${esc(cols[j])}: ${x.toFixed(3)}" style="background: rgba(13, 71, 161, ${(x / vmax).toFixed(3)})">` +
                "</td>");
    });
    html.push("</tr>");
  });
  body.innerHTML = html.join("");  // one parse: a 100 x 160 map is 16,000 cells
  table.append(body);
  const strip = q(panel, ".source-strip");
  cols.forEach((s, j) => strip.append(el("span", {"data-j": j}, s)));
  // hovering an output token (its label or any cell of its row) highlights the row, the source token it
  // attends to most (its column) and shades the source strip by the row's weights
  table.addEventListener("mouseover", ev => {
    const target = ev.target.closest("[data-i]");
    if (target) highlight(panel, w, Number(target.dataset.i));
  });
  table.addEventListener("mouseleave", () => highlight(panel, w, -1));
  const wrap = el("div", {class: "heatmap-box"});
  wrap.append(table);
  box.append(wrap);
}

// a long input's heatmap on a canvas: labels and cells drawn once, the hovered row and its most-attended column
// outlined on a second canvas above it
function canvasHeatmap(panel, box, w, rows, cols) {
  const cell = 12, font = "11px sans-serif";
  const measure = el("canvas").getContext("2d");
  measure.font = font;
  const left = 6 + Math.max(...rows.map(t => measure.measureText(t).width));
  const top = 6 + Math.max(...cols.map(t => measure.measureText(t).width));
  const width = Math.ceil(left + cols.length * cell + 2), height = Math.ceil(top + rows.length * cell + 2);
  const base = el("canvas", {class: "heatmap-canvas", width, height});
  const over = el("canvas", {class: "heatmap-over", width, height});
  const ctx = base.getContext("2d");
  ctx.font = font;
  ctx.fillStyle = "#fff";
  ctx.fillRect(0, 0, width, height);
  const vmax = Math.max(1e-9, ...w.map(rowMax));
  for (let i = 0; i < rows.length; i++) {
    for (let j = 0; j < cols.length; j++) {
      ctx.fillStyle = `rgba(13, 71, 161, ${(w[i][j] / vmax).toFixed(3)})`;
      ctx.fillRect(left + j * cell, top + i * cell, cell - 1, cell - 1);
    }
  }
  ctx.fillStyle = "#222";
  ctx.textAlign = "right";
  rows.forEach((t, i) => ctx.fillText(t, left - 4, top + i * cell + 10));
  cols.forEach((t, j) => {
    ctx.save();
    ctx.translate(left + j * cell + 9, top - 4);
    ctx.rotate(-Math.PI / 2);
    ctx.textAlign = "left";
    ctx.fillText(t, 0, 0);
    ctx.restore();
  });
  const wrap = el("div", {class: "heatmap-box canvas-box", "data-rows": rows.length, "data-cols": cols.length});
  wrap.append(base, over);
  box.append(wrap);
  const strip = q(panel, ".source-strip");
  cols.forEach((s, j) => strip.append(el("span", {"data-j": j}, s)));
  const octx = over.getContext("2d");
  over.addEventListener("mousemove", ev => {
    const r = over.getBoundingClientRect();
    const i = Math.floor((ev.clientY - r.top - top) / cell);
    octx.clearRect(0, 0, width, height);
    const spans = panel.querySelectorAll(".source-strip span");
    if (i < 0 || i >= rows.length) { spans.forEach(s => { s.style.background = ""; }); return; }
    const row = w[i], best = row.indexOf(Math.max(...row)), m = rowMax(row);
    octx.strokeStyle = "#ff6f00";
    octx.lineWidth = 2;
    octx.strokeRect(left - 1, top + i * cell - 1, cols.length * cell + 1, cell + 1);
    octx.strokeRect(left + best * cell - 1, top - 1, cell + 1, rows.length * cell + 1);
    octx.fillStyle = "rgba(255, 213, 79, .6)";
    octx.fillRect(0, top + i * cell, left - 2, cell);
    spans.forEach((s, j) => { s.style.background = `rgba(255, 193, 7, ${(row[j] / m).toFixed(3)})`; });
    over.title = `${rows[i]}: most attended ${cols[best]} (${row[best].toFixed(3)})`;
  });
  over.addEventListener("mouseleave", () => octx.clearRect(0, 0, width, height));
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
function drawThumb(canvas, w) {
  const R = w.length, C = w[0].length;
  canvas.width = C;
  canvas.height = R;
  const ctx = canvas.getContext("2d");
  const img = ctx.createImageData(C, R);
  const vmax = Math.max(1e-9, ...w.map(rowMax));
  for (let i = 0; i < R; i++) {
    for (let j = 0; j < C; j++) {
      const a = w[i][j] / vmax, p = 4 * (i * C + j);
      img.data[p] = 255 - Math.round(a * 242);  // white to rgb(13, 71, 161)
      img.data[p + 1] = 255 - Math.round(a * 184);
      img.data[p + 2] = 255 - Math.round(a * 94);
      img.data[p + 3] = 255;
    }
  }
  ctx.putImageData(img, 0, 0);
}

async function renderModel(panel, box) {
  const map = currentMap(panel);
  const grid = el("div", {class: "model-grid"});
  grid.style.gridTemplateColumns = `auto repeat(${map.heads}, 1fr)`;
  grid.append(el("span"));
  for (let h = 0; h < map.heads; h++) grid.append(el("span", {class: "grid-label"}, `head ${h + 1}`));
  box.append(grid);
  const thumbs = [];
  for (let l = 0; l < map.layers; l++) {
    grid.append(el("span", {class: "grid-label"}, `layer ${l + 1}`));
    for (let h = 0; h < map.heads; h++) {
      const fig = el("figure", {class: "thumb", "data-layer": l, "data-head": h,
                                title: `layer ${l + 1}, head ${h + 1}: click to open`});
      const canvas = el("canvas");
      fig.append(canvas);
      fig.addEventListener("click", () => {
        q(panel, ".layer").value = String(l);
        q(panel, ".head").value = String(h);
        setView(panel, "heatmap");
      });
      grid.append(fig);
      thumbs.push([l, h, canvas]);
    }
  }
  // layer by layer: the first row shows before the last one has arrived
  for (let l = 0; l < map.layers; l++) {
    const heads = await layerWeights(panel, map.key, l);
    thumbs.filter(t => t[0] === l).forEach(([, h, canvas]) => drawThumb(canvas, heads[h]));
  }
  panel.exporter = () => modelSVG(map, thumbs);
}

// ------------------------------------------------------------------------------------------ head view
function selectedHeads(panel, n) {
  const boxes = [...panel.querySelectorAll(".head-picker input")];
  return boxes.length === n ? boxes.filter(b => b.checked).map(b => Number(b.value)) : [...Array(n).keys()];
}

function fillHeadPicker(panel, map) {
  const picker = q(panel, ".head-picker");
  picker.replaceChildren(el("span", {}, "heads: "));
  for (let h = 0; h < map.heads; h++) {
    const label = el("label", {style: `color: ${HEAD_COLORS[h % HEAD_COLORS.length]}`});
    const box = el("input", {type: "checkbox", value: h});
    box.checked = true;
    box.addEventListener("change", () => render(panel));
    label.append(box, ` ${h + 1} `);
    picker.append(label);
  }
}

async function renderHead(panel, box) {
  const map = currentMap(panel);
  const [rows, cols] = labels(panel, map);
  const all = await layerWeights(panel, map.key, Number(q(panel, ".layer").value));
  const heads = selectedHeads(panel, all.length);
  const dy = 16, x0 = 150, x1 = 390, width = 540;
  const height = dy * Math.max(rows.length, cols.length) + 30;
  const svg = svgEl("svg", {class: "head-view", width, height, viewBox: `0 0 ${width} ${height}`});
  const total = rows.length * cols.length * heads.length;
  const floor = total > MAX_LINES ? MIN_LINE : 0;
  let skipped = 0;
  const groups = rows.map((_, i) => svgEl("g", {"data-i": i}));
  heads.forEach(h => {
    const w = all[h], color = HEAD_COLORS[h % HEAD_COLORS.length];
    rows.forEach((_, i) => {
      cols.forEach((_, j) => {
        if (w[i][j] < floor) { skipped++; return; }
        groups[i].append(svgEl("line", {x1: x0 + 4, y1: 20 + i * dy, x2: x1 - 4, y2: 20 + j * dy, stroke: color,
                                        "stroke-opacity": w[i][j].toFixed(3), "stroke-width": 2,
                                        "data-i": i, "data-j": j, "data-h": h}));
      });
    });
  });
  groups.forEach(g => svg.append(g));
  rows.forEach((t, i) => svg.append(svgEl("text", {x: x0, y: 24 + i * dy, "text-anchor": "end", class: "row-token",
                                                    "data-i": i}, t)));
  cols.forEach((t, j) => svg.append(svgEl("text", {x: x1, y: 24 + j * dy, class: "col-token", "data-j": j}, t)));
  svg.addEventListener("mouseover", ev => {
    const t = ev.target.closest("text.row-token");
    if (t) headFocus(svg, Number(t.dataset.i));
  });
  svg.addEventListener("mouseleave", () => headFocus(svg, -1));
  if (skipped) box.append(el("p", {class: "note"}, `${skipped.toLocaleString()} lines of weight under ${MIN_LINE} ` +
                                                  "not drawn (a long input)"));
  box.append(svg);
  panel.exporter = () => {
    const copy = svg.cloneNode(true);
    copy.setAttribute("xmlns", SVG_NS);
    copy.classList.remove("focus");
    copy.querySelectorAll(".on, .hl").forEach(e => e.classList.remove("on", "hl"));
    return standalone(copy.outerHTML, width, height, `${map.title}, ${layerHeadText(panel)}`);
  };
}

function headFocus(svg, i) {
  svg.querySelectorAll(".on, .hl").forEach(e => e.classList.remove("on", "hl"));
  svg.classList.toggle("focus", i >= 0);
  if (i < 0) return;
  svg.querySelector(`g[data-i="${i}"]`).classList.add("on");
  svg.querySelector(`text.row-token[data-i="${i}"]`).classList.add("hl");
}

// ------------------------------------------------------------------------------------------ neuron view
function colorOf(v, vmax) {
  const a = Math.min(1, Math.abs(v) / vmax).toFixed(3);
  return v >= 0 ? `rgba(33, 102, 172, ${a})` : `rgba(178, 24, 43, ${a})`;
}

async function renderNeuron(panel, box) {
  const map = currentMap(panel);
  if (!map.neuron) {
    box.append(el("p", {class: "note"}, `The neuron view needs queries and keys: ${map.title} has none (not a ` +
                                        "dot-product attention of one head, or weights given without them). Pick " +
                                        "an encoder, decoder or cross-attention map of a run."));
    panel.exporter = null;
    return;
  }
  const layer = Number(q(panel, ".layer").value);
  const head = q(panel, ".head").value === "mean" ? 0 : Number(q(panel, ".head").value);
  const n = await getNeuron(panel, map.key, layer, head);
  const info = el("p", {class: "note"}, `layer ${layer + 1}, head ${head + 1} (pieces, not words). Hover a query ` +
                  `token: its query q, each key k, their elementwise product q\u00d7k; sum(q\u00d7k) \u00d7 ` +
                  `${n.scale.toFixed(4)} (1/\u221ad) is the score before the softmax.`);
  const wrap = el("div", {class: "neuron"});
  const left = el("div", {class: "queries"});
  map.rows.forEach((t, i) => left.append(el("div", {class: "query-token", "data-i": i}, t)));
  const right = el("div", {class: "neuron-detail"});
  wrap.append(left, right);
  box.append(info, wrap);
  const show = i => {
    left.querySelectorAll(".hl").forEach(e => e.classList.remove("hl"));
    left.querySelector(`[data-i="${i}"]`).classList.add("hl");
    neuronDetail(right, n, map, i);
  };
  left.addEventListener("mouseover", ev => {
    const t = ev.target.closest(".query-token");
    if (t) show(Number(t.dataset.i));
  });
  show(0);
  panel.exporter = () => neuronSVG(n, map, Number(left.querySelector(".hl").dataset.i));
}

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
  const html = [`<table class="neuron-table" data-scale="${n.scale}" data-i="${i}"><thead><tr><th></th>` +
                `<th>query q (${esc(map.rows[i])})</th><th></th><th></th><th></th></tr><tr><th></th><td>` +
                vec(qi, vmax, "q") + "</td></tr>" +
                "<tr><th>key</th><th>k</th><th>q\u00d7k</th><th>score</th><th>weight</th></tr></thead><tbody>"];
  n.k.forEach((k, j) => {
    const s = n.scores[i][j];
    const prod = k.map((x, d) => x * qi[d]);
    html.push(`<tr class="key-row" data-j="${j}"><th>${esc(map.cols[j])}</th><td>${vec(k, vmax, "k")}</td>` +
              `<td>${vec(prod, pmax, "prod")}</td>` +
              `<td class="score" data-score="${s === null ? "" : s}">${s === null ? "masked" : s.toFixed(3)}</td>` +
              `<td class="weight">${n.weights[i][j].toFixed(3)}</td></tr>`);
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
function standalone(inner, width, height, title) {
  // an SVG file of its own: a white background and the title above the view
  const body = inner.replace(/^<svg[^>]*>/, "").replace(/<\/svg>$/, "");
  return `<svg xmlns="${SVG_NS}" width="${width}" height="${height + 24}" viewBox="0 -24 ${width} ${height + 24}" ` +
         `font-family="sans-serif" font-size="12"><rect x="0" y="-24" width="${width}" height="${height + 24}" ` +
         `fill="#fff"/><text x="4" y="-8" font-weight="bold">${esc(title)}</text>` +
         `<style>line{stroke-linecap:round}</style>${body}</svg>`;
}

function heatmapSVG(w, rows, cols, title) {
  const cell = 14;
  const left = 8 + 7 * Math.max(...rows.map(s => s.length)), top = 8 + 7 * Math.max(...cols.map(s => s.length));
  const width = left + cell * cols.length + 10, height = top + cell * rows.length + 10;
  const vmax = Math.max(1e-9, ...w.map(rowMax));
  const parts = [];
  cols.forEach((s, j) => parts.push(`<text transform="translate(${left + j * cell + 10},${top - 4}) rotate(-90)">` +
                                    `${esc(s)}</text>`));
  rows.forEach((t, i) => {
    parts.push(`<text x="${left - 4}" y="${top + i * cell + 11}" text-anchor="end">${esc(t)}</text>`);
    w[i].forEach((x, j) => parts.push(`<rect x="${left + j * cell}" y="${top + i * cell}" width="${cell}" ` +
                                      `height="${cell}" fill="rgb(13,71,161)" ` +
                                      `fill-opacity="${(x / vmax).toFixed(3)}"/>`));
  });
  return standalone(`<svg>${parts.join("")}</svg>`, width, height, title);
}

function modelSVG(map, thumbs) {
  const size = 96, gap = 8, left = 60, top = 20;
  const parts = [];
  for (let h = 0; h < map.heads; h++) {
    parts.push(`<text x="${left + h * (size + gap)}" y="${top - 6}">head ${h + 1}</text>`);
  }
  thumbs.forEach(([l, h, canvas]) => {
    if (h === 0) parts.push(`<text x="4" y="${top + l * (size + gap) + size / 2}">layer ${l + 1}</text>`);
    parts.push(`<image x="${left + h * (size + gap)}" y="${top + l * (size + gap)}" width="${size}" ` +
               `height="${size}" preserveAspectRatio="none" style="image-rendering:pixelated" ` +
               `href="${canvas.toDataURL("image/png")}"/>`);
  });
  return standalone(`<svg>${parts.join("")}</svg>`, left + map.heads * (size + gap), top + map.layers * (size + gap),
                    `${map.title}: every layer and head`);
}

function neuronSVG(n, map, i) {
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
                    `neuron view: ${map.title}, layer ${Number(n.layer) + 1}, head ${Number(n.head) + 1}`);
}

function download(panel, blob, fmt) {
  const a = el("a", {href: URL.createObjectURL(blob), download: `attnlab-${q(panel, ".model").value}-` +
                     `${q(panel, ".map").value}-${panel.view}.${fmt}`});
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
function renderDecoding(panel, r) {
  const nbest = q(panel, ".nbest");
  nbest.replaceChildren();
  r.nbest.forEach(h => nbest.append(el("li", {}, `${h.score.toFixed(3)}  ${h.text}`)));
  const tokens = q(panel, ".tokens");
  tokens.replaceChildren();
  const tip = q(panel, ".tip");
  r.choices.forEach((c, t) => {
    const span = el("span", {class: "tok" + (c.generated ? "" : " prompt"), "data-t": t, "data-p": c.prob},
                    c.label);
    span.style.background = `rgba(255, 152, 0, ${(1 - c.prob).toFixed(3)})`;  // the more hesitant, the darker
    tokens.append(span);
  });
  tokens.onmouseover = ev => {
    const span = ev.target.closest(".tok");
    if (!span) return;
    const c = r.choices[Number(span.dataset.t)];
    tip.replaceChildren(el("b", {}, `${c.label}: p = ${c.prob.toFixed(3)}`));
    const list = el("ol");
    c.top.forEach(a => list.append(el("li", {class: a.piece === c.piece ? "chosen" : "", "data-p": a.prob},
                                      `${a.label}  ${a.prob.toFixed(3)}`)));
    tip.append(list);
    tip.style.left = `${span.offsetLeft}px`;  // under the hovered token
    tip.style.top = `${span.offsetTop + span.offsetHeight + 2}px`;
    tip.hidden = false;
  };
  tokens.onmouseleave = () => { tip.hidden = true; };
}

// ------------------------------------------------------------------------------------------ panel
function layerHeadText(panel) {
  const head = q(panel, ".head").value;
  const which = head === "mean" ? "mean of heads" : `head ${Number(head) + 1}`;
  return `layer ${Number(q(panel, ".layer").value) + 1}, ${which}`;
}

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

const RENDERERS = {heatmap: renderHeatmap, model: renderModel, head: renderHead, neuron: renderNeuron};

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
  q(panel, ".head-picker").hidden = panel.view !== "head";
  panel.exporter = null;
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
  q(panel, ".view-box").replaceChildren();
  q(panel, ".source-strip").replaceChildren();
  q(panel, ".nbest").replaceChildren();
  q(panel, ".tokens").replaceChildren();
  q(panel, ".viewbar").hidden = true;
  panel.result = null;
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
    q(panel, ".translation").textContent = data.output;
    const shape = data.maps.map(m => `${m.key} ${m.layers}\u00d7${m.heads}`).join(", ");
    const family = EMBEDDED ? "" : ` (${data.family}${data.kind === "translation" ? `, beam ${data.beam}` : ""})`;
    status.textContent = `${name}${family}: ` +
                         `${shape}${data.seconds == null ? "" : `; ${data.seconds.toFixed(2)} s`}`;
    renderDecoding(panel, data);
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
  MODELS.forEach(m => select.append(el("option", {value: m.name}, `${m.name} (${m.family}, ${m.attention})`)));
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
  for (const cls of [".layer", ".head", ".words"]) q(panel, cls).addEventListener("change", () => render(panel));
  panel.querySelectorAll(".views button").forEach(b => b.addEventListener("click", () => setView(panel,
                                                                                                 b.dataset.view)));
  panel.querySelectorAll("button.export").forEach(b => b.addEventListener("click", () => exportView(panel,
                                                                                                   b.dataset.format)));
  q(panel, `.views button[data-view="heatmap"]`).classList.add("active");
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
