"""A hostile package with 200,000 files: the package page, the admin's file list and the admin's delete page,
each guarded (as shipped) and as a control without the guard, side by side as ratios.

Run from the repo root (a temporary SQLite database is made and removed; pass DATABASE_URL for PostgreSQL):

    .venv/bin/python bench/bench_wide_package.py [--files 200000] [--control-files 5000]

The unguarded package page and delete page are measured on a second package of --control-files files
(at 200,000 files they take minutes) and scaled up, as the table says; the admin's file list, which
shows 100 rows whatever the count, is measured unguarded on the big package itself.
Uses Django's test Client in-process: view + ORM + template time and response size.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
_TMP = tempfile.mkdtemp(prefix="bench-wide-")
os.environ.setdefault("DATABASE_URL", f"sqlite:///{_TMP}/bench.sqlite3")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "meshdash.settings")
os.environ.setdefault("DEBUG", "false")
os.environ.setdefault("SECRET_KEY", "bench-wide-package-only")
os.environ.setdefault("ALLOWED_HOSTS", "testserver")
os.environ.setdefault("SECURE_SSL_REDIRECT", "false")

KV = {"general.architecture": "qwen35moe", "tokenizer.chat_template": "x" * 600}
TENSORS = [
    {"name": f"blk.0.t{i}", "type": "Q4_K", "shape": [4096, 4096], "offset": 0, "bytes": 1} for i in range(4)
]


def setup() -> None:
    import warnings

    import django
    from django.conf import settings
    from django.core.management import call_command

    warnings.filterwarnings("ignore", "No directory at")  # whitenoise: no collectstatic for a bench
    django.setup()
    settings.STORAGES = {
        **settings.STORAGES,
        "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
    }
    call_command("migrate", verbosity=0)


def seed(repo_id: str, files: int) -> int:
    from packages_app.models import Package, PackageFile, Revision

    package = Package.objects.create(repo_id=repo_id)
    revision = Revision.objects.create(
        package=package, commit_sha="a" * 40, status="done", verdict="consistent-no-mtp"
    )
    Package.objects.filter(pk=package.pk).update(latest_revision=revision)
    batch = 5000
    for start in range(0, files, batch):
        PackageFile.objects.bulk_create(
            PackageFile(revision=revision, path=f"junk/{i:07d}.gguf", size=i, kv=KV, tensors=TENSORS)
            for i in range(start, min(files, start + batch))
        )
    return package.pk


def timed(client: Any, url: str, runs: int = 3) -> tuple[float, int]:
    """Median of ``runs`` requests, after one that warms templates and caches."""
    client.get(url)
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        response = client.get(url)
        times.append(time.perf_counter() - started)
        assert response.status_code == 200, (url, response.status_code)
    return statistics.median(times), len(response.content)


def unguarded() -> list[Any]:  # mock patchers
    """The three guards switched off: no file pagination, stock admin querysets and delete page."""
    from django.contrib import admin as django_admin

    from packages_app import admin
    from packages_app.catalog.files import revision_files

    stock = django_admin.ModelAdmin
    return [
        mock.patch.object(revision_files, "__defaults__", (1, 10**9)),
        mock.patch.object(admin.PackageFileAdmin, "get_queryset", stock.get_queryset),
        mock.patch.object(admin.PackageFileAdmin, "show_full_result_count", True),
        mock.patch.object(admin.PackageFileAdmin, "ordering", None),
        mock.patch.object(admin.PackageAdmin, "get_deleted_objects", stock.get_deleted_objects),
    ]


ADMIN = "/" + os.environ.get("MESHDASH_ADMIN_PATH", "admin/") + "packages_app/"
# Pages whose cost grows with the files a package has (a control measured on fewer files is scaled up);
# the admin's file list shows 100 rows whatever the count, so its control runs on the big package itself.
SCALES = {"package page": True, "admin file list": False, "admin delete page": True}


def urls(repo_id: str, pk: int) -> dict[str, str]:
    return {
        "package page": f"/packages/{repo_id}/",
        "admin file list": f"{ADMIN}packagefile/",
        "admin delete page": f"{ADMIN}package/{pk}/delete/",
    }


def run(files: int, control_files: int) -> None:
    setup()
    from django.contrib.auth.models import User
    from django.test import Client

    client = Client()
    client.force_login(User.objects.create_superuser("bench"))
    started = time.perf_counter()
    big = seed("meshllm/wide-layers", files)
    print(f"seeded {files} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    guarded = {label: timed(client, url) for label, url in urls("meshllm/wide-layers", big).items()}
    small = seed("meshllm/control-layers", control_files)
    patches: list[Any] = unguarded()
    for p in patches:
        p.start()
    try:
        control = {
            label: timed(client, url, runs=1 if SCALES[label] else 3)
            for label, url in urls("meshllm/control-layers", small).items()
            if SCALES[label]
        }
        control["admin file list"] = timed(client, urls("meshllm/wide-layers", big)["admin file list"])
    finally:
        for p in patches:
            p.stop()
    print_table(files, control_files, guarded, control)


def print_table(
    files: int,
    control_files: int,
    guarded: dict[str, tuple[float, int]],
    control: dict[str, tuple[float, int]],
) -> None:
    print(f"\n| page ({files} files) | guarded | control (unguarded) | ratio |")
    print("|---|---|---|---|")
    for label, (seconds, size) in guarded.items():
        scale = files / control_files if SCALES[label] else 1
        c_seconds, c_size = control[label][0] * scale, control[label][1] * scale
        note = f", scaled x{scale:g} from {control_files} files" if SCALES[label] else ""
        print(
            f"| {label} | {seconds * 1000:.0f} ms, {size / 1e6:.2f} MB "
            f"| {c_seconds * 1000:.0f} ms, {c_size / 1e6:.1f} MB{note} "
            f"| {c_seconds / seconds:.0f}x time, {c_size / size:.0f}x bytes |"
        )


if __name__ == "__main__":
    formatter = argparse.RawDescriptionHelpFormatter
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=formatter)
    parser.add_argument("--files", type=int, default=200_000)
    parser.add_argument("--control-files", type=int, default=5_000)
    args = parser.parse_args()
    run(args.files, args.control_files)
