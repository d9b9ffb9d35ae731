"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse

from gateway.api.deps import RuntimeDep

router = APIRouter(tags=["health"])


@router.get("/healthz", operation_id="liveness", summary="The event loop answers")
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", operation_id="readiness", summary="Registered with a master and able to publish")
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    ready, checks = runtime.readiness()
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
