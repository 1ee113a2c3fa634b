// attnlab explorer, the current map as the panel's controls select it: its rows' and columns' names (pieces or
// words, cut to the sentence filter's block), what its axes are, the layer and head selectors and the head picker,
// the colour scale and its legend, and what a view shows in words and in file names. Shared by the views.
import {HEAD_COLORS, currentMap, el, q, render, rowMax, wordsOn} from "./state.js";
import {pairSlice, soloHead} from "./classroom.js";

// the rows' and columns' names of what the views show: pieces or words, cut to the sentence filter's block
export function labels(panel, map) {
  const [rows, cols] = wordsOn(panel) ? [map.row_words, map.col_words] : [map.rows, map.cols];
  const s = pairSlice(panel, map);
  return s ? [rows.slice(s.r0, s.r1), cols.slice(s.c0, s.c1)] : [rows, cols];
}

// what the rows and the columns are; a pair map under the sentence filter (panel given): the two sentences
export function axisNames(map, panel = null) {
  const s = panel && pairSlice(panel, map);
  return s ? [`queries (sentence ${s.key[0]})`, `keys (sentence ${s.key[1]})`]
           : [map.row_name || "rows", map.col_name || "columns"];
}

// ------------------------------------------------------------------------------------------ scale
export function sharedScale(panel) { return q(panel, ".scale").value === "shared"; }

// the weight drawn darkest: the largest of these matrices (per map), or 1 (shared: every map, layer and head on
// one scale, weights being probabilities)
export function scaleTop(panel, mats) {
  return sharedScale(panel) ? 1 : Math.max(1e-9, ...mats.map(w => Math.max(...w.map(rowMax))));
}

// a colour scale: white (0) to blue (vmax; null: each thumbnail its own largest), what it colours, the axes'
// names, and the uniform weight 1/n (n keys: a row spread evenly over them) marked on the ramp and printed: a map
// near 1/n everywhere attends to nothing in particular, however dark a per-map scale draws it
export function legend(panel, vmax, what, n) {
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

// ------------------------------------------------------------------------------------------ layer and head
// what a view shows, for titles and file names: a map of one layer and one head (an RNN's alignment) names
// neither, one of one head (a rollout) no head; [text, name]: ["layer 2, mean of heads, words", "layer2-mean-words"]
export function layerHeadParts(panel, head = q(panel, ".head").value, words = wordsOn(panel)) {
  const map = currentMap(panel), layer = Number(q(panel, ".layer").value) + 1;
  const text = [], name = [];
  if (map.layers > 1 || map.heads > 1) { text.push(`layer ${layer}`); name.push(`layer${layer}`); }
  if (map.heads > 1 && head !== null) {
    text.push(head === "mean" ? "mean of heads" : `head ${Number(head) + 1}`);
    name.push(head === "mean" ? "mean" : `head${Number(head) + 1}`);
  }
  const pair = pairSlice(panel, map, words);  // the sentence filter
  if (pair) { text.push(`sentences ${pair.name}`); name.push(`pair${pair.key}`); }
  if (words) { text.push("words"); name.push("words"); }
  return [text.join(", "), name.join("-")];
}

export function layerHeadText(panel) { return layerHeadParts(panel)[0]; }

export function fillLayerHead(panel) {
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

// the heads ticked in the head picker (the head view and the model view): every head, unless some were unticked
export function selectedHeads(panel, n) {
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
    label.addEventListener("dblclick", ev => { ev.preventDefault(); soloHead(panel, h); });
    label.append(box, ` ${h + 1} `);
    picker.append(label);
  }
}
