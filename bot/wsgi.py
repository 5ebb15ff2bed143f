"""gunicorn's entry point: `gunicorn bot.wsgi:app`.

Importing this module IS the start of the web process, so it reads the environment here (once);
a configuration error is one line on stderr and exit status 2, before gunicorn serves anything.
"""
import os

from bot.app import create_app
from bot.settings import load_or_exit

app = create_app(load_or_exit(os.environ, require_redis=True))
