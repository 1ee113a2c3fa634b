"""`attnlab serve`: a small web app to translate with trained runs and look at their attention.

A FastAPI app with a JSON API and one static page (`attnlab/static/`, no CDN assets, works offline):

    GET  /api/models      the served models (by name: clients never send a path), their attention shape
    POST /api/translate   {"model", "sentence", "beam"} -> tokens, translation, cross-attention weights
    GET  /openapi.json    the API's OpenAPI schema

Decoding is `attnlab.translate.Translator` (the same search as `attnlab translate`). Each model has a lock:
requests for one model are decoded one at a time (the 2-core CPU gains nothing from more), requests for
different models run side by side in FastAPI's thread pool.

Limits (all answered with a 4xx JSON body {"error": "...", ...}, never a 500): request bodies over
`max_body` bytes (413), malformed JSON (400), a missing/empty/over-long sentence or a bad beam (422), more
source tokens than the run's decode.max_src_tokens (422), an unknown model name (404).
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from attnlab.corpus import normalize
from attnlab.errors import AttnlabError
from attnlab.plotting import clean_piece
from attnlab.translate import Translator
from attnlab.workflow import load_run

log = logging.getLogger("attnlab")

MAX_BEAM = 12
STATIC_DIR = Path(str(files("attnlab") / "static"))


# ---------------------------------------------------------------------------------------------- schema
class TranslateRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(description="a model name from GET /api/models", max_length=200)
    sentence: str = Field(description="the source sentence (normalized like `attnlab translate` input)")
    beam: int | None = Field(None, ge=1, le=MAX_BEAM, description="beam size; 1 = greedy (default: the run's)")


class TranslateResponse(BaseModel):
    model: str
    sentence: str = Field(description="the sentence as translated (whitespace-normalized)")
    translation: str
    beam: int
    score: float = Field(description="the search's length-penalised log-probability")
    src_tokens: list[str] = Field(description="source pieces incl. </s>: the attention's columns")
    tgt_tokens: list[str] = Field(description="output pieces, + </s> when finished: the attention's rows")
    src_labels: list[str] = Field(description="readable labels of src_tokens (word mark shown as _)")
    tgt_labels: list[str]
    layers: int = Field(description="decoder layers with cross-attention (1 for RNN attention, 0 for none)")
    heads: int
    attention: list[list[list[list[float]]]] | None = Field(
        description="cross-attention weights [layer][head][target token][source token]; null without attention")
    seconds: float


class ModelInfo(BaseModel):
    name: str
    family: str
    attention: str = Field(description="RNN attention type, 'multi-head' for Transformers, 'none'")
    layers: int
    heads: int
    beam: int = Field(description="the run's default beam size")
    max_src_tokens: int
    max_chars: int
    parameters: int


# ---------------------------------------------------------------------------------------------- models
@dataclass
class ServedModel:
    info: ModelInfo
    translator: Translator
    lock: threading.Lock


def load_models(run_dirs: list[Path], checkpoint: str = "best", device: str = "cpu", max_chars: int = 1000
                ) -> dict[str, ServedModel]:
    """Loads each run once; a model's name is its directory name (the full path when two names clash)."""
    models: dict[str, ServedModel] = {}
    seen: set[Path] = set()
    for run in map(Path, run_dirs):
        if run.resolve() in seen:
            raise AttnlabError(f"{run} is given twice")
        seen.add(run.resolve())
        name = run.name if run.name not in models else str(run)
        loaded = load_run(run, checkpoint, device, ability="translate")
        cfg, tokenizers, model = loaded.cfg, loaded.tokenizers, loaded.model
        if cfg.model.family == "transformer":
            t = cfg.model.transformer
            attention, layers, heads = "multi-head", t.dec_layers, t.h
        else:
            attention = cfg.model.rnn.attention
            layers = heads = 0 if attention == "none" else 1
        info = ModelInfo(name=name, family=cfg.model.family, attention=attention, layers=layers, heads=heads,
                         beam=cfg.decode.beam_size, max_src_tokens=cfg.decode.max_src_tokens, max_chars=max_chars,
                         parameters=sum(p.numel() for p in {id(p): p for p in model.parameters()}.values()))
        models[name] = ServedModel(info, Translator(model, tokenizers, cfg.decode, device), threading.Lock())
    if not models:
        raise AttnlabError("give at least one run directory to serve")
    return models


def translate_one(served: ServedModel, sentence: str, beam: int | None) -> TranslateResponse:
    """Translate one (normalized, non-empty) sentence with its attention as [layer][head][T][S]."""
    beam = served.info.beam if beam is None else beam
    t0 = time.perf_counter()
    with served.lock:
        t = served.translator.translate([sentence], beam_size=beam, need_weights=True)[0][0]
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
                             score=t.score, src_tokens=t.src_tokens, tgt_tokens=t.tgt_tokens,
                             src_labels=[clean_piece(s) for s in t.src_tokens],
                             tgt_labels=[clean_piece(s) for s in t.tgt_tokens],
                             layers=served.info.layers if attention else 0,
                             heads=served.info.heads if attention else 0, attention=attention, seconds=seconds)


# ---------------------------------------------------------------------------------------------- limits
class BodyLimit:
    """ASGI middleware: request bodies over max_bytes get 413 before the app parses them (the declared
    Content-Length is checked first, then the bytes actually received, for chunked uploads)."""

    def __init__(self, app, max_bytes: int) -> None:
        self.app, self.max_bytes = app, max_bytes

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None:
            if not declared.isdigit():
                await _error(400, "invalid Content-Length header")(scope, receive, send)
                return
            if int(declared) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        body, more = b"", True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            more = message.get("more_body", False)
            if len(body) > self.max_bytes:
                await self._too_large(scope, receive, send)
                return
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    async def _too_large(self, scope, receive, send) -> None:
        await _error(413, f"request body over {self.max_bytes} bytes")(scope, receive, send)


def _error(status: int, message: str, **extra) -> JSONResponse:
    return JSONResponse({"error": message, **extra}, status_code=status)


def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    errors = exc.errors()
    if any(e.get("type") == "json_invalid" for e in errors):
        return _error(400, "malformed JSON in the request body")
    first = errors[0] if errors else {}
    where = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or "body"
    detail = [{"loc": list(map(str, e.get("loc", ()))), "msg": e.get("msg", ""), "type": e.get("type", "")}
              for e in errors]
    return _error(422, f"{where}: {first.get('msg', 'invalid request')}", detail=detail)


# ---------------------------------------------------------------------------------------------- app
def create_app(models: dict[str, ServedModel], max_chars: int = 1000, max_body: int = 64 * 1024) -> FastAPI:
    """The FastAPI app serving `models` (see `load_models`) and the static explorer page."""
    # /docs and /redoc would load Swagger/ReDoc from a CDN: off, the page must work offline
    app = FastAPI(title="attnlab attention explorer", version=__import__("attnlab").__version__,
                  docs_url=None, redoc_url=None,
                  description="Translate with trained attnlab runs and get their cross-attention weights.")
    app.add_middleware(BodyLimit, max_bytes=max_body)
    app.add_exception_handler(RequestValidationError, _validation_error)

    @app.exception_handler(StarletteHTTPException)
    def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, str(exc.detail))

    @app.get("/api/models", response_model=list[ModelInfo])
    def api_models() -> list[ModelInfo]:
        return [m.info for m in models.values()]

    # a plain `def`: FastAPI runs it in its thread pool, so decoding never blocks the event loop
    @app.post("/api/translate", response_model=TranslateResponse,
              responses={400: {"description": "malformed JSON"}, 404: {"description": "unknown model"},
                         413: {"description": "request body too large"},
                         422: {"description": "empty or too long sentence, bad beam size"}})
    def api_translate(req: TranslateRequest) -> TranslateResponse:
        served = models.get(req.model)
        if served is None:
            raise HTTPException(404, f"unknown model {req.model!r}; served: {', '.join(models)}")
        if len(req.sentence) > max_chars:
            raise HTTPException(422, f"sentence has {len(req.sentence):,} characters; the limit is {max_chars:,}")
        sentence = normalize(req.sentence)
        if not sentence:
            raise HTTPException(422, "sentence is empty")
        try:
            return translate_one(served, sentence, req.beam)
        except AttnlabError as e:  # e.g. more tokens than decode.max_src_tokens
            raise HTTPException(422, str(e)) from None

    @app.get("/", include_in_schema=False)
    def index() -> FileResponse:
        return FileResponse(STATIC_DIR / "index.html")

    app.mount("/static", StaticFiles(directory=STATIC_DIR), name="static")
    return app


def serve(run_dirs: list[Path], host: str = "127.0.0.1", port: int = 8000, device: str = "cpu",
          checkpoint: str = "best", max_chars: int = 1000) -> None:
    """Load the runs and serve them with uvicorn until Ctrl-C."""
    import uvicorn

    models = load_models(run_dirs, checkpoint, device, max_chars)
    app = create_app(models, max_chars=max_chars)
    sock = listen(host, port)
    port = sock.getsockname()[1]
    where = f"[{host}]" if ":" in host else host
    log.info("serving %s at http://%s:%d/  (API schema: /openapi.json; Ctrl-C stops)", ", ".join(models), where,
             port)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])


def listen(host: str, port: int) -> socket.socket:
    """A bound socket for uvicorn; a port in use or a bad address is a user mistake, not a traceback."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as e:
        raise AttnlabError(f"cannot listen on {host}:{port}: {e.strerror or e} "
                           "(choose another --host/--port)") from None
    return sock
