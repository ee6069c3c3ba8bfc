"""plotly.js and its stylesheet are served from the installed plotly package, under the strict CSP."""

from __future__ import annotations

from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client

from packages_app import staticfinders
from tests import dashboard_factories as f

BUNDLE = staticfinders.plotly_bundle().read_text(encoding="utf-8")


def test_the_finder_serves_the_bundle_of_the_installed_plotly_package() -> None:
    found = finders.find(staticfinders.PLOTLY_STATIC_PATH)
    assert found == str(staticfinders.served_plotly_bundle())
    assert Path(found).read_text(encoding="utf-8") == BUNDLE
    assert finders.find("packages_app/vendor/other.js") is None


def test_the_pages_get_plotlys_basic_bundle_when_npm_installed_it() -> None:
    if not (Path(settings.BASE_DIR) / staticfinders.BASIC_BUNDLE).is_file():
        pytest.skip("plotly.js-basic-dist-min is not installed: make node-deps")
    served = Path(finders.find(staticfinders.PLOTLY_STATIC_PATH))
    assert served.name == "plotly.min.js"
    assert served.stat().st_size < staticfinders.full_plotly_bundle().stat().st_size / 3
    assert "plotly.js" in served.read_text(encoding="utf-8")[:200]


def test_plotly_css_holds_the_rules_plotly_would_inject_inline() -> None:
    css = staticfinders.plotly_css(BUNDLE)
    assert ".js-plotly-plot .plotly .modebar{position:absolute;" in css
    assert ".plotly-notifier .notifier-close{" in css
    assert "X " not in css and "Y " not in css  # every placeholder root replaced


def test_plotly_css_reads_single_and_double_quoted_rules_and_keeps_plotlys_order() -> None:
    bundle = (
        'var a={"X .b":\'font-family:"Open Sans";\',"Y .c":"color:#fff;"};for(k in a)s=k.replace(/^,/," ,")'
        '.replace(/X/g,".js-plotly-plot .plotly").replace(/Y/g,".plotly-notifier"),L.addStyleRule(s,a[k]);'
    )
    assert staticfinders.plotly_css(bundle).splitlines()[1:] == [
        ".plotly-notifier .c{color:#fff;}",
        '.js-plotly-plot .plotly .b{font-family:"Open Sans";}',
    ]


def test_a_bundle_without_the_inline_stylesheet_is_reported() -> None:
    with pytest.raises(staticfinders.PlotlyStylesMissing):
        staticfinders.plotly_css("console.log(1)")


def test_the_guard_ids_of_bundled_libraries_are_found() -> None:
    assert len(staticfinders.plotly_guard_ids(BUNDLE)) >= 1
    assert staticfinders.plotly_guard_ids(
        'getElementById("abc")){var e=document.createElement("style");e.id="abc"'
    ) == ["abc"]


@pytest.mark.django_db
def test_the_package_page_links_plotly_css_where_plotly_looks_for_it(client: Client) -> None:
    f.qwen35_package(with_history=False)
    body = client.get("/packages/meshllm/Qwen3.5-35B-A3B-UD-Q4_K_XL-layers/").content.decode()
    assert 'id="plotly.js-style-global" class="no-inline-styles"' in body
    for guard in staticfinders.installed_plotly_guard_ids():
        assert f'<template id="{guard}"></template>' in body
    assert "<style" not in body and "style=" not in body and "<script>" not in body


def test_collectstatic_gets_both_files_under_the_vendor_prefix() -> None:
    listed = {(name, storage.prefix) for name, storage in staticfinders.PlotlyFinder().list(None)}
    assert listed == {("plotly.min.js", "packages_app/vendor"), ("plotly.css", "packages_app/vendor")}
    assert finders.find(staticfinders.PLOTLY_CSS_STATIC_PATH) == str(staticfinders.plotly_css_file())


def test_collect_plotly_copies_both_files_into_static_root(tmp_path: Path, settings: Any) -> None:
    settings.STATIC_ROOT = tmp_path
    call_command("collect_plotly", stdout=StringIO())
    assert (tmp_path / "packages_app/vendor/plotly.min.js").stat().st_size > 1_000_000
    assert ".modebar" in (tmp_path / "packages_app/vendor/plotly.css").read_text()
