"""`attnlab serve`: a small web app to translate with trained runs and look at their attention.

A FastAPI app with a JSON API and one static page (`attnlab/static/`, no CDN assets, works offline):

    GET  /api/models      the served models (by name: clients never send a path), their attention shape
    POST /api/translate   {"model", "sentence", "beam", "n_best"} -> tokens, translation, n-best, cross-attention
    POST /api/explore     {"model", "sentence", "sentence_b", "beam", "max_new"} -> every attention map of the
                          input (`attnlab.runs.explore`): shapes and labels, n-best, token probabilities, and an id
    GET  /api/explore/{id}/weights?map=&layer=&words=   one layer of one map (heads x rows x columns, rounded)
    GET  /api/explore/{id}/neuron?map=&layer=&head=     one head's queries, keys and pre-softmax scores
    GET  /api/explore/{id}/steps?layer=                 a translation's context vector at each decoding step
    GET  /openapi.json    the API's OpenAPI schema

Translation runs (RNN, Transformer) are translated and explored; language-model runs (a prompt and its greedy
continuation) and sentence-pair runs (two sentences) are explored. An exploration's maps stay on the server
(`Explorations`: the most recently used within `explore_memory` bytes; a dropped one answers 410) and are fetched
a layer at a time, so a long input never sends every layer and head at once. Explorations record the shared
model with hooks bound to their own thread (`attnlab.families.explorer.this_thread_only`), so any number of them run
beside each other and beside translations, and each answer is the one its request gets alone.

Decoding is `attnlab.decode.translate.Translator` (the same search as `attnlab translate`). Fair service: each model
has two decoding lanes, each one worker thread with a bounded FIFO queue (`Lane`): a request's cost is beam x
source tokens, and requests up to `LIGHT_COST` go to the light lane, heavier ones to the heavy lane, so a crowd
of heavy requests cannot make light ones wait behind them. Batch invariance: a request's answer (translation,
n-best, score, attention) is bit for bit the one it gets alone, whatever else is served with it: every distinct
sentence is decoded alone (`decode_alone`), and waiting requests for the same sentence and beam share one
decode (up to 16 light or 4 heavy requests at a time). A full queue, or a
request still unanswered after `timeout` seconds, gets 503 with Retry-After. GET /healthz reports the queues.

Limits (all answered with a 4xx JSON body {"error": "...", ...}): request bodies over `max_body` bytes (413),
malformed JSON (400), a missing/empty/over-long sentence, a sentence that is not valid Unicode (a lone surrogate)
or a bad beam (422), more source tokens than the run's decode.max_src_tokens (422), an unknown model name (404).
A bug is a JSON 500, logged. HTTP: HEAD wherever GET, OPTIONS (204 with `Allow`), `Allow` on every 405, 415 for a
body that is not declared JSON (no Content-Type included); the OpenAPI schema names the served models (an enum)
and bounds the sentence. Connections
(`serve`, `guards.guarded_h11`): a connection that has not sent its request head within `header_timeout` seconds
(of opening or of its last response) is closed, idle keep-alive connections after 5 s; a body not arrived within
`body_timeout` seconds gets 408; a head over 16 KiB 431; one client (address) holds at most
`max_connections_per_client` connections, and past `max_connections` the connection whose request has been
incomplete the longest is closed to make room; every refusal is JSON, a 503 with Retry-After; repeated log
messages are rate-limited. Behind a reverse proxy: docs/deployment.md.
"""

from __future__ import annotations

import collections
import logging
import math
import secrets
import threading
import time
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Sequence

import uvicorn
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnlab.app.guards import (LOOPBACK_HOSTS, MAX_LINGERING, BodyLimit, ConcurrencyLimit, HostCheck, HttpMethods,
                                RateLimit, allowed_methods, guarded_h11, json_error, listen, raise_fd_limit,
                                served_hosts)
from attnlab.core.errors import AttnlabError
from attnlab.core.plotting import clean_piece
from attnlab.data.corpus import normalize
from attnlab.decode.serving import Busy, Lane, each_alone
from attnlab.decode.translate import CTranslate2Translator, Translator
from attnlab.families.base import LoadedRun
from attnlab.families.table import explorer
from attnlab.kernels.memory import release_freed_memory
from attnlab.runs import views
from attnlab.runs.run import Run, load
from attnlab.runs.shipped import length_scores, run_path
from attnlab.runs.workflow import run_config

log = logging.getLogger("attnlab")

SERVE_MAX_BEAM = 12  # a shared server's own cap, below the CLI's and the API's config.MAX_BEAM (256): one client
# cannot hold a lane for long
MAX_NEW = 200  # tokens a language model may generate for one exploration
EXPLORE_MEMORY = 256 * 2**20  # bytes of explorations kept for their weights (a long verse through a 6-layer,
# 8-head Transformer holds ~20 MB; a short one or an RNN's a few KB)
MAX_DROPPED = 100_000  # ids of dropped explorations remembered, to answer 410 rather than 404
TRIM_EVERY = 1.0  # seconds: the least time between two `release_freed_memory` calls of the exploration store
LIGHT_COST = 5 * 64  # beam x source tokens: up to beam 5 on a 64-token sentence is a light request
STATIC_DIR = Path(str(files("attnlab") / "static"))
START_VIEWS = ("explorer", "compare")  # what the page opens on (`create_app`)


# ---------------------------------------------------------------------------------------------- schema
class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # an integer is a JSON integer: not true, not "3"

    model: str = Field(description="a model name from GET /api/models", max_length=200)
    sentence: str = Field(description="the source sentence (normalized like `attnlab translate` input)")
    beam: int | None = Field(None, ge=1, le=SERVE_MAX_BEAM, description="beam size; 1 = greedy (default: the run's)")
    n_best: int = Field(1, ge=1, le=SERVE_MAX_BEAM, description="hypotheses to return in nbest, at most the beam size (a "
                                                          "larger n_best returns beam hypotheses)")


class ErrorBody(BaseModel):
    error: str = Field(description="what was wrong, in one line")


class NBestEntry(BaseModel):
    translation: str
    score: float


class TranslateResponse(BaseModel):
    model: str
    sentence: str = Field(description="the sentence as translated (whitespace-normalized)")
    translation: str
    beam: int
    score: float = Field(description="the search's length-penalised log-probability")
    nbest: list[NBestEntry] = Field(description="the n_best hypotheses, best first (the first is `translation`)")
    src_tokens: list[str] = Field(description="source pieces incl. </s>: the attention's columns")
    tgt_tokens: list[str] = Field(description="output pieces, + </s> when finished: the attention's rows")
    src_labels: list[str] = Field(description="readable labels of src_tokens (word mark shown as _)")
    tgt_labels: list[str]
    layers: int = Field(description="decoder layers with cross-attention (1 for RNN attention, 0 for none)")
    heads: int
    attention: list[list[list[list[float]]]] | None = Field(
        description="cross-attention weights [layer][head][target token][source token]; null without attention")
    seconds: float


class ExploreRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)  # an integer is a JSON integer: not true, not "3"

    model: str = Field(description="a model name from GET /api/models", max_length=200)
    sentence: str = Field(description="the source sentence, the language model's prompt, or a pair's sentence a")
    sentence_b: str | None = Field(None, description="sentence b of a pair (sentence-pair runs only)")
    beam: int | None = Field(None, ge=1, le=SERVE_MAX_BEAM, description="translation: beam size (default: the run's)")
    max_new: int = Field(40, ge=1, le=MAX_NEW, description="language model: new tokens at most (greedy)")


class LengthScore(BaseModel):
    bucket: str = Field(description="source length in words, e.g. 11-20 or 31+")
    bleu: float
    sentences: int


class ModelInfo(BaseModel):
    name: str
    family: str
    kind: str = Field("translation", description="translation, generation (a language model: give a prompt) "
                                                 "or pair (give sentence and sentence_b)")
    attention: str = Field(description="RNN attention type, 'multi-head' for Transformers, 'none'; with the "
                                       "CTranslate2 engine the last layer's attention, mean of heads")
    layers: int
    heads: int
    beam: int = Field(description="the run's default beam size")
    max_src_tokens: int
    max_chars: int
    parameters: int
    trained_on: list[str] = Field(default_factory=list,
                                  description="a Bible translation run's English renderings (data.english: kjv, "
                                              "web), the headline first; [] for other corpora and families")
    bleu_by_length: list[LengthScore] = Field(
        default_factory=list, description="test BLEU by source length: a shipped model's from its card (card.json), "
                                          "another run's from its evaluation (eval/test.json: `attnlab evaluate "
                                          "RUN`); [] when the run has none")


# ---------------------------------------------------------------------------------------------- models
@dataclass
class ServedModel:
    info: ModelInfo
    translator: Translator | CTranslate2Translator | None  # translation runs (CTranslate2 or PyTorch)
    light: Lane
    heavy: Lane
    run: Run | None = None  # the run (`attnlab.runs.run.Run`, the API's `attnlab.Run`): explorations go through it

    def cost(self, sentence: str, sentence_b: str | None = None, beam: int = 1, max_new: int = 0) -> int:
        """Beam x tokens of a request (which lane it goes to), as the run's family counts an input's tokens
        (`attnlab.families.base.Explorer.tokens`); an AttnlabError when it has too many or misses a part."""
        loaded = self.run.loaded
        return beam * loaded.family.explorer.tokens(loaded, sentence, sentence_b, max_new)

    def explore(self, items: list[tuple[str, str | None, int, int]]) -> list[views.Exploration | Exception]:
        """Explorations of (sentence, sentence_b, beam, max_new) items, one at a time (identical ones once); an
        item that fails gets its exception, its batch mates their explorations (`serving.each_alone`)."""
        return each_alone(lambda item: self.run.explore(*item), items)


def served_info(name: str, run: LoadedRun, max_chars: int) -> ModelInfo:
    """The ModelInfo of a loaded run of a family the explorer shows (its `Explorer.facts`); a family without
    explorer hooks (series) is refused."""
    facts = explorer(run.family, run.run_dir).facts(run)
    parameters = sum(p.numel() for p in {id(p): p for p in run.model.parameters()}.values())
    trained_on = run.renderings
    return ModelInfo(name=name, family=facts.model, kind=facts.kind, attention=facts.attention, layers=facts.layers,
                     heads=facts.heads, beam=facts.beam, max_src_tokens=facts.max_tokens, max_chars=max_chars,
                     parameters=parameters, trained_on=trained_on,
                     bleu_by_length=[LengthScore(**r) for r in length_scores(run.run_dir)])


def load_models(run_dirs: list[Path], checkpoint: str = "best", device: str = "cpu", max_chars: int = 1000,
                engine: str = "torch") -> dict[str, ServedModel]:
    """Loads each run once; a model's name is its directory name (the full path when two names clash), or
    `pretrained:NAME` for a shipped model (`attnlab.runs.shipped`).
    engine "ctranslate2": Transformer runs decode with their CTranslate2 export (RUN_DIR/ctranslate2-<checkpoint>-
    float32, exported on first use), and their attention is the last decoder layer's, averaged over heads."""
    models: dict[str, ServedModel] = {}
    seen: set[Path] = set()
    for given in map(Path, run_dirs):
        name = given.name if given.name not in models else str(given)  # pretrained:NAME keeps that name
        run = run_path(given)
        if run.resolve() in seen:
            raise AttnlabError(f"{given} is given twice")
        seen.add(run.resolve())
        family, _ = run_config(run)
        engine_here = engine if engine == "ctranslate2" and family.export == "translator" else "torch"
        loaded = load(run, checkpoint, device, engine_here)
        info = served_info(name, loaded.loaded, max_chars)
        translator = loaded.translator if "translate" in family.abilities else None
        if engine_here == "ctranslate2":
            info.attention, info.layers, info.heads = "last layer, mean of heads (CTranslate2)", 1, 1
        served = ServedModel(info, translator, None, None, loaded)

        def run_batch(key, items: list, translator: Translator = translator, served: ServedModel = served) -> list:
            if key[0] == "explore":  # ("explore", beam): explorations, one input at a time
                return served.explore(items)
            return decode_alone(translator, items, key[1], key[2])  # ("translate", beam, n_best, sentence)

        served.light = Lane(f"{name} light", 64, run_batch, window=0.0, max_batch=16)
        served.heavy = Lane(f"{name} heavy", 8, run_batch, window=0.0, max_batch=4)
        models[name] = served
    if not models:
        raise AttnlabError("give at least one run directory to serve")
    return models


def decode_alone(translator: Translator, sentences: list[str], beam: int, n_best: int = 1) -> list:
    """The n_best translations of each sentence with their attention, every distinct sentence decoded alone (a batch
    of one), identical ones once: batch invariance. A sentence padded into a batch with others goes through
    matrix products and softmaxes of other shapes, whose summation order (and so the last bits of every score
    and weight, and at a near-tie the chosen token) depends on the company; alone, its shapes are its own, and
    its answer is bit for bit the one `attnlab translate` gives for it alone, whatever else is being served. A
    sentence whose decode fails gets the exception (its requests fail, not their batch mates)."""
    return each_alone(lambda s: translator.translate([s], beam_size=beam, n_best=n_best, need_weights=True)[0],
                      sentences)


def in_lane(served: ServedModel, cost: int, key: object, item: object, timeout: float) -> object:
    """The answer to one item from the model's light or heavy lane by its cost; `Busy` if the lane is full or the
    answer takes longer than `timeout` seconds."""
    t0 = time.perf_counter()
    lane = served.light if cost <= LIGHT_COST else served.heavy
    future = lane.submit(key, item)
    try:
        return future.result(timeout=max(timeout - (time.perf_counter() - t0), 0.0))
    except FutureTimeout:
        future.cancel()  # skipped if it has not started; a running search cannot be stopped and is discarded
        raise Busy(f"no answer within {timeout:g} s ({lane.name} lane)", lane.retry_after()) from None


def translate_one(served: ServedModel, sentence: str, beam: int | None, timeout: float = 60.0, n_best: int = 1
                  ) -> TranslateResponse:
    """Translate one (normalized, non-empty) sentence with its attention as [layer][head][T][S], in the model's
    light or heavy lane by its cost (beam x source tokens)."""
    if served.translator is None:
        raise AttnlabError(f"{served.info.name} is a {served.info.kind} model, not a translation one: use POST "
                           "/api/explore")
    beam = served.info.beam if beam is None else beam
    if n_best > beam:
        raise AttnlabError(f"n_best ({n_best}) must not exceed the beam size ({beam})")
    t0 = time.perf_counter()
    cost = served.cost(sentence, beam=beam)  # refuses too many tokens (AttnlabError)
    nbest = in_lane(served, cost, ("translate", beam, n_best, sentence), sentence, timeout)  # a key per request
    t = nbest[0]
    seconds = time.perf_counter() - t0
    attention = None
    if t.attention is not None:
        att = t.attention
        if att.dim() == 2:  # RNN: (T, S) -> (1, 1, T, S)
            att = att[None, None]
        else:  # Transformer: (T, L, H, S) -> (L, H, T, S)
            att = att.permute(1, 2, 0, 3)
        attention = att.round(decimals=4).tolist()
    return TranslateResponse(model=served.info.name, sentence=sentence, translation=t.text, beam=beam,
                             score=t.score, nbest=[NBestEntry(translation=h.text, score=h.score) for h in nbest],
                             src_tokens=t.src_tokens, tgt_tokens=t.tgt_tokens,
                             src_labels=[clean_piece(s) for s in t.src_tokens],
                             tgt_labels=[clean_piece(s) for s in t.tgt_tokens],
                             layers=served.info.layers if attention else 0,
                             heads=served.info.heads if attention else 0, attention=attention, seconds=seconds)


class Explorations:
    """The explorations the page still fetches weights of (after POST /api/explore), by a random id, kept within a
    memory budget: the least recently used are dropped first once their tensors (`views.Exploration.nbytes`) pass
    `budget` bytes. An id that was dropped answers 410 (explore again), one never given 404."""

    def __init__(self, budget: int = EXPLORE_MEMORY) -> None:
        self.budget = budget
        self._items: collections.OrderedDict[str, tuple[views.Exploration, int]] = collections.OrderedDict()
        self._dropped: collections.OrderedDict[str, None] = collections.OrderedDict()  # the last MAX_DROPPED ids
        self._bytes = 0
        self._trimmed = float("-inf")  # time.monotonic() of the last release_freed_memory
        self._lock = threading.Lock()

    def add(self, ex: views.Exploration) -> str:
        """Keeps `ex` under a new id, dropping the least recently used beyond the budget; after a drop (at most
        every TRIM_EVERY s) malloc's free memory is given back (`release_freed_memory`), so that RSS follows what
        is kept (issue 47: the dropped explorations' objects lie between the kept ones)."""
        eid, size = secrets.token_hex(8), ex.nbytes()
        dropped = []
        with self._lock:
            self._items[eid] = (ex, size)
            self._bytes += size
            while self._bytes > self.budget and len(self._items) > 1:  # the newest is kept, whatever its size
                old, (gone, old_size) = self._items.popitem(last=False)
                dropped.append(gone)
                self._bytes -= old_size
                self._dropped[old] = None
                if len(self._dropped) > MAX_DROPPED:
                    self._dropped.popitem(last=False)
            trim = bool(dropped) and time.monotonic() - self._trimmed >= TRIM_EVERY
            if trim:
                self._trimmed = time.monotonic()
        if trim:
            dropped.clear()  # their last references: freed before the trim
            release_freed_memory()
        return eid

    def get(self, eid: str) -> views.Exploration:
        with self._lock:
            kept = self._items.get(eid)
            if kept is not None:
                self._items.move_to_end(eid)
                return kept[0]
            dropped = eid in self._dropped
        if dropped:
            raise HTTPException(410, f"exploration {eid[:40]!r} has expired (the server keeps the most recently used "
                                     f"explorations within {self.budget / 2**20:g} MiB): explore the input again")
        raise HTTPException(404, f"no exploration {eid[:40]!r}: explore the input again")

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes


def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return json_error(400, "malformed JSON in the request body")
    first = errors[0] if errors else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "body"
    detail = [{"loc": list(map(str, e.get("loc", ()))), "msg": e.get("msg", ""), "type": e.get("type", "")}
              for e in errors]
    return json_error(422, f"{where}: {first.get('msg', 'invalid request')}", detail=detail)


# ---------------------------------------------------------------------------------------------- app
def create_app(models: dict[str, ServedModel], max_chars: int = 1000, max_body: int = 64 * 1024,
               timeout: float = 60.0, explore_memory: int = EXPLORE_MEMORY, body_timeout: float = 10.0,
               max_requests: int = 4096, start: str = "explorer",
               allowed_hosts: Sequence[str] | None = None) -> FastAPI:
    """The FastAPI app serving `models` (see `load_models`) and the static explorer page, which opens on `start`
    ("explorer", or "compare": every translation model side by side, compare.js); `allowed_hosts`: the Host names
    answered (others get 421, `HostCheck`; None: no check); `timeout`: seconds a
    translation request may take, queueing included; `explore_memory`: bytes of explorations kept for the
    page's follow-up fetches (`Explorations`); `body_timeout`: seconds a request body may take to arrive (408);
    `max_requests`: requests in progress at once (beyond: 503 with Retry-After)."""
    # /docs and /redoc would load Swagger/ReDoc from a CDN: off, the page must work offline
    app = FastAPI(title="attnlab attention explorer", version=__import__("attnlab").__version__,
                  docs_url=None, redoc_url=None,
                  description="Translate with trained attnlab runs and get their cross-attention weights.")
    # a layer of weights is up to ~1 MB of JSON, several times smaller gzipped; level 1: level 9 is far slower
    app.add_middleware(GZipMiddleware, minimum_size=16 * 1024, compresslevel=1)
    app.add_middleware(BodyLimit, max_bytes=max_body, timeout=body_timeout)
    app.add_middleware(HttpMethods)  # HEAD as GET, OPTIONS
    app.add_middleware(ConcurrencyLimit, max_requests=max_requests)  # refuses before anything runs
    if allowed_hosts is not None:  # `serve` always passes them; a test's app may leave the check out
        app.add_middleware(HostCheck, allowed=allowed_hosts)  # the outermost: a foreign Host reaches nothing
    app.add_exception_handler(RequestValidationError, _validation_error)
    store = Explorations(explore_memory)

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if exc.status_code == 405:  # the routes' methods, from the top (a mount, /static, has its own scope)
            scope = {"type": "http", "path": request.scope["path"], "method": request.method,
                     "root_path": request.scope.get("app_root_path", "")}
            allow = ", ".join(allowed_methods(app.routes, scope))
            return json_error(405, f"method {request.method} is not allowed here; allowed: {allow}", {"Allow": allow})
        return json_error(exc.status_code, str(exc.detail), exc.headers)

    @app.exception_handler(Busy)
    def _busy(request: Request, exc: Busy) -> JSONResponse:
        return json_error(503, str(exc), headers={"Retry-After": str(exc.retry_after)}, retry_after=exc.retry_after)

    @app.exception_handler(Exception)
    def _bug(request: Request, exc: Exception) -> JSONResponse:  # a JSON 500, never a plain-text one
        log.error("internal error on %s: %s: %s", request.url.path, type(exc).__name__, exc)
        return json_error(500, "internal error")

    @app.get("/healthz")
    def healthz() -> dict:
        """Liveness and load: the requests waiting in each model's lanes."""
        return {"status": "ok", "models": {name: {"light_queued": m.light.queued(), "heavy_queued": m.heavy.queued()}
                                           for name, m in models.items()}}

    @app.get("/api/models", response_model=list[ModelInfo])
    def api_models() -> list[ModelInfo]:
        return [m.info for m in models.values()]

    def lookup(name: str) -> ServedModel:
        served = models.get(name)
        if served is None:
            raise HTTPException(404, f"unknown model {name!r}; served: {', '.join(models)}")
        return served

    def clean(text: str, what: str = "sentence") -> str:
        if len(text) > max_chars:
            raise HTTPException(422, f"{what} has {len(text):,} characters; the limit is {max_chars:,}")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as e:  # JSON allows lone surrogates ("\\ud800"); no tokenizer does
            raise HTTPException(422, f"{what} is not valid Unicode (character {e.start}: a lone surrogate)") \
                from None
        text = normalize(text)
        if not text:
            raise HTTPException(422, f"{what} is empty")
        return text

    def json_body(request: Request) -> None:
        """415 for a body that is not declared JSON: Content-Type application/json or application/*+json; a body
        without a Content-Type is refused too (FastAPI would not read it as JSON, and a 422 would blame the fields)."""
        kind = request.headers.get("content-type")
        if kind is None:
            raise HTTPException(415, "the body must be JSON: send Content-Type: application/json")
        media = kind.split(";")[0].strip().lower()
        if media != "application/json" and not (media.startswith("application/") and media.endswith("+json")):
            raise HTTPException(415, f"the body must be JSON (Content-Type: application/json), not {media!r}")

    errors = {400: {"description": "malformed JSON", "model": ErrorBody},
              404: {"description": "unknown model", "model": ErrorBody},
              408: {"description": f"the request body did not arrive within {body_timeout:g} s", "model": ErrorBody},
              413: {"description": "request body too large", "model": ErrorBody},
              415: {"description": "the body is not JSON (Content-Type)", "model": ErrorBody},
              422: {"description": "empty, too long or invalid sentence, bad beam size"},
              503: {"description": "the server or the model's queue is full, or the time limit passed; see "
                                   "Retry-After", "model": ErrorBody}}

    # a plain `def`: FastAPI runs it in its thread pool, so decoding never blocks the event loop
    @app.post("/api/translate", response_model=TranslateResponse, responses=errors,
              dependencies=[Depends(json_body)])
    def api_translate(req: TranslateRequest) -> TranslateResponse:
        served = lookup(req.model)
        sentence = clean(req.sentence)
        beam = served.info.beam if req.beam is None else req.beam
        try:
            return translate_one(served, sentence, beam, timeout, min(req.n_best, beam))
        except AttnlabError as e:  # e.g. more tokens than decode.max_src_tokens
            raise HTTPException(422, str(e)) from None

    @app.post("/api/explore", responses=errors, dependencies=[Depends(json_body)])
    def api_explore(req: ExploreRequest) -> JSONResponse:
        """Every attention map of one input (shapes and labels; weights are fetched per layer), the n-best list
        and each output token's probability with the top 5 alternatives."""
        served = lookup(req.model)
        sentence = clean(req.sentence)
        # sentence_b is checked wherever it is given (as the schema says), and read by pair models only
        sentence_b = None if req.sentence_b is None else clean(req.sentence_b, "sentence_b")
        sentence_b = sentence_b if served.run.loaded.family.explorer.sentences == 2 else None
        beam = served.info.beam if req.beam is None or served.translator is None else req.beam
        t0 = time.perf_counter()
        try:
            cost = served.cost(sentence, sentence_b, beam, req.max_new)
            ex = in_lane(served, cost, ("explore", beam), (sentence, sentence_b, beam, req.max_new), timeout)
        except AttnlabError as e:  # too many tokens, no sentence_b for a pair model
            raise HTTPException(422, str(e)) from None
        return JSONResponse({"id": store.add(ex), "model": req.model, "kind": served.info.kind,
                             "sentence": sentence, "sentence_b": sentence_b, "beam": beam, **views.summary(ex),
                             "seconds": time.perf_counter() - t0})

    @app.get("/api/explore/{eid}/weights", responses={404: {"description": "unknown or expired exploration id"},
                                                      422: {"description": "unknown map, layer out of range"}})
    def api_weights(eid: str, map_key: str = Query(alias="map", max_length=40), layer: int = 0,
                    words: bool = False) -> JSONResponse:
        """One layer of one map: weights [head][row][column] rounded to 4 decimals; words=true merges pieces."""
        try:
            return JSONResponse(views.weights_payload(store.get(eid), map_key, layer, words))
        except AttnlabError as e:
            raise HTTPException(422, str(e)) from None

    @app.get("/api/explore/{eid}/neuron", responses={404: {"description": "unknown or expired exploration id"},
                                                     422: {"description": "unknown map, layer or head out of range"}})
    def api_neuron(eid: str, map_key: str = Query(alias="map", max_length=40), layer: int = 0,
                   head: int = 0) -> JSONResponse:
        """One head's query and key vectors (W^Q x, W^K x), pre-softmax scores and weights (the neuron view)."""
        try:
            return JSONResponse(views.neuron_payload(store.get(eid), map_key, layer, head))
        except AttnlabError as e:
            raise HTTPException(422, str(e)) from None

    @app.get("/api/explore/{eid}/steps", responses={404: {"description": "unknown or expired exploration id"},
                                                    422: {"description": "no decoding steps, layer out of range"}})
    def api_steps(eid: str, layer: int = 0) -> JSONResponse:
        """The step player's context vectors of one layer, [step][dim] rounded to 4 decimals (what they are: the
        exploration's steps.context); the rest of the steps (map, beam tree) is in the exploration."""
        try:
            return JSONResponse(views.steps_payload(store.get(eid), layer))
        except AttnlabError as e:
            raise HTTPException(422, str(e)) from None

    @app.get("/favicon.ico", include_in_schema=False)
    def favicon() -> Response:  # the page carries its icon inline; a tool asking for the file gets no 404
        return Response(status_code=204)

    if start not in START_VIEWS:
        raise AttnlabError(f"start view {start!r}: choose one of {', '.join(START_VIEWS)}")
    page = (STATIC_DIR / "index.html").read_text(encoding="utf-8").replace("<body>", f'<body data-start="{start}">', 1)

    @app.get("/", include_in_schema=False)
    def index() -> HTMLResponse:
        return HTMLResponse(page)

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    app.openapi = lambda: openapi_with_models(app, models, max_chars)
    return app


def openapi_with_models(app: FastAPI, models: dict[str, ServedModel], max_chars: int) -> dict:
    """FastAPI's schema of `app`, with what the request models cannot say statically: the served model names (an
    enum with an example; /api/translate: the translation models) and the sentence's limits (a non-space
    character, at most max_chars characters; the run's token limit is checked on the server, 422), so that a
    client or a schema fuzzer sends requests that reach decoding."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    translation = [name for name, m in models.items() if m.translator is not None]
    # a character that is not whitespace to str.split (which also splits at \x1c-\x1f and \x85, unlike a JSON
    # Schema's \s) and not the pilcrow (`corpus.normalize`)
    sentence = {"minLength": 1, "maxLength": max_chars, "pattern": r"[^\s\u001c-\u001f\u0085\u00b6]",
                "examples": ["In the beginning was the Word"]}
    for request, names in (("TranslateRequest", translation or list(models)), ("ExploreRequest", list(models))):
        fields = schema["components"]["schemas"][request]["properties"]
        fields["model"].update(enum=names, examples=names[:1])
        fields["sentence"].update(sentence)
        for option in fields.get("sentence_b", {}).get("anyOf", []):
            if option.get("type") == "string":
                option.update(sentence)
    app.openapi_schema = schema
    return schema


def serve(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          checkpoint: str = "best", max_chars: int = 1000, max_connections: int = 4096,
          header_timeout: float = 10.0, timeout: float = 60.0, engine: str = "torch", body_timeout: float = 10.0,
          max_connections_per_client: int = 256, explore_memory: int = EXPLORE_MEMORY,
          start: str = "explorer", allowed_hosts: Sequence[str] = ()) -> None:
    """Load the runs and serve them with uvicorn until Ctrl-C or SIGTERM (in-flight requests finish first); the
    page opens on `start` (`create_app`). Requests must name this machine as Host: a loopback name, the address
    it listens on (on 0.0.0.0 or ::, the machine's own names and addresses: `guards.served_hosts`), or one of
    `allowed_hosts` (421 otherwise, `HostCheck`).
    Connections are guarded by `guards.guarded_h11` (per client and in all, request heads); uvicorn's own
    concurrency limit is off: `serving.ConcurrencyLimit` answers its 503 in JSON with Retry-After."""
    models = load_models(run_dirs, checkpoint, device, max_chars, engine)
    own = served_hosts(host)
    app = create_app(models, max_chars=max_chars, timeout=timeout, body_timeout=body_timeout,
                     max_requests=max_connections, explore_memory=explore_memory, start=start,
                     allowed_hosts=[*LOOPBACK_HOSTS, *own, *allowed_hosts])
    sock = listen(host, port)
    port = sock.getsockname()[1]
    raise_fd_limit(max_connections + MAX_LINGERING + 256)
    for name in ("uvicorn.error", "attnlab"):
        logging.getLogger(name).addFilter(RateLimit())
    urls = [f"http://{f'[{h}]' if ':' in h else h}:{port}/" for h in (own if own else [host])]
    log.info("serving %s at %s  (API schema: /openapi.json; Ctrl-C stops)", ", ".join(models), " ".join(urls))
    protocol = guarded_h11(max_connections, header_timeout, max_connections_per_client, max_head=16 * 1024)
    config = uvicorn.Config(app, log_level="warning", http=protocol, limit_concurrency=None, timeout_keep_alive=5,
                            backlog=2048, h11_max_incomplete_event_size=16 * 1024,
                            timeout_graceful_shutdown=math.ceil(timeout))  # at least a request's own time
    uvicorn.Server(config).run(sockets=[sock])
