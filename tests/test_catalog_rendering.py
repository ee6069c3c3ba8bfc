"""The catalog's rendering shortcuts: the filter widgets kept per value, and the rows built by one tag,
show what each request asks for, escaped."""

from __future__ import annotations

import pytest
from django.test import Client

from packages_app.models import Package
from packages_app.web import forms
from packages_app.web.forms import CatalogFilterForm
from tests import dashboard_factories as f

pytestmark = pytest.mark.django_db


@pytest.fixture
def fresh_widgets(monkeypatch: pytest.MonkeyPatch) -> dict[tuple[str, object, bool], str]:
    kept: dict[tuple[str, object, bool], str] = {}
    monkeypatch.setattr(forms, "RENDERED_WIDGETS", kept)
    return kept


def test_each_request_shows_its_own_sort_though_the_widgets_are_kept(
    client: Client, fresh_widgets: dict[tuple[str, object, bool], str]
) -> None:
    f.make_revision(f.make_package("meshllm/a-layers"), "undeclared-mtp")
    by_size = client.get("/", {"sort": "-size"}).content.decode()
    by_name = client.get("/", {"sort": "repo"}).content.decode()
    again = client.get("/", {"sort": "-size"}).content.decode()
    assert '<option value="-size" selected>' in by_size and '<option value="-size" selected>' in again
    assert '<option value="-size" selected>' not in by_name and '<option value="repo" selected>' in by_name
    assert ("sort", "-size", False) in fresh_widgets and ("sort", "repo", False) in fresh_widgets


def test_a_kept_widget_is_what_django_renders_for_that_value(
    fresh_widgets: dict[tuple[str, object, bool], str],
) -> None:
    form = CatalogFilterForm({"verdict": "inconsistent", "alert": "on", "days": "30"})
    assert form.is_valid()
    first = form.widgets()
    kept = form.widgets()  # from the dict this time
    assert first == kept == {name: str(form[name]) for name in forms.WIDGETS}
    assert "checked" in kept["alert"] and '<option value="30" selected>' in kept["days"]


def test_widgets_past_the_bound_are_rendered_but_not_kept(
    monkeypatch: pytest.MonkeyPatch, fresh_widgets: dict[tuple[str, object, bool], str]
) -> None:
    monkeypatch.setattr(forms, "MAX_RENDERED_WIDGETS", len(forms.WIDGETS))
    first = CatalogFilterForm({"sort": "-size"})
    assert first.is_valid()
    first.widgets()  # the control: under the bound, each widget is kept
    assert len(fresh_widgets) == len(forms.WIDGETS)
    second = CatalogFilterForm({"sort": "repo"})
    assert second.is_valid()
    widgets = second.widgets()
    assert '<option value="repo" selected>' in widgets["sort"]
    assert len(fresh_widgets) == len(forms.WIDGETS) and ("sort", "repo", False) not in fresh_widgets


def test_a_rows_sync_error_and_names_are_escaped(client: Client) -> None:
    package = f.make_package("meshllm/a-layers")
    f.make_revision(package, "undeclared-mtp")
    Package.objects.filter(pk=package.pk).update(sync_error='<script>"x"</script>')
    body = client.get("/").content.decode()
    assert 'title="&lt;script&gt;&quot;x&quot;&lt;/script&gt;">sync error</span>' in body
    assert "<script>" not in body.split("<tbody>", 1)[1]


def test_a_kept_badge_or_package_link_follows_the_script_prefix() -> None:
    from django.urls import get_script_prefix, set_script_prefix

    from packages_app.templatetags.catalog_rows import package_url
    from packages_app.templatetags.verdicts import headline_badge, verdict_badge

    before = get_script_prefix()
    try:
        at_root = (verdict_badge("undeclared-mtp"), headline_badge("serves-mtp"), package_url("o", "n"))
        set_script_prefix("/dash/")
        under = (verdict_badge("undeclared-mtp"), headline_badge("serves-mtp"), package_url("o", "n"))
    finally:
        set_script_prefix(before)
    assert all('href="/glossary/#' in badge for badge in at_root[:2]) and at_root[2] == "/packages/o/n/"
    assert all('href="/dash/glossary/#' in badge for badge in under[:2]) and under[2] == "/dash/packages/o/n/"
