// attnlab attention explorer: two panels, each a model explored on the same input (POST /api/explore), with
// five views of any of its attention maps: heatmap, model view (layers x heads), head view (lines), neuron view
// (queries and keys), step player; a word-level toggle, and PNG/SVG export. Weights are fetched a layer at a time.
// Plain DOM, SVG and canvas: no libraries, no build step, no network beyond this server's own /api.
// This module sets the page up: the panels, their controls and the form, the views by name (state.js's `render`
// draws a panel with them), and the compare view (#compare). Each view is a module of its own; state.js holds what
// they share. Embedded (a notebook's inline explorer, `attnlab.runs.views.exploration_html`: the same modules
// inlined as one script), one panel shows the page's exploration at once.
import {EMBEDDED, THEME, el, getModels, postExplore, q, render, setTheme, setView, themeColors,
        useViews} from "./state.js";
import {fillLayerHead} from "./maps.js";
import {applyUrlProjector, projectorOn, setProjector, soloHead} from "./classroom.js";
import {renderHeatmap} from "./heatmap.js";
import {renderModel} from "./modelview.js";
import {renderHead} from "./headview.js";
import {renderNeuron} from "./neuron.js";
import {renderPlayer} from "./player.js";
import {renderDecoding} from "./decoding.js";
import {exportView} from "./export.js";
import {startCompare} from "./compare.js";

// the page's only globals, for the browser tests and scripts that call them from outside (Selenium's
// execute_script): tests/e2e/test_imported.py reads themeColors(), scripts/classroom_screenshots.py calls
// soloHead(panel, head). The modules pass nothing to each other through window.
window.themeColors = themeColors;
window.soloHead = soloHead;

let MODELS = [];

useViews({heatmap: renderHeatmap, model: renderModel, head: renderHead, neuron: renderNeuron, player: renderPlayer});

async function explorePanel(panel, sentence, sentenceB) {
  const name = q(panel, ".model").value;
  const status = q(panel, ".status");
  const model = MODELS.find(m => m.name === name);
  q(panel, ".translation").textContent = "";
  q(panel, ".warning").hidden = true;
  q(panel, ".view-box").replaceChildren();
  q(panel, ".source-strip").replaceChildren();
  q(panel, ".nbest").replaceChildren();
  q(panel, ".tokens").replaceChildren();
  q(panel, ".viewbar").hidden = true;
  panel.result = null;
  panel.sentence = model && model.kind === "pair" ? `${sentence} / ${sentenceB}` : sentence;  // export titles
  if (!name) { panel.dataset.state = "idle"; status.textContent = ""; return; }
  panel.dataset.state = "loading";
  status.textContent = "exploring ...";
  const body = {model: name, sentence, beam: Number(q(panel, ".beam").value) || null};
  if (model.kind === "pair") body.sentence_b = sentenceB;
  if (model.kind === "generation") body.max_new = Number(q(panel, ".max-new").value) || 40;
  const t0 = performance.now();
  try {
    const data = await postExplore(body);
    panel.result = data;
    panel.cache = new Map();
    q(panel, ".translation").textContent = data.output === "" && data.choices.length ? "(empty)" : data.output;
    const warn = q(panel, ".warning");
    warn.hidden = !data.warning;
    warn.textContent = data.warning ? `\u26a0 ${data.warning}` : "";
    const shape = data.maps.map(m => `${m.key} ${m.layers}\u00d7${m.heads}`).join(", ");
    const family = EMBEDDED ? "" : ` (${data.family}${data.kind === "translation" ? `, beam ${data.beam}` : ""})`;
    status.textContent = `${name}${family}: ` +
                         `${shape}${data.seconds == null ? "" : `; ${data.seconds.toFixed(2)} s`}`;
    renderDecoding(panel, data);
    q(panel, '.views button[data-view="player"]').hidden = !data.steps;  // translations with attention
    const select = q(panel, ".map");
    select.replaceChildren(...data.maps.map(m => el("option", {value: m.key}, m.title)));
    select.value = data.maps[0].key;
    fillLayerHead(panel);
    q(panel, ".viewbar").hidden = data.maps.length === 0;
    if (!data.maps.length) {
      q(panel, ".view-box").append(el("p", {}, "This model has no attention (attention = none): nothing to show."));
      panel.dataset.state = "done";
      return;
    }
    panel.dataset.fetchMs = (performance.now() - t0).toFixed(1);
    await render(panel);
    panel.dataset.state = "done";
  } catch (err) {
    panel.dataset.state = "error";
    status.textContent = `error: ${err.message}`;
  }
}

function setupPanel(panel, index) {
  panel.append(document.getElementById("panel-template").content.cloneNode(true));
  panel.view = "heatmap";
  const select = q(panel, ".model");
  if (index > 0) select.append(el("option", {value: ""}, "(none)"));
  MODELS.forEach(m => select.append(el("option", {value: m.name},
    `${m.name} (${m.family}, ${m.attention}${m.trained_on && m.trained_on.length ? `; English: ${m.trained_on.join(" + ")}` : ""})`)));
  select.value = index < MODELS.length ? MODELS[index].name : "";
  const beam = q(panel, ".beam");
  const sync = () => {
    const m = MODELS.find(x => x.name === select.value);
    beam.value = m ? m.beam : "";
    q(panel, ".beam-box").hidden = !!m && m.kind !== "translation";
    q(panel, ".new-box").hidden = !m || m.kind !== "generation";
  };
  sync();
  select.addEventListener("change", sync);
  q(panel, ".map").addEventListener("change", () => { fillLayerHead(panel); render(panel); });
  for (const cls of [".layer", ".head", ".words", ".scale", ".pair"]) {
    q(panel, cls).addEventListener("change", () => render(panel));
  }
  q(panel, ".large").addEventListener("change", ev => setLarge(ev.target.checked));
  const projector = q(panel, "button.projector");
  projector.setAttribute("aria-pressed", String(projectorOn()));
  projector.addEventListener("click", () => setProjector(!projectorOn()));
  q(panel, ".theme").value = THEME.choice;
  q(panel, ".theme").addEventListener("change", ev => setTheme(ev.target.value));
  panel.querySelectorAll(".views button").forEach(b => b.addEventListener("click", () => setView(panel,
                                                                                                 b.dataset.view)));
  panel.querySelectorAll("button.export").forEach(b => b.addEventListener("click", () => exportView(panel,
                                                                                                   b.dataset.format)));
  q(panel, `.views button[data-view="heatmap"]`).classList.add("active");
}

// the "large text" switch, one for the page (each panel has a copy): bigger labels, cells and lines
function setLarge(on) {
  document.body.classList.toggle("large", on);
  document.querySelectorAll(".panel").forEach(p => {
    const box = p.querySelector("input.large");
    if (box) box.checked = on;
    if (p.result) render(p);
  });
}

// embedded: one panel, no form, the exploration shown at once; inside an iframe (a notebook's output) the frame
// follows the page's height (a srcdoc frame is of its parent's origin; elsewhere its fixed height stays)
async function showEmbedded(panels) {
  for (const e of [document.querySelector("header"), document.getElementById("form"), document.querySelector("footer"),
                   ...panels.slice(1)]) e.hidden = true;
  document.body.classList.add("embedded");
  setupPanel(panels[0], 0);
  q(panels[0], ".controls").hidden = true;
  const fit = () => {
    try {
      if (window.frameElement) window.frameElement.style.height = `${document.documentElement.offsetHeight + 8}px`;
    } catch (err) { /* a cross-origin host: keep the frame's own height */ }
  };
  new ResizeObserver(fit).observe(document.body);
  await explorePanel(panels[0], "", null);
  document.body.dataset.ready = "1";
}

async function main() {
  applyUrlProjector();  // ?projector=1
  MODELS = await getModels();
  const panels = [...document.querySelectorAll(".panel")];
  if (EMBEDDED) { await showEmbedded(panels); return; }
  panels.forEach(setupPanel);
  const m = MODELS[0];
  document.getElementById("limits").textContent =
    `at most ${m.max_chars} characters and ${m.max_src_tokens} tokens; models: ${MODELS.map(x => x.name).join(", ")}`;
  if (MODELS.some(x => x.kind === "pair")) document.querySelectorAll(".pair-only").forEach(e => { e.hidden = false; });
  document.getElementById("form").addEventListener("submit", ev => {
    ev.preventDefault();
    const sentence = document.getElementById("sentence").value;
    const sentenceB = document.getElementById("sentence-b").value;
    panels.forEach(p => explorePanel(p, sentence, sentenceB));
  });
  document.body.dataset.ready = "1";
}

main();
startCompare();
