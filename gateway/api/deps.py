"""FastAPI dependencies: the runtime's services, resolved from ``app.state``.

The dependency callables are ``async def`` on purpose: FastAPI runs a plain ``def`` dependency in the
thread pool, and those thread hops cost about a quarter of the gateway's CPU on a one-message publish.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from gateway.config import Settings
from gateway.runtime import Runtime
from gateway.service.publish import PublishService


def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


async def runtime_dep(request: Request) -> Runtime:
    return get_runtime(request)


async def get_settings_dep(request: Request) -> Settings:
    return get_runtime(request).settings


async def get_publish_service(request: Request) -> PublishService:
    return get_runtime(request).publisher()


RuntimeDep = Annotated[Runtime, Depends(runtime_dep)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PublishDep = Annotated[PublishService, Depends(get_publish_service)]
