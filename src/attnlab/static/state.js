// attnlab explorer, the shared module: what every view of a panel reads and how a panel is drawn. The DOM helpers,
// the page's state (the URL's parameters, the theme, the embedded data), the data layer (the JSON API, or the
// page's embedded exploration), the panel's current map and selected weights, the colour scales, and `render`,
// which draws a panel with the view it shows (the views are given by app.js: `useViews`, so that no view imports
// the module that imports them all).
// Embedded (a notebook's inline explorer, `attnlab.runs.views.exploration_html`): the page carries one exploration
// as JSON in <script id="attnlab-data">; the data layer below answers from it, never the network.

export const SVG_NS = "http://www.w3.org/2000/svg";
export const HEAD_COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf",
                            "#bcbd22", "#7f7f7f", "#393b79", "#637939"];
const RAMP_HI = [13, 71, 161];  // the weight ramp's top (vmax); its 0 end is the theme's --ramp-lo
export const large = () => document.body.classList.contains("large");  // the "large text" switch (projectors)

export function el(tag, attrs = {}, text = "") {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

export function svgEl(tag, attrs = {}, text = "") {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

export const q = (panel, sel) => panel.querySelector(sel);

export function esc(s) {
  return String(s).replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}

// the address's parameters, read once: ?theme= (here) and ?projector=1 (classroom.js)
export const PAGE_PARAMS = new URLSearchParams(location.search);

// ------------------------------------------------------------------------------------------ theme
// light or dark: style.css's colours are custom properties that <html data-theme="dark"> overrides. The choice
// (each panel's "theme" select): "auto" follows the system's prefers-color-scheme, live; "light" and "dark" are
// remembered in localStorage (this page's origin; where storage is off, for this page only)
const THEME_KEY = "attnlab-theme";
const SYSTEM_DARK = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
export const THEME = {choice: urlTheme() || (() => {  // ?theme= in the address comes first
  try {
    const v = localStorage.getItem(THEME_KEY);
    return v === "light" || v === "dark" ? v : "auto";
  } catch (err) { return "auto"; }
})()};

// the URL's ?theme= (a choice for this page, not remembered), before the first render
function urlTheme() {
  const v = PAGE_PARAMS.get("theme");
  return v === "dark" || v === "light" || v === "auto" ? v : null;
}

function applyTheme() {
  const dark = THEME.choice === "dark" || (THEME.choice === "auto" && !!SYSTEM_DARK && SYSTEM_DARK.matches);
  document.documentElement.dataset.theme = dark ? "dark" : "light";
  document.querySelectorAll("select.theme").forEach(s => { s.value = THEME.choice; });
}

export function setTheme(choice) {
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
export function themeColors() {
  const css = getComputedStyle(document.documentElement);
  const v = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  return {bg: v("--bg", "#fff"), fg: v("--fg", "#222"), muted: v("--muted", "#555"), lo: v("--ramp-lo", "#ffffff")};
}

function hexRGB(hex) {
  const m = /^#([0-9a-f]{2})([0-9a-f]{2})([0-9a-f]{2})$/i.exec(hex);
  return m ? m.slice(1).map(h => parseInt(h, 16)) : [255, 255, 255];
}

// ------------------------------------------------------------------------------------------ colour scales
// weights as pixels, the theme's --ramp-lo (0) to RAMP_HI (vmax and above): a long map's cells, the model view's
// thumbnails, projector mode's fitted heatmap
export function paintWeights(canvas, w, vmax) {
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

// a signed value's colour: blue above 0, red below, as opaque as |v| is near vmax (the neuron view, context vectors)
export function colorOf(v, vmax) {
  const a = Math.min(1, Math.abs(v) / vmax).toFixed(3);
  return v >= 0 ? `rgba(33, 102, 172, ${a})` : `rgba(178, 24, 43, ${a})`;
}

// ------------------------------------------------------------------------------------------ data
export function currentMap(panel) {
  return panel.result.maps.find(m => m.key === q(panel, ".map").value);
}

export function wordsOn(panel) { return q(panel, ".words").checked; }

// {models, exploration, weights: {"map/layer/words": [head][row][col]}, neuron: {"map/layer/head": payload}}
export const EMBEDDED = (() => {
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

export async function getModels() {
  return EMBEDDED ? EMBEDDED.models : (await fetch("/api/models")).json();
}

export async function postExplore(body) {
  if (EMBEDDED) return EMBEDDED.exploration;
  const resp = await fetch("/api/explore", {method: "POST", headers: {"Content-Type": "application/json"},
                                            body: JSON.stringify(body)});
  const data = await resp.json();
  if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
  return data;
}

// the step player's context vectors of one layer, {layer, context: [step][dim]}; cached per exploration
export async function getSteps(panel, layer) {
  const id = `steps/${layer}`;
  if (!panel.cache.has(id)) {
    panel.cache.set(id, EMBEDDED ? Promise.resolve(embedded("steps", String(layer)))
                                 : getJSON(`/api/explore/${panel.result.id}/steps?layer=${layer}`));
  }
  return panel.cache.get(id);
}

export async function getNeuron(panel, key, layer, head) {
  if (EMBEDDED) return embedded("neuron", `${key}/${layer}/${head}`);
  return getJSON(`/api/explore/${panel.result.id}/neuron?map=${encodeURIComponent(key)}&layer=${layer}&head=${head}`);
}

// one layer of one map, [head][row][col]; cached per exploration
export async function layerWeights(panel, key, layer, words = wordsOn(panel)) {
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

export function selectedMatrix(panel, heads) {
  const head = q(panel, ".head").value;
  return head === "mean" ? meanOfHeads(heads) : heads[Number(head)];
}

export function rowMax(row) { return Math.max(1e-9, ...row); }

// ------------------------------------------------------------------------------------------ drawing a panel
// the views by name (panel.view: heatmap, model, head, neuron, player), given once by app.js
let VIEWS = null;

export function useViews(views) { VIEWS = views; }

// what the layer and head selectors mean in this view: the model view shows every layer and head, the head view
// the heads ticked in its picker (as lines), so the selectors they do not use are hidden
function syncControls(panel) {
  const map = currentMap(panel);
  const single = map.layers === 1 && map.heads === 1;
  q(panel, ".layer").closest("label").hidden = single || panel.view === "model";
  q(panel, ".head").closest("label").hidden = single || panel.view === "model" || panel.view === "head";
  q(panel, ".pair-box").hidden = map.split === null || map.split === undefined || panel.view === "player";
}

export function setView(panel, view) {
  panel.view = view;
  panel.querySelectorAll(".views button").forEach(b => b.classList.toggle("active", b.dataset.view === view));
  render(panel);
}

export async function render(panel) {
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
    await VIEWS[panel.view](panel, fresh);
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
