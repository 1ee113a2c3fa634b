// attnlab explorer, the decoding box of a panel: the n-best list and the output tokens shaded by how unsure the
// model was, each token's top 5 on hover or tap.
import {el, q} from "./state.js";

// a hypothesis as the lists show it: an empty one named, never a bare score
export function hypothesisText(text) { return text === "" ? "(empty)" : text; }

export function renderDecoding(panel, r) {
  const nbest = q(panel, ".nbest");
  nbest.replaceChildren();
  r.nbest.forEach(h => nbest.append(el("li", {}, `${h.score.toFixed(3)}  ${hypothesisText(h.text)}`)));
  const tokens = q(panel, ".tokens");
  tokens.replaceChildren();
  const tip = q(panel, ".tip");
  r.choices.forEach((c, t) => {
    const span = el("span", {class: "tok" + (c.generated ? "" : " prompt"), "data-t": t, "data-p": c.prob},
                    c.strip ?? c.label);
    span.style.background = `rgba(255, 152, 0, ${(1 - c.prob).toFixed(3)})`;  // the more hesitant, the darker
    tokens.append(span);
  });
  // the shading explained: darker is less sure
  decodingLegend(panel, r.choices.length > 0);
  tokens.onmouseover = tokens.onclick = ev => {  // hover, or tap (a click)
    const span = ev.target.closest(".tok");
    if (!span) return;
    const c = r.choices[Number(span.dataset.t)];
    tip.replaceChildren(el("b", {}, `${c.label}: p = ${c.prob.toFixed(3)}`));
    const list = el("ol");
    c.top.forEach(a => list.append(el("li", {class: a.piece === c.piece ? "chosen" : "", "data-p": a.prob},
                                      `${a.label}  ${a.prob.toFixed(3)}`)));
    tip.append(list);
    // under the hovered token, kept inside the panel on a narrow screen
    tip.style.left = `${Math.max(0, Math.min(span.offsetLeft, tokens.clientWidth - tip.offsetWidth))}px`;
    tip.style.top = `${span.offsetTop + span.offsetHeight + 2}px`;
    tip.hidden = false;
  };
  tokens.onmouseleave = () => { tip.hidden = true; };
}

function decodingLegend(panel, shown) {
  const box = q(panel, ".decoding");
  box.querySelector(".prob-legend")?.remove();
  if (!shown) return;
  const note = el("p", {class: "prob-legend note"});
  note.append("each token shaded by how unsure the model was: p = 1 ", el("span", {class: "ramp prob"}),
              " p = 0 (p: its probability; hover or tap a token for the top 5)");
  q(panel, ".tokens").after(note);
}
