// attnlab explorer, exports: a view as an SVG or PNG file (each panel's PNG and SVG buttons). Each view sets
// panel.exporter (a function returning its SVG, made with `standalone`) and panel.exportName while it draws; the
// file's name and title record what it shows.
import {SVG_NS, currentMap, el, esc, q, themeColors} from "./state.js";

// an export's title, two lines: model, map and what is shown (layer, head); the input
export function exportTitle(panel, what) {
  const map = currentMap(panel);
  const input = panel.sentence || panel.result.input || "";
  const short = input.length > 110 ? `${input.slice(0, 110)}\u2026` : input;
  return [`${q(panel, ".model").value}: ${map.title}${what ? `, ${what}` : ""}`, short ? `input: \u201c${short}\u201d` : ""]
    .filter(Boolean);
}

export function standalone(inner, width, height, title) {
  // an SVG file of its own: the theme's background (white, or the dark theme's when it is on) and text colour,
  // the title's lines above the view
  const {bg, fg} = themeColors();
  const lines = Array.isArray(title) ? title : [title];
  const head = 18 * lines.length + 8;
  const wide = Math.max(width, ...lines.map(t => Math.ceil(6.6 * t.length) + 8));
  const body = inner.replace(/^<svg[^>]*>/, "").replace(/<\/svg>$/, "");
  const texts = lines.map((t, k) => `<text x="4" y="${18 * k + 14 - head}"${k ? "" : ' font-weight="bold"'}>` +
                                    `${esc(t)}</text>`).join("");
  return `<svg xmlns="${SVG_NS}" width="${wide}" height="${height + head}" viewBox="0 ${-head} ${wide} ` +
         `${height + head}" font-family="sans-serif" font-size="12" fill="${fg}"><rect x="0" y="${-head}" ` +
         `width="${wide}" height="${height + head}" fill="${bg}"/>${texts}<style>line{stroke-linecap:round}</style>` +
         `${body}</svg>`;
}

// an exported colour scale: the ramp's 0 end to blue (top), at (x, y); `uniform` [1/n, its place on the ramp 0..1
// or null] marks and prints the uniform weight
export function legendSVG(x, y, top, what, uniform = null) {
  const steps = [`<rect x="${x + 12}" y="${y}" width="120" height="12" fill="${themeColors().lo}"/>`,  // 0
                 ...[...Array(24).keys()].map(k => `<rect x="${x + 12 + 5 * k}" y="${y}" width="5" height="12" ` +
                                                   `fill="rgb(13,71,161)" fill-opacity="${(k / 23).toFixed(3)}"/>`)];
  const [u, at] = uniform || [null, null];
  const mark = at === null ? "" : `<line class="uniform" x1="${x + 12 + 120 * at}" x2="${x + 12 + 120 * at}" ` +
                                  `y1="${y - 3}" y2="${y + 15}" stroke="#ff6f00" stroke-width="2"/>`;
  const note = u === null ? "" : `; uniform 1/n = ${u.toFixed(3)}`;
  return `<text x="${x}" y="${y + 10}">0</text>${steps.join("")}<rect x="${x + 12}" y="${y}" width="120" ` +
         `height="12" fill="none" stroke="#999" stroke-width="0.5"/>${mark}<text x="${x + 138}" y="${y + 10}">` +
         `${esc(top)}  ${esc(what + note)}</text>`;
}

function download(panel, blob, fmt) {
  // the file's name records what it shows: attnlab-MODEL-MAP-VIEW[-layerL][-head or mean][-words].FMT
  const shows = panel.exportName ? `-${panel.exportName}` : "";
  const a = el("a", {href: URL.createObjectURL(blob), download: `attnlab-${q(panel, ".model").value}-` +
                     `${q(panel, ".map").value}-${panel.view}${shows}.${fmt}`});
  document.body.append(a);
  a.click();
  a.remove();
  panel.dataset.exported = `${fmt}:${blob.size}`;
}

export async function exportView(panel, fmt) {
  if (!panel.exporter) return;
  const svg = panel.exporter();
  const blob = new Blob([svg], {type: "image/svg+xml"});
  if (fmt === "svg") { download(panel, blob, "svg"); return; }
  const img = new Image();
  const url = URL.createObjectURL(blob);
  await new Promise((ok, fail) => { img.onload = ok; img.onerror = fail; img.src = url; });
  const scale = 2;
  const canvas = el("canvas", {width: img.width * scale, height: img.height * scale});
  const ctx = canvas.getContext("2d");
  ctx.scale(scale, scale);
  ctx.drawImage(img, 0, 0);
  URL.revokeObjectURL(url);
  canvas.toBlob(png => download(panel, png, "png"), "image/png");
}
