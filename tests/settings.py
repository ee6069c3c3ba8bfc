"""The test suite's settings: meshdash's own, read as on a developer's machine (DEBUG=true unless set).

DEBUG is off unless explicitly set; the suite sets it here, before the settings are read, because
pytest-django reads them before any conftest runs. Processes the tests start inherit DEBUG and read
meshdash.settings itself.
"""

import os

os.environ.setdefault("DEBUG", "true")
os.environ["DJANGO_SETTINGS_MODULE"] = "meshdash.settings"

from meshdash.settings import *  # noqa: F403
