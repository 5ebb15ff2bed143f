"""The device queues: one Celery queue per device class (`device.SM8750`, `device.x86_64`,
`device.emulated-arm64`), consumed by a worker on each host the devices are plugged into
(tasks/device_worker.py). A triage that runs a device target on a worker without the devices
sends the bundle there and waits for the outcomes: what the caller and the device hosts share.

The bundle travels in the message (a gzipped tar, base64): the probes' programs are tens of KiB.
"""
from __future__ import annotations

import base64
import io
import tarfile
from pathlib import Path

from celery import Celery

RUN_BUNDLE = "etriage.device_run_bundle"


def queue_for(device_class: str) -> str:
    return f"device.{device_class}"


def make_client(broker_url: str, name: str = "etriage-devices") -> Celery:
    app = Celery(name, broker=broker_url, backend=broker_url, set_as_current=False)
    app.conf.update(task_serializer="json", result_serializer="json", accept_content=["json"],
                    task_acks_late=True, task_reject_on_worker_lost=True, worker_prefetch_multiplier=1,
                    broker_connection_retry_on_startup=True, result_expires=3600,
                    task_create_missing_queues=True)
    return app


def pack(bundle: Path) -> str:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(bundle, arcname="bundle")
    return base64.b64encode(buffer.getvalue()).decode()


def unpack(data: str, dest: Path) -> Path:
    """The bundle under dest/bundle; members outside it are refused (it came over the wire)."""
    with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data)), mode="r:gz") as tar:
        tar.extractall(dest, filter="data")
    return dest / "bundle"
