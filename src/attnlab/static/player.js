// attnlab step player: a translation decoded step by step ("Visualizing A Neural Machine Translation Model",
// Alammar 2018, as a player). At step t: the source tokens shaded by step t's attention (row t of the exploration's
// steps map: the RNN's alignment, or the Transformer's cross-attention of the chosen layer, one head or the mean
// of heads), the context vector of that step as a strip (RNN: c_t; Transformer: the cross-attention output before
// W^O, heads concatenated, the chosen head's segment outlined), the output distribution's top 5 and the token
// chosen, and for beam search the beam as a tree over the steps from the search's own trace (kept, pruned,
// finished and unfinished candidates with their scores).
import {colorOf, currentMap, el, getSteps, layerWeights, q, selectedMatrix, svgEl} from "./state.js";
import {fillLayerHead} from "./maps.js";
import {projectorOn} from "./classroom.js";
import {hypothesisText} from "./decoding.js";
import {standalone} from "./export.js";

const PLAYER_SPEEDS = [["slow", 1200], ["normal", 600], ["fast", 150]];  // ms per step while playing
const PLAYER_CSS = `
.player { font-size: 13px; }
.player .pl-controls { display: flex; flex-wrap: wrap; gap: .4em; align-items: center; margin: .3em 0 .6em; }
.player .pl-controls button { font: inherit; min-width: 2.4em; padding: .2em .5em; cursor: pointer; }
.player .pl-controls input.scrub { flex: 1 1 10em; min-width: 8em; }
.player .pl-label { color: var(--muted, #444); white-space: nowrap; }
.player h4 { font-size: 12px; font-weight: 600; color: var(--muted, #555); margin: .7em 0 .25em; }
.player .src-tokens, .player .out-tokens { display: flex; flex-wrap: wrap; gap: 3px; }
.player .src-tok, .player .out-tok { padding: 1px 4px; border-radius: 3px; white-space: pre;
                                     border: 1px solid var(--border, #ddd); }
.player .src-tok { display: inline-flex; flex-direction: column; align-items: center; }
.player .src-tok .track { position: relative; display: block; align-self: stretch; height: 5px; margin-top: 1px; }
.player .src-tok .bar { display: block; height: 100%; background: var(--bar, #0d47a1); }
.player .src-tok .u { position: absolute; top: -3px; bottom: -3px; width: 3px; margin-left: -1px;
                      background: var(--uniform, #e65100); }
.player .uniform-note { color: var(--uniform, #e65100); font-weight: 600; }
body.projector .player, body.projector .player h4, body.projector .player .caption { font-size: 24px; }
body.projector .player .src-tok .track { height: 10px; }
body.projector .player .src-tok .u { width: 6px; margin-left: -3px; top: -5px; bottom: -5px; }
.player .src-tok.best { outline: 2px solid #ff6f00; }
.player .out-tok.current { background: var(--hl-bg, #ffd54f); color: var(--hl-fg, #222); font-weight: 700;
                           border-color: #ff6f00; }
.player .out-tok.future { visibility: hidden; }
.player ol.top5 { margin: 0; padding-left: 1.6em; }
.player ol.top5 li { white-space: nowrap; }
.player ol.top5 li .pbar { display: inline-block; height: 9px; background: #ff9800; margin-right: .4em;
                           vertical-align: middle; }
.player ol.top5 li.chosen { font-weight: 700; }
.player .caption { color: var(--faint, #666); font-size: 11px; }
.player .tree-box { overflow-x: auto; border: 1px solid var(--border, #eee); }
/* the tree's colours follow the theme on the page (an export keeps the light ones its attributes give) */
.player svg.beam-tree rect.step-col { fill: var(--tree-step, #fff8e1); }
.player svg.beam-tree > text { fill: var(--faint, #888); }
.player svg.beam-tree g.node rect { fill: var(--node-bg, #fff); }
.player svg.beam-tree g.node.pruned rect { fill: var(--node-pruned, #f5f5f5); }
.player svg.beam-tree g.node text { fill: var(--node-fg, #222); }
.player svg.beam-tree g.node.pruned text { fill: var(--faint, #999); }
.player svg.beam-tree line.pruned { stroke: var(--edge-pruned, #ddd); }
.player svg.context-strip { background: var(--ramp-lo, #fff); }
.player svg.beam-tree { font: 11px sans-serif; display: block; }
.player svg.beam-tree g.node { cursor: pointer; }
.player ol.ended { margin: .2em 0; padding-left: 1.6em; }
.player details.ended-box summary { cursor: pointer; }
.player details.ended-box summary h4 { display: inline; }
.player ol.ended li.in-nbest { font-weight: 600; }
.player .legend span { margin-right: .8em; white-space: nowrap; }
.player .legend i { display: inline-block; width: 10px; height: 10px; margin-right: .25em; vertical-align: -1px; }
`;
const STATUS_COLORS = {kept: "#1565c0", finished: "#2e7d32", unfinished: "#ef6c00", pruned: "#bdbdbd"};

function playerStyle() {
  if (document.getElementById("attnlab-player-css")) return;
  const style = document.createElement("style");
  style.id = "attnlab-player-css";
  style.textContent = PLAYER_CSS;
  document.head.append(style);
}

// the ended hypotheses of a trace as beam search ranks them (finished by score, then the unfinished ones that
// top up too short an n-best): [{step, j, score, text, path: [[step, j], ...]}]
function endedHypotheses(tree) {
  const ends = [];
  tree.forEach(s => s.candidates.forEach((c, j) => {
    if (c.status === "finished" || c.status === "unfinished") ends.push({step: s.step, j, c, path: treePath(tree, s.step, j)});
  }));
  const by = st => ends.filter(e => e.c.status === st).sort((a, b) => b.c.score - a.c.score);
  return [...by("finished"), ...by("unfinished")];
}

// [[step, candidate index], ...] from step 0 to (step, j), following each candidate's parent slot back
function treePath(tree, step, j) {
  const path = [[step, j]];
  while (step > 0) {
    const parent = tree[step].candidates[j].parent;
    step -= 1;
    j = tree[step].candidates.findIndex(c => c.slot === parent && c.status === "kept");
    path.push([step, j]);
  }
  return path.reverse();
}

function beamTreeSVG(tree, best) {
  const colW = 70, rowH = 20, left = 44, top = 18;
  const rows = Math.max(...tree.map(s => s.candidates.length));
  const width = left + tree.length * colW + 10, height = top + rows * rowH + 6;
  const svg = svgEl("svg", {class: "beam-tree", width, height, viewBox: `0 0 ${width} ${height}`});
  const onBest = new Set(best.map(([s, j]) => `${s}/${j}`));
  const x = s => left + s * colW, y = j => top + j * rowH + rowH / 2;
  svg.append(svgEl("rect", {class: "step-col", x: x(0) - 4, y: 0, width: colW - 4, height, fill: "#fff8e1"}));
  svg.append(svgEl("text", {x: 4, y: y(0) + 4}, "<s>"));
  tree.forEach(s => svg.append(svgEl("text", {x: x(s.step), y: 12, fill: "#888"}, `${s.step + 1}`)));
  const edges = svgEl("g"), nodes = svgEl("g");
  tree.forEach(s => s.candidates.forEach((c, j) => {
    // the parent: the kept candidate of the previous step in slot c.parent (step 0: the start)
    const pj = s.step === 0 ? 0 : tree[s.step - 1].candidates.findIndex(p => p.slot === c.parent && p.status === "kept");
    const x0 = s.step === 0 ? 26 : x(s.step - 1) + colW - 22;
    const hot = onBest.has(`${s.step}/${j}`);
    edges.append(svgEl("line", {x1: x0, y1: y(pj), x2: x(s.step) - 2, y2: y(j), "stroke-width": hot ? 2.5 : 1,
                                class: hot ? "best" : c.status,
                                stroke: hot ? "#ff6f00" : c.status === "pruned" ? "#ddd" : "#90a4ae"}));
    const g = svgEl("g", {class: `node ${c.status}` + (hot ? " best" : ""), "data-step": s.step, "data-j": j,
                          "data-status": c.status});
    const label = c.label.length > 7 ? `${c.label.slice(0, 6)}\u2026` : c.label;
    g.append(svgEl("rect", {x: x(s.step) - 2, y: y(j) - 8, width: colW - 26, height: 16, rx: 3,
                            fill: c.status === "pruned" ? "#f5f5f5" : "#fff", stroke: STATUS_COLORS[c.status],
                            "stroke-width": hot ? 2.5 : 1.2}));
    g.append(svgEl("text", {x: x(s.step) + 2, y: y(j) + 4, fill: c.status === "pruned" ? "#999" : "#222"}, label));
    g.append(svgEl("title", {}, `step ${s.step + 1}: ${c.label} (${c.status}); log P = ${c.log_prob.toFixed(3)}` +
                                (c.status === "finished" || c.status === "unfinished"
                                  ? `, score ${c.score.toFixed(3)}: ${c.text}` : "")));
    nodes.append(g);
  }));
  svg.append(edges, nodes);
  return svg;
}

function contextStrip(vec, vmax, heads, head) {
  const D = vec.length, cell = Math.max(2, Math.min(12, Math.floor(560 / D))), h = 16;
  const width = D * cell + 2, seg = D / heads;
  const svg = svgEl("svg", {class: "context-strip", width, height: h + (heads > 1 ? 14 : 2), "data-dim": D});
  vec.forEach((v, d) => svg.append(svgEl("rect", {x: 1 + d * cell, y: 1, width: cell, height: h, fill: colorOf(v, vmax),
                                                  "data-v": v})));
  if (heads > 1) {
    for (let k = 0; k < heads; k++) {
      const on = head === String(k);
      svg.append(svgEl("rect", {x: 1 + k * seg * cell, y: 1, width: seg * cell, height: h, fill: "none",
                                stroke: on ? "#ff6f00" : "#999", "stroke-width": on ? 2 : .6}));
      svg.append(svgEl("text", {x: 1 + k * seg * cell + 2, y: h + 12, "font-size": 10, fill: on ? "#ff6f00" : "#777"},
                       `h${k + 1}`));
    }
  }
  return svg;
}

// the player's keys: one listener for the page, acting on the player last shown or clicked (two panels may each
// have one); never while typing in a field
const PLAYER_KEYS = {active: null};
document.addEventListener("keydown", ev => {
  const a = PLAYER_KEYS.active;
  if (!a || !["ArrowLeft", "ArrowRight", "Home", "End", " "].includes(ev.key)) return;
  if (ev.altKey || ev.ctrlKey || ev.metaKey || ev.target.closest?.("input, textarea, select, [contenteditable]")) return;
  if (ev.key === " " && ev.target.closest?.("button, summary")) return;  // a focused button's own space
  if (a.panel.view !== "player" || a.panel.playerRoot !== a.root || !a.root.isConnected) return;
  ev.preventDefault();  // space would scroll the page, Home/End jump it
  a.act(ev.key);
});

function playerButton(action, text, title) {
  return el("button", {type: "button", "data-action": action, title}, text);
}

export async function renderPlayer(panel, box) {
  playerStyle();
  clearInterval(panel.playerTimer);
  const r = panel.result, steps = r.steps;
  if (!steps) {
    box.append(el("p", {class: "note"}, "The step player shows a translation's decoding: it needs a translation " +
                                        "run with attention."));
    return;
  }
  // the player's attention is its steps map: select it, so the layer and head controls say what is shown
  if (q(panel, ".map").value !== steps.map) {
    q(panel, ".map").value = steps.map;
    fillLayerHead(panel);
  }
  const map = currentMap(panel);
  const layer = Number(q(panel, ".layer").value), head = q(panel, ".head").value;
  const [heads, ctx] = await Promise.all([layerWeights(panel, map.key, layer, false), getSteps(panel, layer)]);
  const w = selectedMatrix(panel, heads);  // (T, S): row t is step t's attention
  const T = r.choices.length, context = ctx.context;  // (T, Dc)
  const cmax = Math.max(1e-9, ...context.map(row => Math.max(...row.map(Math.abs))));
  if (panel.playerResult !== r) { panel.playerResult = r; panel.playerStep = 0; }
  const root = el("div", {class: "player", "data-steps": T});
  panel.playerRoot = root;

  const scrub = el("input", {type: "range", class: "scrub", min: 0, max: T - 1, step: 1, value: 0,
                             "aria-label": "decoding step"});
  const label = el("span", {class: "pl-label"});
  const speed = el("select", {class: "speed", "aria-label": "playing speed"});
  PLAYER_SPEEDS.forEach(([name, ms]) => speed.append(el("option", {value: ms}, name)));
  speed.value = panel.playerSpeed || "600";
  speed.addEventListener("change", () => {
    panel.playerSpeed = speed.value;
    if (panel.playerTimer) { stop(); start(); }
  });
  const play = playerButton("play", "\u25b6 play", "play the steps (pause: click again)");
  const controls = el("div", {class: "pl-controls"});
  controls.append(playerButton("first", "|\u25c0", "first step"), playerButton("back", "\u25c0", "step back"), play,
                  playerButton("forward", "\u25b6", "step forward"), playerButton("last", "\u25b6|", "last step"),
                  speed, scrub, label);
  const which = map.heads > 1 ? (head === "mean" ? `mean of ${map.heads} heads` : `head ${Number(head) + 1}`) : "";
  const what = map.layers > 1 || map.heads > 1 ? ` (layer ${layer + 1}${which ? `, ${which}` : ""})` : "";
  const srcBox = el("div", {class: "src-tokens"}), outBox = el("div", {class: "out-tokens"});
  const stripBox = el("div", {class: "strip-box"}), top5 = el("ol", {class: "top5"});
  const uniform = 1 / Math.max(1, map.cols.length);  // the weight of attention spread evenly
  root.append(controls,
              el("h4", {}, `attention over the source at this step: ${map.title}${what}`),
              el("p", {class: "caption uniform-note"}, `the bars are each weight over the step's largest; the ` +
                                                       `orange tick is the uniform weight 1/n = ` +
                                                       `${uniform.toFixed(3)} (n = ${map.cols.length})`), srcBox,
              el("h4", {}, "output so far"), outBox,
              el("h4", {}, `context vector at this step (${ctx.context[0].length} values; blue > 0, red < 0, ` +
                           "scaled to this layer's largest |value|)"), stripBox,
              el("p", {class: "caption"}, `${steps.context}` + (steps.heads > 1 ? `; layer ${layer + 1}` : "")),
              el("h4", {}, "output distribution: the top 5 and the token chosen"), top5);
  (map.col_strip || map.cols).forEach((s, j) => {
    const span = el("span", {class: "src-tok", "data-j": j}, s);
    const track = el("span", {class: "track"});
    track.append(el("span", {class: "bar"}), el("span", {class: "u", title: `uniform 1/n = ${uniform.toFixed(3)}`}));
    span.append(track);
    srcBox.append(span);
  });
  r.choices.forEach((c, t) => outBox.append(el("span", {class: "out-tok", "data-t": t}, c.strip ?? c.label)));

  let treeSvg = null, ended = [];
  if (steps.tree) {
    ended = endedHypotheses(steps.tree);
    const best = ended.length ? ended[0].path : [];
    treeSvg = beamTreeSVG(steps.tree, best);
    if (projectorOn()) {  // projector mode: the tree drawn for 11 px labels, scaled to 24 px ones
      const k = 24 / 11;
      treeSvg.style.width = `${Math.ceil(k * Number(treeSvg.getAttribute("width")))}px`;
      treeSvg.style.height = `${Math.ceil(k * Number(treeSvg.getAttribute("height")))}px`;
      treeSvg.dataset.scale = k.toFixed(3);
    }
    const legend = el("p", {class: "legend caption"});
    for (const [st, color] of Object.entries(STATUS_COLORS)) {
      const item = el("span");
      const swatch = el("i");
      swatch.style.border = `2px solid ${color}`;
      item.append(swatch, document.createTextNode(st));
      legend.append(item);
    }
    const treeBox = el("div", {class: "tree-box"});
    treeBox.append(treeSvg);
    const list = el("ol", {class: "ended"});
    // foldable: a long beam's 30-60 ended hypotheses start folded, a short list open
    const fold = el("details", {class: "ended-box"});
    fold.open = ended.length <= 10;
    ended.forEach((e, k) => list.append(el("li", {class: k < r.nbest.length ? "in-nbest" : "", "data-status": e.c.status},
                                            `${e.c.score.toFixed(3)}  ${hypothesisText(e.c.text)}`)));
    root.append(el("h4", {}, `beam search: the ${2 * (r.beam || steps.tree[0].candidates.length / 2)} best ` +
                             "candidates of each step as the search ranked them (its own record); the best " +
                             "hypothesis' path in orange, click a node to go to its step"),
                legend, treeBox, fold);
    const summary = el("summary", {});
    summary.append(el("h4", {}, `${ended.length} ended hypotheses by score (finished, then cut at the length ` +
                                `limit); the first ${r.nbest.length} are the n-best list`));
    fold.append(summary, list);
    treeSvg.addEventListener("click", ev => {
      const node = ev.target.closest("g.node");
      if (node) { stop(); show(Number(node.dataset.step)); }
    });
  } else {
    root.append(el("p", {class: "note"}, "greedy search (beam 1): one hypothesis, the most probable token at " +
                                         "each step; explore with a beam above 1 to see the beam as a tree."));
  }

  function show(t) {
    t = Math.max(0, Math.min(T - 1, t));
    panel.playerStep = t;
    root.dataset.step = t;
    scrub.value = t;
    label.textContent = `step ${t + 1} of ${T}`;
    const row = w[t], m = Math.max(1e-9, ...row), best = row.indexOf(Math.max(...row));
    srcBox.querySelectorAll(".src-tok").forEach((span, j) => {
      span.dataset.w = row[j].toFixed(4);
      span.style.background = `rgba(13, 71, 161, ${(0.6 * row[j] / m).toFixed(3)})`;
      span.title = `${map.cols[j]}: ${row[j].toFixed(3)}`;
      span.classList.toggle("best", j === best);
      span.querySelector(".bar").style.width = `${(100 * row[j] / m).toFixed(1)}%`;
      span.querySelector(".u").style.left = `${(100 * Math.min(1, uniform / m)).toFixed(1)}%`;
    });
    outBox.querySelectorAll(".out-tok").forEach((span, k) => {
      span.classList.toggle("current", k === t);
      span.classList.toggle("future", k > t);
    });
    stripBox.replaceChildren(contextStrip(context[t], cmax, steps.heads, head));
    const c = r.choices[t];
    top5.replaceChildren();
    c.top.forEach(a => {
      const li = el("li", {class: a.piece === c.piece ? "chosen" : "", "data-p": a.prob, "data-piece": a.piece});
      const bar = el("span", {class: "pbar"});
      bar.style.width = `${Math.round(80 * a.prob)}px`;
      li.append(bar, document.createTextNode(`${a.label}  ${a.prob.toFixed(3)}` + (a.piece === c.piece ? "  \u2190 chosen" : "")));
      top5.append(li);
    });
    if (!c.top.some(a => a.piece === c.piece)) {  // beam search may choose a token outside the step's top 5
      top5.append(el("li", {class: "chosen", "data-p": c.prob, "data-piece": c.piece, value: 0},
                     `${c.label}  ${c.prob.toFixed(3)}  \u2190 chosen (not in the top 5)`));
    }
    root.dataset.chosen = c.piece;
    if (treeSvg) {
      const col = treeSvg.querySelector("rect.step-col");
      col.setAttribute("x", 44 + t * 70 - 4);
      treeSvg.querySelectorAll("g.node").forEach(g => g.classList.toggle("now", Number(g.dataset.step) === t));
      // the tree follows the step: its column kept in view, near the middle of the box
      const box = treeSvg.parentElement, at = 44 + t * 70;
      if (box && (at < box.scrollLeft + 20 || at + 70 > box.scrollLeft + box.clientWidth - 20)) {
        box.scrollLeft = Math.max(0, at - box.clientWidth / 2);
      }
    }
  }

  function stop() {
    clearInterval(panel.playerTimer);
    panel.playerTimer = null;
    play.textContent = "\u25b6 play";
    root.dataset.playing = "0";
  }

  function start() {
    if (panel.playerStep >= T - 1) show(0);
    play.textContent = "\u275a\u275a pause";
    root.dataset.playing = "1";
    panel.playerTimer = setInterval(() => {
      if (panel.playerRoot !== root || panel.view !== "player") { clearInterval(panel.playerTimer); return; }
      show(panel.playerStep + 1);
      if (panel.playerStep >= T - 1) stop();
    }, Number(speed.value));
  }

  controls.addEventListener("click", ev => {
    const b = ev.target.closest("button");
    if (!b) return;
    const a = b.dataset.action;
    if (a === "play") { if (panel.playerTimer) stop(); else start(); return; }
    stop();
    show({first: 0, back: panel.playerStep - 1, forward: panel.playerStep + 1, last: T - 1}[a]);
  });
  scrub.addEventListener("input", () => { stop(); show(Number(scrub.value)); });
  // keys (playerKeys): space play/pause, left/right a step, Home/End the first/last step
  const keys = {panel, root, act: key => {
    if (key === " ") { if (panel.playerTimer) stop(); else start(); return; }
    stop();
    show({ArrowLeft: panel.playerStep - 1, ArrowRight: panel.playerStep + 1, Home: 0, End: T - 1}[key]);
  }};
  PLAYER_KEYS.active = keys;
  root.addEventListener("pointerdown", () => { PLAYER_KEYS.active = keys; });
  stop();
  show(Math.min(panel.playerStep || 0, T - 1));
  box.append(root);
  panel.exporter = () => {
    panel.exportName = treeSvg ? "beam-tree" : `context-step${panel.playerStep + 1}`;
    const svg = treeSvg || stripBox.querySelector("svg");
    return standalone(svg.outerHTML, Number(svg.getAttribute("width")), Number(svg.getAttribute("height")),
                      treeSvg ? `beam search tree: ${r.output}` : `context vector, step ${panel.playerStep + 1}`);
  };
}
