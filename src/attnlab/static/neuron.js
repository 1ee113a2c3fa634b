// attnlab explorer, the neuron view: one head's queries and keys (a dot-product attention's), a query's q, each
// key's k, their elementwise product, the score before the softmax and the weight after it.
import {colorOf, currentMap, el, esc, getNeuron, q} from "./state.js";
import {axisNames, layerHeadParts} from "./maps.js";
import {pairNeuron} from "./classroom.js";
import {exportTitle, standalone} from "./export.js";

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

export async function renderNeuron(panel, box) {
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
  // the sentence filter's queries and keys
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
