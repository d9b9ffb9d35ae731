"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from gateway.api.contract_types import ReadinessChecks
from gateway.api.deps import RuntimeDep

router = APIRouter(tags=["health"])


class Liveness(BaseModel):
    status: str = Field(description="`ok`")


class Readiness(BaseModel):
    ready: bool
    checks: ReadinessChecks


@router.get("/healthz", operation_id="liveness", summary="The event loop answers", response_model=Liveness)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get(
    "/readyz",
    operation_id="readiness",
    summary="Registered with a master and able to publish",
    response_model=None,
    responses={200: {"model": Readiness, "description": "ready"}},
)
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    ready, checks = runtime.readiness()
    return JSONResponse({"ready": ready, "checks": checks}, status_code=200 if ready else 503)
