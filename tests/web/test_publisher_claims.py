"""The webhook with the real Publisher on a real Redis: the delivery's claim and its Celery
message land in one round trip, so each delivery is queued exactly once and an outage leaves
nothing behind. The messages are read back from the queue as a worker would see them."""
from __future__ import annotations

import base64
import json
import threading
import uuid

import pytest
import redis

from bot.app import create_app
from bot.publisher import Claim, Claimed, DispatchError, Publisher, publishing_app

from .conftest import SECRET, Deliverer

DB = 13  # a database of its own: nothing else reads its `triage` list


@pytest.fixture
def queue_url(redis_url):
    base = redis_url.rsplit("/", 1)[0] if redis_url.startswith("redis://") else redis_url
    url = f"{base}/{DB}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    yield url
    client.flushdb()


@pytest.fixture
def publisher(queue_url):
    return Publisher(publishing_app(queue_url), queue_url)


@pytest.fixture
def deliver(queue_url, publisher, webhook_fixtures):
    app = create_app({"webhook_secrets": (SECRET,), "redis_url": queue_url}, dispatcher=publisher)
    return Deliverer(app.test_client(), webhook_fixtures)


def queued(url: str) -> list[tuple[str, list, dict]]:
    """(task name, args, kwargs) of every message on the triage queue, oldest first."""
    out = []
    for raw in reversed(redis.Redis.from_url(url).lrange("triage", 0, -1)):
        message = json.loads(raw)
        args, kwargs, _ = json.loads(base64.b64decode(message["body"]))
        assert message["headers"]["id"] == message["properties"]["correlation_id"]
        out.append((message["headers"]["task"], args, kwargs))
    return out


def test_a_delivery_is_claimed_and_queued_together(deliver, queue_url):
    delivery = str(uuid.uuid4())
    response = deliver.fixture("pull_request/opened.json", delivery=delivery)
    assert response.status_code == 202 and response.json["status"] == "queued"
    [(task, args, kwargs)] = queued(queue_url)
    payload = deliver.payload("pull_request/opened.json")
    assert task == "etriage.triage_pr"
    assert args[:3] == [payload["repository"]["full_name"], payload["number"], payload["pull_request"]["head"]["sha"]]
    assert kwargs["reason"]
    client = redis.Redis.from_url(queue_url)
    assert client.get(f"etriage:delivery:{delivery}") == b"done"
    assert 7 * 24 * 3600 - 60 < client.ttl(f"etriage:delivery:{delivery}") <= 7 * 24 * 3600
    repo, pr = args[0], args[1]
    assert client.get(f"etriage:head:{repo}#{pr}").decode() == args[2]
    assert client.get(f"etriage:task:{repo}#{pr}")


def test_a_redelivery_is_a_duplicate_and_queues_nothing(deliver, queue_url):
    delivery = str(uuid.uuid4())
    assert deliver.fixture("pull_request/closed.json", delivery=delivery).status_code == 202
    again = deliver.fixture("pull_request/closed.json", delivery=delivery)
    assert (again.status_code, again.json["status"]) == (200, "duplicate")
    assert [task for task, _, _ in queued(queue_url)] == ["etriage.pr_closed"]


def test_a_pending_claim_of_an_older_etriage_is_409(deliver, queue_url):
    delivery = str(uuid.uuid4())
    redis.Redis.from_url(queue_url).set(f"etriage:delivery:{delivery}", "pending", ex=60)
    response = deliver.fixture("pull_request/opened.json", delivery=delivery)
    assert (response.status_code, response.json["status"]) == (409, "in_progress")
    assert queued(queue_url) == []


def test_the_same_delivery_from_many_threads_is_queued_once(deliver, queue_url):
    delivery, answers = str(uuid.uuid4()), []
    barrier = threading.Barrier(8)

    def post():
        barrier.wait()
        answers.append(deliver.fixture("pull_request/opened.json", delivery=delivery).status_code)

    threads = [threading.Thread(target=post) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(answers) == [200] * 7 + [202]
    assert len(queued(queue_url)) == 1


def test_redis_down_is_503_and_a_redelivery_later_is_processed(unused_redis_url, queue_url, webhook_fixtures):
    down = create_app({"webhook_secrets": (SECRET,), "redis_url": unused_redis_url},
                      dispatcher=Publisher(publishing_app(unused_redis_url), unused_redis_url))
    delivery = str(uuid.uuid4())
    response = Deliverer(down.test_client(), webhook_fixtures).fixture("pull_request/opened.json", delivery=delivery)
    assert (response.status_code, response.json["status"]) == (503, "unavailable")
    assert "Redis is unavailable" in response.json["detail"] and "redeliver" in response.json["detail"]
    up = create_app({"webhook_secrets": (SECRET,), "redis_url": queue_url},
                    dispatcher=Publisher(publishing_app(queue_url), queue_url))
    retried = Deliverer(up.test_client(), webhook_fixtures).fixture("pull_request/opened.json", delivery=delivery)
    assert retried.status_code == 202
    assert len(queued(queue_url)) == 1


def test_a_claim_that_exists_raises_claimed_and_touches_nothing(publisher, queue_url):
    client = redis.Redis.from_url(queue_url)
    client.set("etriage:delivery:x", "done")
    with pytest.raises(Claimed) as caught:
        publisher.triage_pr("o/r", 7, "a" * 40, "main", None, reason="opened", claim=Claim("etriage:delivery:x", 60))
    assert caught.value.state == "done"
    assert client.get("etriage:head:o/r#7") is None and queued(queue_url) == []


def test_a_command_redis_refuses_leaves_no_claim_so_the_redelivery_is_processed(publisher, queue_url):
    client = redis.Redis.from_url(queue_url)
    client.set("triage", "not a list")  # LPUSH fails with WRONGTYPE inside the script
    with pytest.raises(DispatchError, match="Redis refused it"):
        publisher.installation(1, "octo", "created", claim=Claim("etriage:delivery:y", 60))
    assert client.get("etriage:delivery:y") is None
    client.delete("triage")
    publisher.installation(1, "octo", "created", claim=Claim("etriage:delivery:y", 60))
    assert client.get("etriage:delivery:y") == b"done"
    assert [task for task, _, _ in queued(queue_url)] == ["etriage.installation"]
