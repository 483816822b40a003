"""The dashboard's ASGI app (Starlette): the page and its static files, the state as server-sent events (one
shared poller feeds every page), the state once as JSON, and the fault buttons' endpoint, which refuses with
403 unless the dashboard was started with faults allowed."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from cluster.dashboard.faults import ACTIONS, FaultRefused, FaultRequest, carry_out, carry_out_docker
from cluster.dashboard.poller import Poller
from cluster.net.system import NotRootError
from cluster.processes import ClusterError

STATIC = Path(__file__).parent / "static"
KEEPALIVE_S = 10.0


def create_app(poller: Poller, data_dir: Path | None, docker: bool = False) -> Starlette:
    """``data_dir`` None: no cluster to act on, so no faults whatever was asked. ``docker``: the faults go to the
    docker-compose cluster's containers (``data_dir/docker`` holds the tools' trace, as for the CLI's --docker)."""
    fault_lock = asyncio.Lock()   # one fault at a time: two quick clicks never race each other

    async def index(_request: Request) -> Response:
        return FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def state(_request: Request) -> Response:
        if poller.latest is None:
            await poller.publish_now()
        return Response(poller.latest, media_type="application/json")

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            seq = 0
            yield "retry: 1000\n\n"
            while not await request.is_disconnected():
                try:
                    seq, text = await asyncio.wait_for(poller.wait_newer(seq), KEEPALIVE_S)
                except TimeoutError:
                    yield ": keep-alive\n\n"
                    continue
                yield f"id: {seq}\ndata: {text}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream",
                                 headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    async def fault(request: Request) -> Response:
        if not poller.allow_faults or data_dir is None:
            return JSONResponse({"error": "this dashboard is read-only: start it with --allow-faults "
                                          "(on by default for the classroom profile) to use the fault buttons"},
                                status_code=403)
        try:
            fault_request = FaultRequest.from_json(await request.json())
        except (FaultRefused, ValueError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        async with fault_lock:
            try:
                done = await (carry_out_docker(data_dir / "docker", fault_request) if docker
                              else carry_out(data_dir, fault_request))
            except (ClusterError, NotRootError) as exc:
                return JSONResponse({"error": str(exc)}, status_code=409)
            except Exception as exc:  # a failed ip/nft call, ...: the page shows it, the dashboard goes on
                return JSONResponse({"error": f"{type(exc).__name__}: {exc}"}, status_code=500)
        with contextlib.suppress(Exception):
            await poller.publish_now()
        return JSONResponse({"done": done})

    async def actions(_request: Request) -> Response:
        return JSONResponse({"allow_faults": poller.allow_faults and data_dir is not None, "actions": ACTIONS})

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        poller.start()
        try:
            yield
        finally:
            await poller.stop()

    return Starlette(routes=[
        Route("/", index),
        Route("/api/state", state),
        Route("/api/events", events),
        Route("/api/actions", actions),
        Route("/api/fault", fault, methods=["POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ], lifespan=lifespan)
