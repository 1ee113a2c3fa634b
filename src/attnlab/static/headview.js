// attnlab explorer, the head view (bertviz's): a line from each query to each key, one per head shown; hovering or
// tapping a token keeps its lines and draws bars of its weights beside the other side.
import {HEAD_COLORS, SVG_NS, currentMap, el, large, q, svgEl} from "./state.js";
import {axisNames, labels, layerHeadParts, selectedHeads} from "./maps.js";
import {projectorOn, soloHead, viewWeights} from "./classroom.js";
import {exportTitle, standalone} from "./export.js";

const MAX_LINES = 20000;  // head view: above this many lines, weights under MIN_LINE are not drawn
const MIN_LINE = 0.02;

// bertviz's head view, both sides live: the rows' tokens on the left, the columns' on the right, a line per pair
// and selected head (colour = head, opacity = weight, width growing with it). Hovering or tapping a token on
// either side keeps its lines only and draws, beside the other side's tokens, bars of its weights (the mean over
// the heads shown, each head's share in its colour). A tap pins the focus; tapping the token again frees it.
export async function renderHead(panel, box) {
  const map = currentMap(panel);
  const [rows, cols] = labels(panel, map);
  const [rowName, colName] = axisNames(map, panel);
  const layer = Number(q(panel, ".layer").value);
  const all = await viewWeights(panel, map.key, layer);  // the sentence filter's block
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
