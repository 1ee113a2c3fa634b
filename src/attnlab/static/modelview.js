// attnlab explorer, the model view (bertviz's): every layer and head of the current map as thumbnails, a row per
// layer and a column per head shown (the head picker's); a click opens a thumbnail as a heatmap, a double-click
// on a head shows it alone (classroom.js).
import {currentMap, el, large, paintWeights, q, setView, wordsOn} from "./state.js";
import {labels, legend, scaleTop, selectedHeads, sharedScale} from "./maps.js";
import {pairSlice, soloHead, viewWeights} from "./classroom.js";
import {exportTitle, legendSVG, standalone} from "./export.js";

export async function renderModel(panel, box) {
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
    const weights = await viewWeights(panel, map.key, l);  // the sentence filter's block
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
