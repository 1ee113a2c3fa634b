// attnlab explorer, the heatmap view: the selected layer and head (or the mean of heads) of the current map, a
// table of cells for a short input, a canvas for a long one (projector mode: classroom.js's fitted heatmap);
// hovering or tapping a row highlights it, its most-attended column and shades the source strip.
import {currentMap, el, esc, large, paintWeights, q, rowMax, selectedMatrix, themeColors, wordsOn} from "./state.js";
import {axisNames, labels, layerHeadParts, layerHeadText, legend, scaleTop, sharedScale} from "./maps.js";
import {fittedHeatmap, pairSlice, projectorOn, sliceLabels, viewWeights} from "./classroom.js";
import {exportTitle, legendSVG, standalone} from "./export.js";

const MAX_TABLE_CELLS = 4000;  // larger heatmaps are drawn on a canvas: a 16,000-cell table freezes the page

export async function renderHeatmap(panel, box) {
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
  if (projectorOn()) {  // fitted to the panel's width
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
