"""``GET /metrics``: the metrics on ``app.state.metrics`` (:func:`gateway.api.telemetry.install_telemetry`
puts them there), or every worker's with ``serve --workers N``."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from gateway.api.worker_listener import replica_metrics
from gateway.observability.metrics import CONTENT_TYPE_LATEST, GatewayMetrics

__all__ = ["router"]

router = APIRouter(tags=["observability"])


@router.get(
    "/metrics",
    operation_id="metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "every gateway metric"}},
)
async def metrics(request: Request) -> Response:
    registry: GatewayMetrics = request.app.state.metrics
    runtime = getattr(request.app.state, "runtime", None)
    worker = getattr(runtime, "worker", None)
    if worker is not None:  # serve --workers N: every worker's metrics, labelled by worker
        secret = runtime.settings.consumers.id_secret  # type: ignore[union-attr]
        return Response(await replica_metrics(registry, worker, secret), media_type=CONTENT_TYPE_LATEST)
    return Response(registry.render(), media_type=CONTENT_TYPE_LATEST)
