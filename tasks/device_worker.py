"""A device host's worker: one per host the devices are plugged into, serving their classes' queues.

    ETRIAGE_DEVICES=lab.yaml ETRIAGE_DEVICE_BROKER_URL=redis://broker:6379/0 \\
        celery -A tasks.device_worker worker -Q device.SM8750,device.x86_64 --concurrency 2

It receives a bundle of the probes' programs (exported by the change's Python on a build
worker, tasks/pipeline/device_target.py), leases one of the named devices from the pool (one job
per device, in order per class, health-checked), runs every method there, judges the outputs
against eager and answers one outcome per program, or the device's fault. Settings are read once,
when the app is first asked for (never at import).
"""
from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

import redis
from celery import Celery

from tasks.devices.connect import DeviceSettings, health_check
from tasks.devices.faults import DeviceFault
from tasks.devices.inventory import load_inventory
from tasks.devices.pool import NoDevice, Pool
from tasks.devices.queue import RUN_BUNDLE, make_client, unpack
from tasks.pipeline.device_target import NoRunner, run_on_devices


def make_app(settings: DeviceSettings) -> Celery:
    if not settings.broker_url or not settings.inventory:
        raise ValueError("a device worker needs ETRIAGE_DEVICE_BROKER_URL and ETRIAGE_DEVICES")
    inventory = load_inventory(settings.inventory)
    pool = Pool(redis.Redis.from_url(settings.redis_url or settings.broker_url), inventory,
                health=lambda d: health_check(d, settings))
    app = make_client(settings.broker_url, "etriage-device-worker")

    @app.task(name=RUN_BUNDLE)
    def run_bundle(target: str, device_ids: list[str], job: str, bundle_data: str) -> dict:
        devices = [inventory[i] for i in device_ids if i in inventory and inventory[i].enabled]
        if not devices:
            return _fault(DeviceFault("missing", f"none of {', '.join(device_ids)} is an enabled device of this "
                                                 "host's inventory", target))
        with tempfile.TemporaryDirectory(prefix="etriage-device-job-") as tmp:
            bundle = unpack(bundle_data, Path(tmp))
            try:
                device, outcomes = run_on_devices(bundle, Path(tmp) / "out", devices, pool, settings, None, job)
            except DeviceFault as fault:
                return _fault(fault)
            except NoDevice as error:
                return _fault(DeviceFault("missing", str(error), target))
            except NoRunner as error:
                return _fault(DeviceFault("protocol", str(error), target))
        return {"device": device.model_dump(mode="json"),
                "outcomes": [{"test": o.program.test_id, "outcome": o.outcome, "message": o.message,
                              "log": o.log[-20000:], "seconds": o.seconds} for o in outcomes]}

    app.etriage_pool = pool
    return app


def _fault(fault: DeviceFault) -> dict:
    return {"fault": {"kind": fault.kind, "detail": fault.detail, "device": fault.device}}


_lock = threading.Lock()
_app: Celery | None = None


def get_app() -> Celery:
    global _app
    with _lock:
        if _app is None:
            _app = make_app(DeviceSettings.from_env(os.environ))
        return _app


def __getattr__(name: str):
    if name == "app":  # `celery -A tasks.device_worker worker` looks this up
        return get_app()
    raise AttributeError(name)
