"""The step player in headless Chromium (the fixtures of test_browser.py: `attnlab serve` on the tiny RNN,
Transformer and LM runs): stepping to the last step shows the translation's tokens, each step's top 5 and chosen
token are the API's, the source shading is the step's attention row, the context strip has the API's values;
playing runs to the end; the beam tree's ended hypotheses, ranked, begin with the n-best list the page shows, and
the tree's best path is the translation; greedy search has no tree; the other families have no player."""

# ruff: noqa: F811 (the fixtures of test_browser.py are imported, then named as the tests' arguments)
import numpy as np
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.ui import WebDriverWait
from test_browser import _api, _explore, _layer, _show, browser, downloads, server  # noqa: F401 (fixtures)


def _player(browser, panel):
    _show(browser, panel, "player")
    return panel.find_element(By.CSS_SELECTOR, ".player")


def _click(player, action: str) -> None:
    player.find_element(By.CSS_SELECTOR, f'button[data-action="{action}"]').click()


def _step_state(browser, player) -> dict:
    return browser.execute_script("""
        const p = arguments[0];
        return {step: Number(p.dataset.step), chosen: p.dataset.chosen,
                shown: [...p.querySelectorAll('.out-tok:not(.future)')].map(s => s.textContent),
                current: p.querySelector('.out-tok.current').textContent,
                top: [...p.querySelectorAll('ol.top5 li')].map(li => [li.dataset.piece, Number(li.dataset.p)]),
                chosenLi: [...p.querySelectorAll('ol.top5 li.chosen')].map(li => li.dataset.piece),
                w: [...p.querySelectorAll('.src-tok')].map(s => Number(s.dataset.w)),
                strip: [...p.querySelectorAll('svg.context-strip rect[data-v]')].map(r => Number(r.dataset.v))};
    """, player)


@pytest.mark.parametrize("model", ["rnn", "transformer"])
def test_step_player_reaches_the_last_step_with_the_translations_tokens(server, browser, model):
    panel, api = _explore(browser, server, model)
    steps, choices = api["steps"], api["choices"]
    assert steps is not None and steps["steps"] == len(choices)
    player = _player(browser, panel)
    T = len(choices)
    assert int(player.get_attribute("data-steps")) == T
    layer = steps["layers"] - 1  # the player opens on the last layer, mean of heads
    weights = _layer(server, api, steps["map"], layer).mean(0)  # (T, S)
    context = np.array(_api(f"{server}/api/explore/{api['id']}/steps?layer={layer}")["context"])  # (T, Dc)
    _click(player, "first")
    for t in range(T):
        state = _step_state(browser, player)
        c = choices[t]
        assert state["step"] == t and state["chosen"] == c["piece"] and state["current"] == c["label"]
        assert state["shown"] == [x["label"] for x in choices[:t + 1]]
        assert state["top"][:5] == [[a["piece"], a["prob"]] for a in c["top"]]
        assert state["chosenLi"] == [c["piece"]]
        np.testing.assert_allclose(state["w"], weights[t], atol=2e-4)
        np.testing.assert_allclose(state["strip"], context[t], atol=1e-6)
        if t < T - 1:
            _click(player, "forward")
    # the last step: the output so far is the translation, token for token
    assert state["shown"] == [x["label"] for x in choices] == [t.text for t in panel.find_elements(By.CSS_SELECTOR,
                                                                                                     ".tokens .tok")]
    _click(player, "forward")  # past the end: stays on the last step
    assert _step_state(browser, player)["step"] == T - 1
    # scrub to the start, then play: it runs to the last step by itself and stops
    browser.execute_script("const s = arguments[0]; s.value = 0; s.dispatchEvent(new Event('input'));",
                           player.find_element(By.CSS_SELECTOR, "input.scrub"))
    assert _step_state(browser, player)["step"] == 0
    Select(player.find_element(By.CSS_SELECTOR, "select.speed")).select_by_visible_text("fast")
    _click(player, "play")
    WebDriverWait(browser, 0.15 * T + 20).until(lambda d: player.get_attribute("data-playing") == "0"
                                     and player.get_attribute("data-step") == str(T - 1))


@pytest.mark.parametrize("model", ["rnn", "transformer"])
def test_beam_tree_finished_hypotheses_equal_the_nbest_list(server, browser, model):
    panel, api = _explore(browser, server, model)
    assert api["beam"] == 2 and api["steps"]["tree"]
    player = _player(browser, panel)
    nbest = [li.get_attribute("textContent") for li in panel.find_elements(By.CSS_SELECTOR, ".nbest li")]
    ended = player.find_elements(By.CSS_SELECTOR, "ol.ended li")
    assert len(nbest) == 2 and len(ended) >= len(nbest)
    assert [li.get_attribute("textContent") for li in ended[:len(nbest)]] == nbest
    assert all("in-nbest" in li.get_attribute("class") for li in ended[:len(nbest)])
    tree = api["steps"]["tree"]
    nodes = player.find_elements(By.CSS_SELECTOR, "svg.beam-tree g.node")
    assert len(nodes) == sum(len(s["candidates"]) for s in tree)
    assert [n.get_attribute("data-status") for n in nodes] == [c["status"] for s in tree for c in s["candidates"]]
    # the highlighted path is the best hypothesis: its tokens are the translation's
    best = browser.execute_script(
        "return [...arguments[0].querySelectorAll('svg.beam-tree g.node.best text')].map(t => t.textContent);", player)
    assert best == [c["label"][:6] + "\u2026" if len(c["label"]) > 7 else c["label"] for c in api["choices"]]
    # a click on a node goes to its step (the player's steps are the best hypothesis': the search may run longer)
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}));", nodes[-1])
    last = int(nodes[-1].get_attribute("data-step"))
    assert int(player.get_attribute("data-step")) == min(last, len(api["choices"]) - 1)
    browser.execute_script("arguments[0].dispatchEvent(new MouseEvent('click', {bubbles: true}));", nodes[0])
    assert player.get_attribute("data-step") == "0"


def test_greedy_has_no_tree_and_the_lm_no_player(server, browser):
    panel, api = _explore(browser, server, "rnn")
    Select(panel.find_element(By.CSS_SELECTOR, "select.model")).select_by_value("rnn")
    browser.execute_script("arguments[0].value = 1;", panel.find_element(By.CSS_SELECTOR, "input.beam"))
    browser.find_element(By.ID, "translate").click()
    WebDriverWait(browser, 60).until(lambda d: panel.get_attribute("data-state") == "done"
                                     and panel.get_attribute("data-rendered") == "1")
    player = _player(browser, panel)
    assert not player.find_elements(By.CSS_SELECTOR, "svg.beam-tree")
    assert "greedy search" in player.text
    panel, api = _explore(browser, server, "lm", "the cat")
    assert api["steps"] is None
    assert not panel.find_element(By.CSS_SELECTOR, '.views button[data-view="player"]').is_displayed()


def test_step_player_in_the_inline_page_offline(browser, tmp_path):
    """The notebook's inline explorer (`Exploration.save_html`, opened from a file: no server) carries the steps:
    the player reaches the last step with the translation's tokens and draws the beam tree."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parents[1]))
    from test_explore import SENTENCE, tiny_translator

    from attnlab.runs.views import Exploration
    from attnlab.families.translation import explore_translation

    ex = Exploration.of(explore_translation(tiny_translator("pre"), SENTENCE, beam=3))
    page = ex.save_html(tmp_path / "explorer.html")
    browser.get(page.as_uri())
    WebDriverWait(browser, 60).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready") == "1")
    panel = browser.find_element(By.ID, "panel-0")
    player = _player(browser, panel)
    _click(player, "last")
    state = _step_state(browser, player)
    assert state["step"] == len(ex.choices) - 1 and state["chosen"] == ex.choices[-1].piece
    assert len(state["shown"]) == len(ex.choices) and len(state["strip"]) == 16
    ended = [li.get_attribute("textContent") for li in player.find_elements(By.CSS_SELECTOR, "ol.ended li")]
    assert ended[:3] == [li.get_attribute("textContent") for li in panel.find_elements(By.CSS_SELECTOR, ".nbest li")]
