"""The application commands of the worker process tests (``wow worker tests.application_app:commands``).

``ChargeCard`` is queued on the named transport ``payments``. Its handler does a little
work, then applies its effect in Redis at most once per producer's operation id (one
atomic script): a delivery repeated after a crash is counted in ``deliveries`` and has no
second effect; ``started:<worker>`` names the operations each worker started. Keys live
under ``$WOW_TEST_APP_PREFIX``, on ``$WOW_TEST_REDIS_URL``.
"""

from __future__ import annotations

import asyncio
import os

from redis.asyncio import Redis

from tests.wow_core.application.commands import ChargeCard
from wow_core.application import (
    ApplicationCommandBus,
    ApplicationCommands,
    CommandWorker,
    JsonCommandSerializer,
    JsonOperationContextSerializer,
    Operation,
    TransportMiddleware,
    TransportRegistry,
)

WORK_SECONDS = 0.03

APPLY_ONCE = """
if redis.call('SADD', KEYS[1], ARGV[1]) == 1 then
  redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
  redis.call('INCR', KEYS[3])
end
"""
"""The effect, applied atomically at most once per operation id (a Lua script runs alone)."""

_clients: dict[int, Redis] = {}


def _redis() -> Redis:
    loop = id(asyncio.get_running_loop())
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = Redis.from_url(
            os.environ.get("WOW_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
        )
    return client


async def charge(command: ChargeCard, operation: Operation) -> None:
    prefix = os.environ["WOW_TEST_APP_PREFIX"]
    operation_id = operation.attributes[CommandWorker.ATTR_ORIGINAL_OPERATION_ID]
    redis = _redis()
    # One transaction: a delivery is counted and named by the worker that started it, so
    # the test reads who started what once every write has landed (a write sent just
    # before a SIGKILL can reach Redis after a read the test makes right after the kill).
    async with redis.pipeline(transaction=True) as started:
        started.hincrby(f"{prefix}deliveries", operation_id, 1)
        started.sadd(f"{prefix}started:{os.environ['WOW_TEST_WORKER_NAME']}", operation_id)
        await started.execute()
    await asyncio.sleep(WORK_SECONDS)  # the work of the command
    tenant = str(operation.attributes.get("tenant_id"))
    keys = [f"{prefix}effects", f"{prefix}tenants", f"{prefix}applied"]
    await redis.eval(APPLY_ONCE, len(keys), *keys, operation_id, tenant)  # type: ignore[misc]


def build(registry: TransportRegistry) -> tuple[ApplicationCommandBus, ApplicationCommands]:
    serializer = JsonCommandSerializer()
    context = JsonOperationContextSerializer(["tenant_id"])
    bus = ApplicationCommandBus([TransportMiddleware(registry, serializer, context)])
    bus.register(ChargeCard, charge)
    return bus, ApplicationCommands(bus, serializer, context)


def commands(registry: TransportRegistry) -> ApplicationCommands:
    return build(registry)[1]
