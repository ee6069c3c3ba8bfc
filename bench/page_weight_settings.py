"""Settings for bench/bench_page_weight.py: meshdash's own, with the static root and bundle of one variant.

PAGE_WEIGHT_STATIC_ROOT: where this variant's collectstatic writes; PAGE_WEIGHT_VARIANT: "before" (full
plotly.js, files uncompressed) or "after" (plotly.js basic bundle, files gzipped as production serves them).
"""

import os

from meshdash.settings import *  # noqa: F403

STATIC_ROOT = os.environ["PAGE_WEIGHT_STATIC_ROOT"]
_AFTER = os.environ.get("PAGE_WEIGHT_VARIANT", "after") == "after"
MESHDASH_PLOTLY_BUNDLE = "basic" if _AFTER else "full"
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "whitenoise.storage.CompressedStaticFilesStorage"
        if _AFTER
        else "django.contrib.staticfiles.storage.StaticFilesStorage"
    },
}
