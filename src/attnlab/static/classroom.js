// attnlab explorer, the classroom pieces (issue 39): projector mode, the sentence filter of pair maps, the
// single-head shortcut. The views call these; the address's ?projector=1 is read here (?theme= in state.js).
import {PAGE_PARAMS, currentMap, el, large, layerWeights, paintWeights, q, render, rowMax, wordsOn} from "./state.js";

// ------------------------------------------------------------------------------------------ projector mode
// one full-width panel (the second is hidden), the heatmap fitted to the panel's width with its token names
// thinned (every k-th, each whole, full names on hover). The toggle is each panel's "projector" button (one state
// for the page) and the URL: ?projector=1, with ?theme=dark (or light, auto) for the dark theme on this page only
const MAX_FIT_CELL = 160;  // px: a short map's cells grow to use the width (issue 46), up to this
const FIT_FONT = 24;  // px: projector labels read from the back of a room (28 with "large text")

// a piece as a reader writes it on the projector: the word-start mark ("_" or "\u2581") dropped, "</s>" kept
function spoken(s) { return s.length > 1 && (s[0] === "_" || s[0] === "\u2581") ? s.slice(1) : s; }

export function projectorOn() { return document.body.classList.contains("projector"); }

export function setProjector(on) {
  document.body.classList.toggle("projector", on);
  document.querySelectorAll("button.projector").forEach(b => b.setAttribute("aria-pressed", String(on)));
  try {  // the address says it, so that a link opens the same way (a file:// page may refuse: it then stays)
    const url = new URL(location.href);
    if (on) url.searchParams.set("projector", "1"); else url.searchParams.delete("projector");
    history.replaceState(null, "", url);
  } catch (err) { /* the mode holds for this page */ }
  document.querySelectorAll(".panel").forEach(p => { if (p.result) render(p); });
}

// the URL's ?projector=1, before the first render
export function applyUrlProjector() {
  const v = PAGE_PARAMS.get("projector");
  document.body.classList.toggle("projector", v !== null && v !== "0" && v !== "false");
}

// the indices of n names, each `line` px across, centred on cells `step` px apart along a side of n * step px:
// every k-th (k the fewest cells a name needs), from the first whose box starts on the side to the last whose
// box ends on it, so that none overlaps another or passes the side's ends
function thinned(n, step, line) {
  const k = Math.max(1, Math.ceil(line / step - 1e-9));
  const shown = [];
  const fits = i => (i + 0.5) * step + line / 2 <= n * step + 0.01;
  for (let i = Math.max(0, Math.ceil(line / 2 / step - 0.5 - 1e-9)); i < n && fits(i); i += k) shown.push(i);
  return {k, shown};
}

// the width a vertical scrollbar takes from a box's content, measured once
function scrollbarWidth() {
  if (scrollbarWidth.px === undefined) {
    const probe = el("div", {style: "position: absolute; top: -200px; width: 100px; height: 100px; overflow: scroll"});
    document.body.append(probe);
    scrollbarWidth.px = probe.offsetWidth - probe.clientWidth;
    probe.remove();
  }
  return scrollbarWidth.px;
}

// the heatmap of projector mode: square cells as wide as the panel allows (at most MAX_FIT_CELL px), one pixel
// per weight on a canvas scaled up, every k-th token name beside its row and above its column; hovering a cell
// or a name outlines its row and column, shows both names whole at their places and prints "row -> column:
// weight" above the map; the source strip is shaded by the row's weights
export function fittedHeatmap(panel, box, w, rows, cols, vmax) {
  rows = rows.map(spoken);
  cols = cols.map(spoken);
  const R = rows.length, C = cols.length, font = large() ? FIT_FONT + 4 : FIT_FONT, line = Math.ceil(font * 1.25);
  const measure = el("canvas").getContext("2d");
  measure.font = `${font}px sans-serif`;
  const widest = ts => Math.ceil(Math.max(0, ...ts.map(t => measure.measureText(t).width)));
  const left = widest(rows) + 10, top = widest(cols) + 10;
  // the box scrolls a tall map: its scrollbar's width is kept free (0 where scrollbars overlay the page)
  const avail = (q(panel, ".view-box").clientWidth || 900) - 6 - scrollbarWidth();
  const cell = Math.max(1, Math.min(MAX_FIT_CELL, (avail - left) / C));
  const rowNames = thinned(R, cell, line), colNames = thinned(C, cell, line);
  const readout = el("p", {class: "fit-readout note"}, "hover a cell or a name: its row, column and weight");
  const wrap = el("div", {class: "heatmap-box fit-box", "data-rows": R, "data-cols": C, "data-cell": cell.toFixed(3),
                          "data-every": colNames.k, style: `font-size: ${font}px`});
  const head = el("div", {class: "fit-top", style: `height: ${top}px`});
  const colBox = el("div", {class: "fit-cols", style: `width: ${C * cell}px; height: ${top}px`});
  const rowBox = el("div", {class: "fit-rows", style: `width: ${left}px; height: ${R * cell}px`});
  const label = (text, cls, attrs, style) => el("span", {class: `fit-label ${cls}`, title: text, style, ...attrs}, text);
  colNames.shown.forEach(j => colBox.append(label(cols[j], "col-name", {"data-j": j}, `left: ` +
    `${((j + 0.5) * cell - line / 2).toFixed(2)}px; width: ${line}px; line-height: ${line}px`)));
  rowNames.shown.forEach(i => rowBox.append(label(rows[i], "row-name", {"data-i": i}, `top: ` +
    `${((i + 0.5) * cell - line / 2).toFixed(2)}px; height: ${line}px; line-height: ${line}px`)));
  // the hovered row's and column's names, whole, over the thinned ones
  const rowTip = label("", "row-name tip-name", {}, `height: ${line}px; line-height: ${line}px`);
  const colTip = label("", "col-name tip-name", {}, `width: ${line}px; line-height: ${line}px`);
  rowTip.hidden = colTip.hidden = true;
  rowBox.append(rowTip);
  colBox.append(colTip);
  head.append(el("div", {class: "fit-corner", style: `width: ${left}px`}), colBox);
  const cells = el("div", {class: "fit-cells", style: `width: ${C * cell}px; height: ${R * cell}px`});
  const canvas = el("canvas", {class: "heatmap-canvas"});
  paintWeights(canvas, w, vmax);
  const rowHl = el("div", {class: "fit-row-hl", hidden: "", style: `height: ${cell}px`});
  const colHl = el("div", {class: "fit-col-hl", hidden: "", style: `width: ${cell}px`});
  cells.append(canvas, rowHl, colHl);
  const body = el("div", {class: "fit-body"});
  body.append(rowBox, cells);
  wrap.append(head, body);
  box.append(readout, wrap);
  const spans = q(panel, ".source-strip").children;
  const show = (i, j) => {
    wrap.querySelectorAll(".fit-label.hl").forEach(e => e.classList.remove("hl"));
    [...spans].forEach(s => { s.style.background = ""; });
    rowHl.hidden = colHl.hidden = rowTip.hidden = colTip.hidden = i < 0;
    if (i < 0) return;
    const row = w[i], best = row.indexOf(Math.max(...row)), m = rowMax(row);
    if (j < 0) j = best;
    rowHl.style.top = `${i * cell}px`;
    colHl.style.left = `${j * cell}px`;
    rowTip.textContent = rows[i];
    rowTip.style.top = `${Math.max(0, Math.min(R * cell - line, (i + 0.5) * cell - line / 2)).toFixed(2)}px`;
    colTip.textContent = cols[j];
    colTip.style.left = `${Math.max(0, Math.min(C * cell - line, (j + 0.5) * cell - line / 2)).toFixed(2)}px`;
    rowTip.dataset.i = i;
    colTip.dataset.j = j;
    [...spans].forEach((s, k) => { s.style.background = `rgba(255, 193, 7, ${(row[k] / m).toFixed(3)})`; });
    readout.textContent = `${rows[i]} \u2192 ${cols[j]}: ${row[j].toFixed(3)} (row ${i + 1} of ${R}, column ` +
                          `${j + 1} of ${C}; its row attends most to ${cols[best]}, ${row[best].toFixed(3)})`;
    cells.title = readout.textContent;
  };
  const fromCells = ev => {
    const r = canvas.getBoundingClientRect();
    const at = (v, n) => Math.max(0, Math.min(n - 1, Math.floor(v / cell)));
    show(at(ev.clientY - r.top, R), at(ev.clientX - r.left, C));
  };
  cells.addEventListener("mousemove", fromCells);
  cells.addEventListener("click", fromCells);
  const fromName = ev => {
    const t = ev.target.closest(".fit-label");
    if (t && t.dataset.i !== undefined) show(Number(t.dataset.i), -1);
    else if (t && t.dataset.j !== undefined) {  // a column's name: the row that attends to it most
      const j = Number(t.dataset.j);
      let i = 0;
      w.forEach((row, k) => { if (row[j] > w[i][j]) i = k; });
      show(i, j);
    }
  };
  rowBox.addEventListener("mouseover", fromName);
  colBox.addEventListener("mouseover", fromName);
  wrap.addEventListener("mouseleave", () => show(-1, -1));
}

// ------------------------------------------------------------------------------------------ sentence filter
// a pair map (summary's "split": sentence b's first row and column) shows all of it or one block, as bertviz's
// filter: rows from sentence a or b, columns from a or b. The views take the block's labels and weights
const PAIR_FILTERS = {all: "all", aa: "A\u2192A", ab: "A\u2192B", ba: "B\u2192A", bb: "B\u2192B"};

// the filter's rows [r0, r1) and columns [c0, c1) of `map` (words: its word-level labels), or null for all
export function pairSlice(panel, map, words = wordsOn(panel)) {
  const choice = q(panel, ".pair").value;
  if (map.split === null || map.split === undefined || choice === "all") return null;
  const split = words ? map.split_words : map.split;
  const n = (words ? map.row_words : map.rows).length, m = (words ? map.col_words : map.cols).length;
  const [rows, cols] = [choice[0], choice[1]];
  return {r0: rows === "a" ? 0 : split, r1: rows === "a" ? split : n, c0: cols === "a" ? 0 : split,
          c1: cols === "a" ? split : m, name: PAIR_FILTERS[choice], key: choice.toUpperCase()};
}

export function sliceLabels(s, list) { return s ? list.slice(s.c0, s.c1) : list; }

function sliceMatrix(s, mat) { return s ? mat.slice(s.r0, s.r1).map(row => row.slice(s.c0, s.c1)) : mat; }

// one layer's [head][row][col] weights of the current map, cut to the sentence filter's block
export async function viewWeights(panel, key, layer) {
  const s = pairSlice(panel, currentMap(panel));
  return (await layerWeights(panel, key, layer)).map(h => sliceMatrix(s, h));
}

// the neuron view's map and payload cut to the block (it shows pieces, not words)
export function pairNeuron(panel, map, n) {
  const s = pairSlice(panel, map, false);
  if (!s) return [map, n];
  const cut = {...n, q: n.q.slice(s.r0, s.r1), k: n.k.slice(s.c0, s.c1), scores: sliceMatrix(s, n.scores),
               weights: sliceMatrix(s, n.weights)};
  return [{...map, rows: map.rows.slice(s.r0, s.r1), cols: map.cols.slice(s.c0, s.c1), causal: false,
           row_name: `queries (sentence ${s.key[0]})`, col_name: `keys (sentence ${s.key[1]})`}, cut];
}

// ------------------------------------------------------------------------------------------ single head
// bertviz's shortcut: double-clicking a head (its name in the head picker or the model view, a thumbnail, a line
// of the head view) shows that head alone; double-clicking it again shows every head. The head picker holds the
// choice for the head view and the model view alike
export function soloHead(panel, h) {
  const boxes = [...panel.querySelectorAll(".head-picker input")];
  const alone = boxes.every(b => b.checked === (Number(b.value) === h));
  boxes.forEach(b => { b.checked = alone || Number(b.value) === h; });
  panel.dataset.solo = alone ? "" : String(h);
  render(panel);
}
