// attnlab attention explorer: two panels, each a model + beam + (Transformer) layer/head, one heatmap.
// Plain DOM, no libraries, no network beyond this server's own /api.
"use strict";

let MODELS = [];

function el(tag, attrs = {}, text = "") {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text) e.textContent = text;
  return e;
}

// The (T, S) matrix to show: one head of one layer, or the mean of the layer's heads.
function matrix(result, layer, head) {
  const heads = result.attention[layer];
  if (head !== "mean") return heads[Number(head)];
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((s, h) => s + h[i][j], 0) / heads.length));
}

function renderHeatmap(panel, result) {
  const box = panel.querySelector(".heatmap-box");
  const strip = panel.querySelector(".source-strip");
  box.replaceChildren();
  strip.replaceChildren();
  if (!result.attention) {
    box.append(el("p", {}, "This model has no attention (attention = none): nothing to show."));
    return;
  }
  const layer = Number(panel.querySelector(".layer").value);
  const head = panel.querySelector(".head").value;
  const w = matrix(result, layer, head);
  const vmax = Math.max(1e-9, ...w.map(row => Math.max(...row)));
  const table = el("table", {class: "heatmap"});
  const top = el("tr");
  top.append(el("th", {class: "corner"}));
  result.src_labels.forEach((s, j) => top.append(el("th", {class: "src", "data-j": j}, s)));
  const thead = el("thead");
  thead.append(top);
  table.append(thead);
  const body = el("tbody");
  result.tgt_labels.forEach((t, i) => {
    const tr = el("tr", {"data-i": i});
    tr.append(el("th", {class: "tgt", "data-i": i}, t));
    w[i].forEach((x, j) => {
      const a = x / vmax;
      tr.append(el("td", {class: "cell", "data-i": i, "data-j": j, "data-w": x.toFixed(4),
                           title: `${t} \u2192 ${result.src_labels[j]}: ${x.toFixed(3)}`,
                           style: `background: rgba(13, 71, 161, ${a.toFixed(3)})`}));
    });
    body.append(tr);
  });
  table.append(body);
  result.src_labels.forEach((s, j) => strip.append(el("span", {"data-j": j}, s)));
  // hovering an output token (its label or any cell of its row) highlights the row, the source token it
  // attends to most (its column) and shades the source strip by the row's weights
  table.addEventListener("mouseover", ev => {
    const target = ev.target.closest("[data-i]");
    if (target) highlight(panel, w, Number(target.dataset.i));
  });
  table.addEventListener("mouseleave", () => highlight(panel, w, -1));
  box.append(table);
}

function highlight(panel, w, i) {
  panel.querySelectorAll(".hl, .hl-col").forEach(e => e.classList.remove("hl", "hl-col"));
  const strip = panel.querySelectorAll(".source-strip span");
  strip.forEach(s => { s.style.background = ""; });
  if (i < 0) return;
  const row = w[i];
  const rowMax = Math.max(1e-9, ...row);
  const best = row.indexOf(Math.max(...row));
  panel.querySelectorAll(`table.heatmap [data-i="${i}"]`).forEach(e => e.classList.add("hl"));
  panel.querySelectorAll(`table.heatmap td[data-j="${best}"]`).forEach(e => e.classList.add("hl-col"));
  panel.querySelector(`table.heatmap th.src[data-j="${best}"]`).classList.add("hl");
  strip.forEach((s, j) => { s.style.background = `rgba(255, 193, 7, ${(row[j] / rowMax).toFixed(3)})`; });
}

function fillLayerHead(panel, result) {
  const layer = panel.querySelector(".layer"), head = panel.querySelector(".head");
  const show = result.attention && (result.layers > 1 || result.heads > 1);
  panel.querySelectorAll(".lh").forEach(l => { l.hidden = !show; });
  layer.replaceChildren();
  head.replaceChildren();
  for (let l = 0; l < Math.max(1, result.layers); l++) layer.append(el("option", {value: l}, `${l + 1}`));
  layer.value = String(Math.max(0, result.layers - 1));  // the last decoder layer, as `attnlab plot attention`
  if (result.heads > 1) head.append(el("option", {value: "mean"}, `mean of ${result.heads}`));
  for (let h = 0; h < Math.max(1, result.heads); h++) head.append(el("option", {value: h}, `${h + 1}`));
  head.value = result.heads > 1 ? "mean" : "0";
}

async function translatePanel(panel, sentence) {
  const name = panel.querySelector(".model").value;
  const status = panel.querySelector(".status");
  panel.querySelector(".translation").textContent = "";
  panel.querySelector(".heatmap-box").replaceChildren();
  panel.querySelector(".source-strip").replaceChildren();
  if (!name) { panel.dataset.state = "idle"; status.textContent = ""; return; }
  panel.dataset.state = "loading";
  status.textContent = "translating ...";
  const beam = Number(panel.querySelector(".beam").value) || null;
  try {
    const resp = await fetch("/api/translate", {method: "POST", headers: {"Content-Type": "application/json"},
                                               body: JSON.stringify({model: name, sentence, beam})});
    const data = await resp.json();
    if (!resp.ok) throw new Error(data.error || `HTTP ${resp.status}`);
    panel.result = data;
    panel.querySelector(".translation").textContent = data.translation;
    status.textContent = `${name}, beam ${data.beam}: ${data.src_tokens.length} source x ` +
                         `${data.tgt_tokens.length} output tokens, ${data.seconds.toFixed(2)} s`;
    fillLayerHead(panel, data);
    renderHeatmap(panel, data);
    panel.dataset.state = "done";
  } catch (err) {
    panel.dataset.state = "error";
    status.textContent = `error: ${err.message}`;
  }
}

function setupPanel(panel, index) {
  panel.append(document.getElementById("panel-template").content.cloneNode(true));
  const select = panel.querySelector(".model");
  if (index > 0) select.append(el("option", {value: ""}, "(none)"));
  MODELS.forEach(m => select.append(el("option", {value: m.name},
                                       `${m.name} (${m.family}, ${m.attention})`)));
  select.value = index < MODELS.length ? MODELS[index].name : "";
  const beam = panel.querySelector(".beam");
  const syncBeam = () => { const m = MODELS.find(x => x.name === select.value); beam.value = m ? m.beam : ""; };
  syncBeam();
  select.addEventListener("change", syncBeam);
  for (const cls of [".layer", ".head"]) {
    panel.querySelector(cls).addEventListener("change", () => { if (panel.result) renderHeatmap(panel, panel.result); });
  }
}

async function main() {
  MODELS = await (await fetch("/api/models")).json();
  const panels = [...document.querySelectorAll(".panel")];
  panels.forEach(setupPanel);
  const m = MODELS[0];
  document.getElementById("limits").textContent =
    `at most ${m.max_chars} characters and ${m.max_src_tokens} source tokens; models: ${MODELS.map(x => x.name).join(", ")}`;
  document.getElementById("form").addEventListener("submit", ev => {
    ev.preventDefault();
    const sentence = document.getElementById("sentence").value;
    panels.forEach(p => translatePanel(p, sentence));
  });
  document.body.dataset.ready = "1";
}

main();
