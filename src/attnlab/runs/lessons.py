"""What the lecture notebooks (notebooks/*.ipynb) show besides the API: the quick-mode banner at the top of a
notebook run with small budgets, and the checks of the exercises that close each notebook.

A check takes the reader's answer and the exercise's givens, computes the expected value itself, by another
route than the notebook's text (a closed form, torch's own modules, sacrebleu), and returns a `Verdict` that
the notebook displays: right, or not yet with a hint. A known mistake (the raw scores normalised instead of
their exponentials, the scale forgotten, torch's two GRU biases counted as Keras' one) gets its own hint; the
expected value is never shown before the answer is right. Nothing here raises on an answer: `...` (not
answered yet), a string, a wrong shape are verdicts too.

    from attnlab.runs import lessons
    lessons.softmax_weights([0.66, 0.24, 0.10], scores=[2.0, 1.0, 0.1])   # right: a Verdict, shown inline
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any, Sequence

import torch
import torch.nn.functional as F
from sacrebleu.metrics.bleu import BLEU

NOT_ANSWERED = "replace `...` by your answer, then run the answer cell and this one again"


# ---------------------------------------------------------------------------------------------- what is shown
@dataclass(frozen=True)
class Verdict:
    """The outcome of one exercise's check: `right`, and a message (the value when right, a hint when not)."""

    exercise: str
    right: bool
    message: str

    def __repr__(self) -> str:
        return f"{'✓' if self.right else '✗'} Exercise {self.exercise}: {'right' if self.right else 'not yet'}. " \
               f"{self.message}"

    def _repr_html_(self) -> str:
        colour, mark, word = ("#2e7d32", "✓", "right") if self.right else ("#c62828", "✗", "not yet")
        return (f'<div class="attnlab-verdict" data-right="{int(self.right)}" style="border-left: 5px solid '
                f'{colour}; padding: 4px 10px; margin: 4px 0"><b style="color: {colour}">{mark} Exercise '
                f'{html.escape(self.exercise)}: {word}.</b> {html.escape(self.message)}</div>')


@dataclass(frozen=True)
class Banner:
    """A notice shown at the top of a notebook's outputs."""

    text: str

    def __repr__(self) -> str:
        return f"*** {self.text} ***"

    def _repr_html_(self) -> str:
        return ('<div class="attnlab-quick-banner" style="background: #fff3cd; color: #5c3c00; border: 2px solid '
                f'#e0a800; padding: 8px 12px; font-weight: bold">{html.escape(self.text)}</div>')


QUICK_MODE = "QUICK MODE (ATTNLAB_QUICK=1): "


def quick_mode_banner(text: str | None = None) -> Banner:
    """What a notebook run in quick mode (ATTNLAB_QUICK=1: the test suite's budgets) says before anything else.
    text: what quick mode shrinks in this notebook and which of its figures then mean nothing (a notebook that
    loads a shipped trained model shows that model's real maps in quick mode too); default: all of them."""
    return Banner(QUICK_MODE + (text or "every budget is shrunk to seconds so that the notebook runs in the test "
                                "suite. The models are barely trained: the translations, scores, curves and "
                                "attention maps below mean nothing. Run it without ATTNLAB_QUICK (make notebooks) "
                                "for the lecture's figures."))


# ---------------------------------------------------------------------------------------------- judging
def as_numbers(answer: Any) -> torch.Tensor | None:
    """The answer as a float64 tensor (a number, a list, a tensor, an array), or None if it is not numbers."""
    if isinstance(answer, (str, bytes, bool)) or answer is None or answer is Ellipsis:
        return None
    try:
        t = torch.as_tensor(answer.detach() if isinstance(answer, torch.Tensor) else answer, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        return None
    return t if bool(torch.isfinite(t).all()) else None


def close(a: torch.Tensor, b: torch.Tensor, tol: float) -> bool:
    return a.shape == b.shape and bool(((a - b).abs() <= tol * (1 + b.abs())).all())


def judge(exercise: str, answer: Any, expected: Any, hint: str, mistakes: Sequence[tuple[Any, str]] = (),
          tol: float = 2e-3, show: str | None = None) -> Verdict:
    """Compares `answer` with `expected` (numbers of one shape, within tol relative to 1 + |expected|); a wrong
    answer close to a known mistake's value gets that mistake's hint, any other the general `hint`. show: how a
    right answer is written back (default: the expected value)."""
    if answer is Ellipsis:
        return Verdict(exercise, False, NOT_ANSWERED)
    want = torch.as_tensor(expected, dtype=torch.float64)
    got = as_numbers(answer)
    if got is None:
        kind = "a number" if want.dim() == 0 else f"numbers of shape {tuple(want.shape)} (a list or a tensor)"
        return Verdict(exercise, False, f"expected {kind}, got {type(answer).__name__} {str(answer)[:60]!r}")
    if got.shape != want.shape and got.numel() == want.numel() == 1:
        got = got.reshape(want.shape)
    if got.shape != want.shape:
        return Verdict(exercise, False, f"expected shape {tuple(want.shape)}, got {tuple(got.shape)}. Hint: {hint}")
    if close(got, want, tol):
        return Verdict(exercise, True, show or f"= {fmt(want)}")
    for value, why in mistakes:
        if close(got, torch.as_tensor(value, dtype=torch.float64), tol):
            return Verdict(exercise, False, f"Hint: {why}")
    return Verdict(exercise, False, f"Hint: {hint}")


def fmt(t: torch.Tensor) -> str:
    if t.dim() == 0:
        x = float(t)
        return f"{int(x):,}" if x == int(x) and abs(x) < 1e15 else f"{x:.4g}"
    return str([[round(float(v), 4) for v in row] for row in t] if t.dim() == 2 else [round(float(v), 4) for v in t])


def numbers(values: Any) -> torch.Tensor:
    """The givens of an exercise as float64 (what the notebook set up: a list or a tensor)."""
    return torch.as_tensor(values.detach() if isinstance(values, torch.Tensor) else values, dtype=torch.float64)


def parameters(module: torch.nn.Module) -> int:
    return sum(p.numel() for p in module.parameters())


# ---------------------------------------------------------------------------------------------- 1: from scratch
def softmax_weights(answer: Any, scores: Sequence[float]) -> Verdict:
    """1.1: the attention weights alpha_u = exp(e_u) / sum_v exp(e_v) of one row of scores."""
    e = [float(x) for x in numbers(scores)]
    z = sum(math.exp(x) for x in e)
    return judge("1.1", answer, [math.exp(x) / z for x in e],
                 "alpha_u = exp(e_u) / sum_v exp(e_v): exponentiate every score, then divide by their sum "
                 "(the weights sum to 1)",
                 [([x / sum(e) for x in e], "you divided the scores by their sum; the softmax divides their "
                                           "exponentials by the sum of the exponentials")])


def scaled_weight(answer: Any, dot_products: Sequence[float], d_k: int) -> Verdict:
    """1.2: the weight of the first key under the scaled dot product, softmax(q.k / sqrt(d_k))."""
    dots = numbers(dot_products)
    return judge("1.2", answer, torch.softmax(dots / math.sqrt(d_k), 0)[0],
                 "divide each dot product by sqrt(d_k), then take the softmax over the keys",
                 [(torch.softmax(dots, 0)[0], "you forgot the scale: divide the dot products by sqrt(d_k) first"),
                  (torch.softmax(dots / d_k, 0)[0], "divide by the square root of d_k, not by d_k itself")])


def context_vector(answer: Any, weights: Sequence[float], values: Any) -> Verdict:
    """1.3: the context c = sum_u alpha_u v_u of one query (weights (S,), values (S, D))."""
    a, v = numbers(weights), numbers(values)
    expected = torch.zeros(v.size(1), dtype=torch.float64)
    for u in range(v.size(0)):
        expected += a[u] * v[u]
    return judge("1.3", answer, expected,
                 "c is a vector of the values' size: sum over the keys u of alpha_u times v_u",
                 [(v.mean(0), "that is the plain mean of the values; weigh each value by its alpha_u"),
                  (v[int(a.argmax())], "that is the value with the largest weight alone; attention mixes all of "
                                       "them, each by its weight")])


# ---------------------------------------------------------------------------------------------- 2: seq2seq
def gru_parameters(answer: Any, input_size: int, hidden_size: int) -> Verdict:
    """2.1: the parameters of one torch.nn.GRU layer (counted on torch's own module)."""
    E, H = input_size, hidden_size
    return judge("2.1", answer, parameters(torch.nn.GRU(E, H)),
                 "three blocks (reset gate, update gate, candidate), each with W (H x E), U (H x H) and biases",
                 [(3 * (H * E + H * H + H), "torch's GRU has two bias vectors per block, b_ih and b_hh"),
                  (3 * (H * E + H * H), "the biases count too: two vectors of H per block in torch"),
                  (4 * (H * E + H * H + 2 * H), "that is an LSTM (4 blocks); a GRU has 3")], tol=0)


def brevity_penalty(answer: Any, hyp_len: int, ref_len: int) -> Verdict:
    """2.2: BLEU's brevity penalty of a corpus (sacrebleu's own)."""
    bp = BLEU.compute_bleu([1, 1, 1, 1], [1, 1, 1, 1], hyp_len, ref_len).bp
    return judge("2.2", answer, bp, "BP = 1 if the hypotheses are longer than the references, else exp(1 - r / c)",
                 [(math.exp(1 - hyp_len / ref_len), "the ratio is upside down: exp(1 - r / c), r the reference "
                                                    "length, c the hypothesis length"),
                  (1.0, "the penalty is 1 only when the hypotheses are at least as long as the references")])


def sequence_log_prob(answer: Any, probs: Sequence[float]) -> Verdict:
    """2.3: the score of a hypothesis, log p(y) = sum_t log p(y_t | y_<t, x) (natural logarithm)."""
    p = [float(x) for x in numbers(probs)]
    return judge("2.3", answer, sum(math.log(x) for x in p),
                 "the probabilities of the steps multiply, so their logarithms add: sum_t log p_t",
                 [(math.prod(p), "that is p(y) itself; beam search scores its logarithm (a sum, never underflows)"),
                  (sum(math.log10(x) for x in p), "natural logarithms (math.log), not base 10"),
                  (sum(math.log2(x) for x in p), "natural logarithms (math.log), not base 2")])


# ---------------------------------------------------------------------------------------------- 3: Transformer
def attention_parameters(answer: Any, d_model: int, h: int) -> Verdict:
    """3.1: the parameters of a multi-head attention layer (counted on torch.nn.MultiheadAttention)."""
    D = d_model
    return judge("3.1", answer, parameters(torch.nn.MultiheadAttention(D, h)),
                 "four d_model x d_model projections (W^Q, W^K, W^V, W^O), each with a bias",
                 [(4 * D * D, "each of the four projections has a bias of d_model too"),
                  (h * 4 * (D * D + D), "the heads split d_model between them (d_k = d_model / h): more heads add "
                                        "no parameters"),
                  (3 * (D * D + D), "do not forget the output projection W^O")], tol=0)


def positional_encoding(answer: Any, pos: int, dim: int, d_model: int) -> Verdict:
    """3.2: one entry PE[pos, dim] of the sinusoidal encoding (Vaswani et al. 2017, section 3.5)."""
    i2 = dim - dim % 2  # dimensions 2i and 2i + 1 share the wavelength 10000^(2i / d_model)
    angle = pos / 10000 ** (i2 / d_model)
    expected = math.sin(angle) if dim % 2 == 0 else math.cos(angle)
    return judge("3.2", answer, expected,
                 "PE[pos, 2i] = sin(pos / 10000^(2i / d_model)), PE[pos, 2i + 1] = cos(the same angle)",
                 [(math.cos(angle) if dim % 2 == 0 else math.sin(angle),
                   "even dimensions take the sine, odd ones the cosine"),
                  (math.sin(pos / 10000 ** (i2 / 2 / d_model)), "the exponent is 2i / d_model with 2i the even "
                                                                 "dimension itself, not i / d_model")])


def causal_pairs(answer: Any, T: int) -> Verdict:
    """3.3: how many (query, key) pairs a causal mask of T positions lets attend."""
    return judge("3.3", answer, int(torch.ones(T, T).tril().sum()),
                 "position t sees the positions 1..t, itself included: count them for every t",
                 [(T * T, "the mask hides every key after the query's position"),
                  (T * (T - 1) // 2, "a position attends to itself too")], tol=0)


# ---------------------------------------------------------------------------------------------- 4: LMs
def perplexity(answer: Any, loss: float) -> Verdict:
    """4.1: the perplexity of a mean cross-entropy loss in nats, exp(loss)."""
    return judge("4.1", answer, math.exp(loss), "perplexity = exp(mean negative log-likelihood per token)",
                 [(2 ** loss, "attnlab's losses are natural logarithms (nats): exp(loss), not 2 ** loss"),
                  (1 / loss, "perplexity grows with the loss: exp(loss)")])


def temperature_probability(answer: Any, logits: Sequence[float], tau: float, index: int = 0) -> Verdict:
    """4.2: the probability of one token after sampling's temperature, softmax(logits / tau)[index]."""
    z = numbers(logits)
    return judge("4.2", answer, torch.softmax(z / tau, 0)[index],
                 "divide the logits by the temperature, then take the softmax",
                 [(torch.softmax(z * tau, 0)[index], "divide the logits by tau, do not multiply them"),
                  (torch.softmax(z, 0)[index], "that is the probability at temperature 1; divide the logits by tau "
                                               "first")])


def top_p_kept(answer: Any, probs: Sequence[float], p: float) -> Verdict:
    """4.3: how many tokens nucleus (top-p) sampling keeps: the fewest most likely whose mass reaches p."""
    mass, kept = 0.0, 0
    for q in sorted((float(x) for x in numbers(probs)), reverse=True):
        kept += 1
        mass += q
        if mass >= p - 1e-12:
            break
    return judge("4.3", answer, kept, "sort the probabilities, largest first, and keep tokens until their sum "
                                      "reaches p (the token that crosses p stays)",
                 [(kept - 1, "the token whose probability makes the sum cross p is kept too"),
                  (sum(float(x) >= p for x in numbers(probs)), "top-p sums the probabilities; it does not compare "
                                                               "each one with p")], tol=0)


# ---------------------------------------------------------------------------------------------- 5: IF3270
def keras_recurrent_parameters(answer: Any, cell: str, inputs: int, units: int) -> Verdict:
    """5.1 (SimpleRNN) and 5.2 (LSTM): the parameters Keras' model.summary() lists for one recurrent layer: torch's
    module, less its second bias vector (Keras keeps one per gate)."""
    blocks, module, exercise = {"SimpleRNN": (1, torch.nn.RNN, "5.1"), "LSTM": (4, torch.nn.LSTM, "5.2")}[cell]
    torch_count = parameters(module(inputs, units))
    return judge(exercise, answer, torch_count - blocks * units,
                 f"{blocks} block(s) of W (units x inputs), U (units x units) and one bias of units",
                 [(torch_count, "that is torch's count, with two bias vectors per block; Keras keeps one"),
                  (blocks * units * (inputs + units), "the bias counts too: one vector of units per block")], tol=0)


def window_count(answer: Any, length: int, window: int) -> Verdict:
    """5.3: how many (window, next value) examples a series of `length` values gives."""
    count = sum(1 for start in range(length) if start + window < length)  # the value after the window exists
    return judge("5.3", answer, count, "a window of T values needs the value after it as its target",
                 [(length - window + 1, "the last window has no value after it to predict"),
                  (length // window, "the windows overlap: one starts at every position")], tol=0)


# ---------------------------------------------------------------------------------------------- 6: pairs
def cosine(answer: Any, u: Sequence[float], v: Sequence[float]) -> Verdict:
    """6.1: the cosine similarity of two sentence vectors."""
    a, b = numbers(u), numbers(v)
    return judge("6.1", answer, F.cosine_similarity(a, b, dim=0), "cos(u, v) = u . v / (|u| |v|)",
                 [(a @ b, "that is the dot product; divide it by both norms"),
                  ((a - b).norm(), "that is the distance between them, not the cosine")])


def alignment_weights(answer: Any, e: Any) -> Verdict:
    """6.2: the weights softmax_j(e_ij) with which beta_i mixes the words of b (rows: words of a)."""
    s = numbers(e)
    expected = s.exp() / s.exp().sum(1, keepdim=True)
    return judge("6.2", answer, expected, "beta_i mixes the words b_j: the softmax runs over j, along each row",
                 [(torch.softmax(s, 0), "that softmax runs over i (down the columns): it gives alpha_j's weights; "
                                        "beta_i's rows sum to 1 over the words of b")])


def threshold_accuracy(answer: Any, cos: Sequence[float], labels: Sequence[int], threshold: float) -> Verdict:
    """6.3: the accuracy of calling a pair a paraphrase when its cosine is above the threshold."""
    right = [int(float(c) > threshold) == int(y) for c, y in zip(cos, labels)]
    acc = sum(right) / len(right)
    return judge("6.3", answer, acc, "predict 1 where cos > threshold, 0 elsewhere, and count the agreements",
                 [(1 - acc, "that is the error rate; accuracy is the share of pairs predicted right"),
                  (sum(right), "give the share of pairs (between 0 and 1), not the count")])
