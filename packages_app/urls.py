"""Routes of the dashboard, its JSON API and the sign-in pages."""

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import path

from packages_app import access, api, api_read, api_telemetry, views, views_fleet, webhooks

app_name = "packages_app"

# Nodes and the Hub authenticate with their own tokens, so these stay open when reading is not public.
_NODE_ENDPOINTS = [
    path("api/v1/reports", login_not_required(api.report_create), name="api_reports"),
    path("api/v1/reports/batch", login_not_required(api.report_batch), name="api_reports_batch"),
    path("api/v1/runs", login_not_required(api_telemetry.runs_register), name="api_runs"),
    path("v1/traces", login_not_required(api_telemetry.traces_export), name="otlp_traces"),
    path("api/v1/ping", login_not_required(api.ping), name="api_ping"),
    path("api/v1/hooks/hub", login_not_required(webhooks.hub_webhook), name="api_hook_hub"),
]

urlpatterns = [
    path("", views.catalog, name="catalog"),
    path("ingest/", views.ingest_status, name="ingest"),
    path("catalog.csv", views_fleet.catalog_csv, name="catalog_csv"),
    path("nodes/", views_fleet.nodes, name="nodes"),
    path("nodes/<path:name>/", views_fleet.node_detail, name="node"),
    path("topologies/<path:topology_id>/", views_fleet.topology_detail, name="topology"),
    path("glossary/", views_fleet.glossary_page, name="glossary"),
    path("packages/<str:owner>/<str:name>/compare", views_fleet.compare, name="compare"),
    path("packages/<str:owner>/<str:name>/reports.csv", views_fleet.reports_csv, name="reports_csv"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=access.ThrottledAuthenticationForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("packages/<str:owner>/<str:name>/", views.package_detail, name="package"),
    path("packages/<str:owner>/<str:name>/untrack", views.package_untrack, name="package_untrack"),
    path("packages/<str:owner>/<str:name>/delete", views.package_delete, name="package_delete"),
    path("packages/<str:owner>/<str:name>/reingest", views.package_reingest, name="package_reingest"),
    path(
        "packages/<str:owner>/<str:name>/propose-fix", views.package_propose_fix, name="package_propose_fix"
    ),
    path(
        "packages/<str:owner>/<str:name>/manifest.patched.json",
        views.patched_manifest,
        name="patched_manifest",
    ),
    path("packages/<str:owner>/<str:name>/files/<path:path>", views.file_detail, name="file"),
    path("packages/<str:owner>/<str:name>/diff", views.revision_diff, name="diff"),
    path("check/", views.check_manifest_page, name="check"),
    path("api/v1/check-manifest", api.check_manifest_api, name="api_check_manifest"),
    *_NODE_ENDPOINTS,
    path("api/v1/openapi.json", api.openapi_json, name="api_openapi"),
    path("api/v1/packages", api_read.packages_list, name="api_packages"),
    path("api/v1/packages/<str:owner>/<str:name>", api_read.package_detail, name="api_package"),
]
