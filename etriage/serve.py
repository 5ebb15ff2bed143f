"""`etriage serve`: the web app and a worker in one command, with nothing to set up.

Without REDIS_URL an embedded redis-server is started; without DATABASE_URL, SQLite under the
data directory; without ETRIAGE_WEBHOOK_SECRET a secret is generated, printed and written to
<data_dir>/webhook-secret (where `etriage replay` finds it). `--github-double` serves a local
GitHub API double for a machine without GitHub (its URL in <data_dir>/github-double-url);
`--seed DIR` fills it first (etriage/dev/seed_double.py: a repository served over git, a pull
request, a failed CI run and its log) so that replaying DIR/payloads ends in a PR comment.
Ctrl-C / SIGTERM stops the web server, the worker (its whole process group) and Redis; nothing
is left behind.

The GitHub token is read once and removed from this process's environment: the worker gets
the settings object (it is a forked child), so no subprocess of the pipeline can inherit it.
"""
from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import secrets
import signal
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

from werkzeug.serving import make_server

from bot.app import create_app
from bot.github_client import install_redaction
from bot.settings import Settings, SettingsError
from etriage.dev.github_double import GitHubDouble
from etriage.dev.seed_double import SeedError, seed
from etriage.embedded_redis import EmbeddedRedis
from tasks.celery_app import WorkerOptions, configure

SECRET_FILE = "webhook-secret"
URL_FILE = "serve-url"
DOUBLE_URL_FILE = "github-double-url"
SECRET_VARIABLES = ("ETRIAGE_GITHUB_TOKEN", "ETRIAGE_WEBHOOK_SECRET")


def add_arguments(parser) -> None:
    parser.add_argument("--port", type=int, default=8000, help="web port (default 8000; 0: any)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--data-dir", type=Path, help="default: $ETRIAGE_DATA_DIR or ~/.etriage")
    parser.add_argument("--concurrency", type=int, default=2, help="worker processes")
    parser.add_argument("--github-double", action="store_true",
                        help="serve a local GitHub API double and point the bot at it")
    parser.add_argument("--seed", type=Path, metavar="DIR",
                        help="with --github-double: fill the double from DIR/seed.yaml (etriage/dev/seed: "
                             "a pull request and a failed CI run that DIR/payloads replay)")
    parser.add_argument("--log-file", type=Path,
                        help="write the worker's, Celery's and the web server's logs here "
                             "instead of the console")


def run(args) -> int:
    if getattr(args, "seed", None) and not args.github_double:
        print("etriage serve: --seed fills the local GitHub double; add --github-double", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    install_redaction()
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):  # the CLI's, not Service's: `etriage demo`
        signal.signal(sig, lambda *_: stop.set())  # keeps Ctrl-C as KeyboardInterrupt
    with Service(args, stop_event=stop) as service:
        print(service.banner(), flush=True)
        service.wait()
    print("etriage serve: stopped", flush=True)
    return 0


class Service:
    """The running pieces; `with Service(args)` starts them and always stops them."""

    def __init__(self, args, environ=None, stop_event: threading.Event | None = None):
        self.args = args
        self.environ = environ
        self.stack = ExitStack()
        self.stop_event = stop_event or threading.Event()
        self.double = None
        self.seeded = None

    def __enter__(self) -> "Service":
        try:
            self._start()
        except BaseException:
            self.stack.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stack.close()

    def _start(self) -> None:

        env = dict(os.environ if self.environ is None else self.environ)
        for name in SECRET_VARIABLES:  # read once below; never inherited by children
            os.environ.pop(name, None)
        data_dir = Path(self.args.data_dir or env.get("ETRIAGE_DATA_DIR")
                        or Path.home() / ".etriage").expanduser()
        data_dir.mkdir(parents=True, exist_ok=True)
        env["ETRIAGE_DATA_DIR"] = str(data_dir)
        if not env.get("ETRIAGE_WEBHOOK_SECRET"):
            env["ETRIAGE_WEBHOOK_SECRET"] = secrets.token_hex(20)
            self.generated_secret = True
        else:
            self.generated_secret = False
        secret_path = data_dir / SECRET_FILE
        secret_path.touch(mode=0o600)
        secret_path.write_text(env["ETRIAGE_WEBHOOK_SECRET"].split(",")[0])
        if self.args.github_double:

            self.double = GitHubDouble(bot_login=env.get("ETRIAGE_BOT_LOGIN") or "etriage[bot]")
            self.double.start()
            self.stack.callback(self.double.stop)
            env["ETRIAGE_GITHUB_API_URL"] = self.double.url
            env.setdefault("ETRIAGE_GITHUB_TOKEN", "ghs_local_double_token_not_a_secret")
            self.double.git_tokens.add(env["ETRIAGE_GITHUB_TOKEN"])  # its git checks the token the worker fetches with
            (data_dir / DOUBLE_URL_FILE).write_text(self.double.url)
            if getattr(self.args, "seed", None):
                try:
                    self.seeded = seed(self.double, self.args.seed)
                except SeedError as error:
                    raise SystemExit(f"etriage serve: cannot seed the GitHub double: {error}") from None
        if not env.get("REDIS_URL"):
            redis_server = EmbeddedRedis()
            env["REDIS_URL"] = redis_server.start()
            self.stack.callback(redis_server.stop)
        try:
            settings = Settings.from_env(env)
            options = WorkerOptions.from_env(env)
        except (SettingsError, ValueError) as error:
            raise SystemExit(f"etriage serve: configuration error: {error}") from None
        self.settings, self.options = settings, options
        configure(settings, options)  # this process's worker app: from these settings, not the environment
        self.log_file = getattr(self.args, "log_file", None)
        if self.log_file:
            self.stack.callback(_log_to_file(self.log_file))
        self.worker = start_worker(settings, options, concurrency=self.args.concurrency,
                                   log_file=self.log_file)
        self.stack.callback(stop_worker, self.worker)
        self.server = start_web(settings, self.args.host, self.args.port)
        self.stack.callback(self.server.shutdown)
        self.url = f"http://{self.args.host}:{self.server.server_port}"
        (data_dir / URL_FILE).write_text(self.url + "/webhook")

    def banner(self) -> str:
        lines = [f"etriage serve: webhook at {self.url}/webhook",
                 f"  redis: {self.settings.redacted()['redis_url']}",
                 f"  database: {self.settings.redacted()['database_url']}",
                 f"  GitHub API: {self.settings.github_api_url}"
                 + (" (local double)" if self.double else ""),
                 *([f"  seeded: {self.seeded.repository}#{self.seeded.pull_request.number} and a failed "
                    f"workflow run; replay {self.args.seed / 'payloads'}/*.json"] if self.seeded else []),
                 f"  data dir: {self.settings.data_dir}"]
        if self.log_file:
            lines.append(f"  logs: {self.log_file}")
        if self.generated_secret:
            lines.append(f"  webhook secret (generated, also in {self.settings.data_dir / SECRET_FILE}):"
                         f" {self.settings.webhook_secrets[0]}")
        lines.append("  Ctrl-C stops everything.")
        return "\n".join(lines)

    def wait(self) -> None:
        while not self.stop_event.wait(0.5):
            if not self.worker.is_alive():
                print("etriage serve: the worker exited; stopping", file=sys.stderr)
                return


def start_web(settings, host: str, port: int):
    server = make_server(host, port, create_app(settings), threaded=True)
    threading.Thread(target=server.serve_forever, name="etriage-web", daemon=True).start()
    return server


def _log_to_file(path: Path):
    """Send this process's logging (the web server's request lines included) to `path`;
    returns the undo."""
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s: %(message)s"))
    loggers = [logging.getLogger(), logging.getLogger("werkzeug")]
    for logger in loggers:
        logger.addHandler(handler)
    logging.getLogger("werkzeug").propagate = False
    logging.getLogger().setLevel(logging.INFO)

    def undo() -> None:
        for logger in loggers:
            logger.removeHandler(handler)
        logging.getLogger("werkzeug").propagate = True
        handler.close()
    return undo


def _worker_main(settings, options, queues: str, concurrency: int,
                 log_file: Path | None = None) -> None:
    """The worker process: its own session (so stop_worker can signal the whole group), tied
    to its parent's life, configured with the settings object rather than the environment.
    With `log_file`, its stdout and stderr (Celery's banner and logs, warnings) go there."""
    os.setsid()
    if log_file:
        fd = os.open(log_file, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6").prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    app = configure(settings, options)
    app.Worker(queues=queues.split(","), concurrency=concurrency, loglevel="INFO",
               hostname=f"etriage-serve-{os.getpid()}@%h", without_mingle=True,
               without_gossip=True).start()


def start_worker(settings, options, *, concurrency: int = 2,
                 queues: str = "triage,build,emulator,device", log_file: Path | None = None):
    process = multiprocessing.get_context("fork").Process(
        target=_worker_main, args=(settings, options, queues, concurrency, log_file),
        name="etriage-worker")
    process.start()
    return process


def stop_worker(process, timeout: float = 15.0) -> None:
    """Warm shutdown (SIGTERM to the worker's group), then SIGKILL what is left."""
    if process.pid is None:
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        process.join(wait)
        if not process.is_alive() and not _group_alive(process.pid):
            break
    process.join(1)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
