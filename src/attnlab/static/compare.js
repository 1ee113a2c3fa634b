// attnlab explorer, the compare view (issue 46): one sentence through every served translation model side by side,
// each row a model's translation and its attention map on one shared scale (0 to 1: the same colour is the same
// weight in every map), with the uniform weight 1/n marked, and the models' test BLEU by source length from their
// evaluations. Opened by #compare in the address (`attnlab serve --pretrained` prints that address) or the page's
// "compare models" link. It reads the same JSON API as the explorer and shares only the DOM helpers with it; app.js
// starts it (`startCompare`: nothing on a page without the compare section, as a notebook's inline explorer).
import {el, svgEl} from "./state.js";

const CMP = {
  ramp: [13, 71, 161],  // the weight ramp's top, as the explorer's heatmap (style.css: --ramp-lo is its 0 end)
  colors: ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b"],
  minCell: 14,  // px: a longer sentence scrolls inside its row rather than shrink its cells below this
  maxCell: 96,
};

// a piece's label as a reader writes it: the word-start mark ("_" in the API's labels) dropped, "</s>" kept
function cmpLabel(s) { return s.length > 1 && s.startsWith("_") ? s.slice(1) : s; }

// the cross-attention shown for a model: the last decoder layer, mean over heads, rows = output pieces
function cmpMatrix(r) {
  if (!r.attention || !r.attention.length) return null;
  const heads = r.attention[r.attention.length - 1];
  return heads[0].map((row, i) => row.map((_, j) => heads.reduce((s, h) => s + h[i][j], 0) / heads.length));
}

function cmpCompareOn() { return location.hash === "#compare"; }

// `attnlab serve --pretrained` opens the page on this view (the server marks <body data-start="compare">); a link
// with its own #hash, or the explorer link (#), wins
function cmpStart() {
  if (document.body.dataset.start === "compare" && location.hash === "") history.replaceState(null, "", "#compare");
}

function cmpShow(on) {
  document.getElementById("compare").hidden = !on;
  for (const id of ["form", "panels"]) document.getElementById(id).hidden = on;
  document.body.classList.toggle("comparing", on);
}

// the cell width that fills the row's width with the sentence's source pieces (cells grow with the screen), and a
// height that shows the whole map on the screen, never below one label's line
function cmpCell(box, cols, rows, labelWidth, fontPx) {
  const width = Math.max(200, box.clientWidth - labelWidth - 8);
  const w = Math.max(CMP.minCell, Math.min(CMP.maxCell, Math.floor(width / Math.max(1, cols))));
  const fit = Math.floor(0.8 * (window.innerHeight || 900) / Math.max(1, rows));
  return [w, Math.max(Math.ceil(1.25 * fontPx), Math.min(w, fit))];
}

function cmpHeatmap(box, w, rows, cols) {
  const fontPx = parseFloat(getComputedStyle(box).fontSize) || 16;
  const labelWidth = Math.ceil(Math.max(...rows.map(s => s.length), 4) * fontPx * 0.62) + 8;
  const [cw, ch] = cmpCell(box, cols.length, rows.length, labelWidth, fontPx);
  const colHeight = Math.ceil(Math.max(...cols.map(s => s.length), 4) * fontPx * 0.62) + 8;
  const svg = svgEl("svg", {class: "cmp-map", width: labelWidth + cw * cols.length + 2,
                             height: colHeight + ch * rows.length + 2, "data-cell": cw, "data-cell-height": ch,
                             "data-rows": rows.length, "data-cols": cols.length});
  svg.append(svgEl("rect", {class: "cmp-base", x: labelWidth, y: colHeight, width: cw * cols.length,
                             height: ch * rows.length}));
  cols.forEach((s, j) => {
    const x = labelWidth + cw * (j + 0.5), y = colHeight - 6;
    svg.append(svgEl("text", {class: "cmp-col", x, y, transform: `rotate(-90 ${x} ${y})`,
                               "dominant-baseline": "middle"}, s));
  });
  rows.forEach((s, i) => {
    svg.append(svgEl("text", {class: "cmp-row", x: labelWidth - 6, y: colHeight + ch * (i + 0.5),
                               "text-anchor": "end", "dominant-baseline": "middle"}, s));
    w[i].forEach((x, j) => {
      const rect = svgEl("rect", {class: "cmp-cell", x: labelWidth + cw * j, y: colHeight + ch * i,
                                   width: cw, height: ch, "data-w": x.toFixed(4),
                                   fill: `rgba(${CMP.ramp.join(", ")}, ${Math.min(1, x).toFixed(3)})`});
      rect.append(svgEl("title", {}, `${s} \u2192 ${cols[j]}: ${x.toFixed(3)}`));
      svg.append(rect);
    });
  });
  const wrap = el("div", {class: "cmp-map-box"});
  wrap.append(svg);
  box.append(wrap);
}

// the shared scale, once: 0 to 1, with the uniform weight 1/n of this sentence's n source pieces marked
function cmpLegend(n) {
  const u = 1 / Math.max(1, n);
  const box = el("div", {class: "cmp-legend", "data-uniform": u.toFixed(4)});
  const ramp = el("span", {class: "cmp-ramp"});
  ramp.append(el("span", {class: "cmp-uniform", style: `left: calc(${(100 * u).toFixed(2)}% - 3px)`,
                             title: `uniform weight 1/${n} = ${u.toFixed(3)}`}));
  box.append(el("span", {}, "0"), ramp, el("span", {}, "1"),
             el("span", {class: "cmp-uniform-note"}, `\u25b2 uniform 1/n = ${u.toFixed(3)} (n = ${n} source pieces)`),
             el("span", {class: "cmp-note"}, "every map on this one scale: rows output pieces, columns source pieces"));
  return box;
}

// test BLEU by source length of every model with an evaluation (its eval/test.json), one line each
function cmpChart(models) {
  const scored = models.filter(m => m.bleu_by_length && m.bleu_by_length.length);
  const box = el("figure", {class: "cmp-chart"});
  if (!scored.length) {
    box.append(el("figcaption", {}, "BLEU by source length: no served model has a test evaluation " +
                                        "(attnlab evaluate RUN writes one)"));
    return box;
  }
  const buckets = [...new Set(scored.flatMap(m => m.bleu_by_length.map(b => b.bucket)))];
  const top = Math.max(10, ...scored.flatMap(m => m.bleu_by_length.map(b => b.bleu)));
  const W = 720, H = 360, L = 70, B = 60, T = 20, R = 230;
  const x = k => L + (W - L - R) * (buckets.length === 1 ? 0.5 : k / (buckets.length - 1));
  const y = v => T + (H - T - B) * (1 - v / (Math.ceil(top / 5) * 5));
  const svg = svgEl("svg", {viewBox: `0 0 ${W} ${H}`, class: "cmp-chart-svg", role: "img",
                             "aria-label": "test BLEU by source length in words"});
  for (let v = 0; v <= Math.ceil(top / 5) * 5; v += 5) {
    svg.append(svgEl("line", {x1: L, x2: W - R, y1: y(v), y2: y(v), class: "cmp-grid"}));
    svg.append(svgEl("text", {x: L - 8, y: y(v), "text-anchor": "end", "dominant-baseline": "middle"}, String(v)));
  }
  buckets.forEach((b, k) => svg.append(svgEl("text", {x: x(k), y: H - B + 26, "text-anchor": "middle"}, b)));
  svg.append(svgEl("text", {x: (L + W - R) / 2, y: H - 6, "text-anchor": "middle"}, "source length (words)"));
  svg.append(svgEl("text", {x: 16, y: (T + H - B) / 2, transform: `rotate(-90 16 ${(T + H - B) / 2})`,
                             "text-anchor": "middle"}, "test BLEU"));
  scored.forEach((m, i) => {
    const color = CMP.colors[i % CMP.colors.length];
    const pts = m.bleu_by_length.map(b => [x(buckets.indexOf(b.bucket)), y(b.bleu)]);
    svg.append(svgEl("polyline", {points: pts.map(p => p.join(",")).join(" "), fill: "none", stroke: color,
                                   "stroke-width": 4, class: "cmp-line", "data-model": m.name}));
    pts.forEach(([px, py], k) => {
      const dot = svgEl("circle", {cx: px, cy: py, r: 6, fill: color});
      dot.append(svgEl("title", {}, `${m.name}, ${m.bleu_by_length[k].bucket} words: BLEU ` +
                                     `${m.bleu_by_length[k].bleu.toFixed(2)} (${m.bleu_by_length[k].sentences} verses)`));
      svg.append(dot);
    });
    const ly = T + 10 + 30 * i;
    svg.append(svgEl("line", {x1: W - R + 20, x2: W - R + 50, y1: ly, y2: ly, stroke: color, "stroke-width": 4}));
    svg.append(svgEl("text", {x: W - R + 58, y: ly, "dominant-baseline": "middle", class: "cmp-legend-name"},
                      m.name.replace(/^pretrained:/, "")));
  });
  box.append(svg, el("figcaption", {}, "test BLEU (beam 5) by source length, from each model's evaluation " +
                                           "of the test verses"));
  return box;
}

async function cmpTranslate(model, sentence) {
  const r = await fetch("/api/translate", {method: "POST", headers: {"Content-Type": "application/json"},
                                           body: JSON.stringify({model: model.name, sentence})});
  const body = await r.json();
  if (!r.ok) throw new Error(body.error || body.detail || `HTTP ${r.status}`);
  return body;
}

async function cmpRun(models, sentence) {
  const rows = document.getElementById("cmp-rows");
  rows.textContent = "";
  rows.dataset.state = "busy";
  const items = models.map(m => {
    const row = el("section", {class: "cmp-model", "data-model": m.name, "data-state": "busy"});
    row.append(el("h2", {}, `${m.name.replace(/^pretrained:/, "")}: ${m.family}, attention ${m.attention}`),
               el("p", {class: "cmp-translation"}, "translating\u2026"));
    rows.append(row);
    return row;
  });
  const results = await Promise.all(models.map(m => cmpTranslate(m, sentence).catch(e => e)));
  let n = 0;
  results.forEach((r, k) => {
    const row = items[k];
    if (r instanceof Error) {
      row.dataset.state = "error";
      row.querySelector(".cmp-translation").textContent = `error: ${r.message}`;
      return;
    }
    row.querySelector(".cmp-translation").textContent = r.translation === "" ? "(empty)" : r.translation;
    const w = cmpMatrix(r);
    const cols = r.src_labels.map(cmpLabel);
    n = cols.length;
    if (w === null) {
      row.append(el("p", {class: "cmp-none"}, "no attention: the decoder sees only the encoder's summary of " +
                                                  "the whole sentence"));
    } else {
      cmpHeatmap(row, w, r.tgt_labels.slice(0, w.length).map(cmpLabel), cols);
    }
    row.dataset.state = "done";
  });
  const legendBox = document.getElementById("cmp-legend");
  legendBox.textContent = "";
  if (n) legendBox.append(cmpLegend(n));
  rows.dataset.state = "done";
}

export async function startCompare() {
  const section = document.getElementById("compare");
  if (!section) return;
  const models = (await (await fetch("/api/models")).json()).filter(m => m.kind === "translation");
  document.getElementById("cmp-chart").append(cmpChart(models));
  const form = document.getElementById("cmp-form");
  const input = document.getElementById("cmp-sentence");
  form.addEventListener("submit", ev => {
    ev.preventDefault();
    const sentence = input.value.trim() || input.placeholder;
    cmpRun(models, sentence);
  });
  const rows = document.getElementById("cmp-rows");
  cmpStart();
  const sync = () => {  // shown on #compare; the first time, with the placeholder's verse already compared
    cmpShow(cmpCompareOn());
    if (cmpCompareOn() && models.length && !rows.dataset.state) cmpRun(models, input.value.trim() || input.placeholder);
  };
  if (!models.length) rows.textContent = "no translation model is served";
  window.addEventListener("hashchange", sync);
  sync();
  section.dataset.ready = "1";
}

