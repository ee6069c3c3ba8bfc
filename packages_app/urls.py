"""Routes of the dashboard and its JSON API."""

from django.urls import path

from packages_app import api, api_read, api_telemetry, views, views_fleet, webhooks

app_name = "packages_app"

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
    path("packages/<str:owner>/<str:name>/", views.package_detail, name="package"),
    path(
        "packages/<str:owner>/<str:name>/manifest.patched.json",
        views.patched_manifest,
        name="patched_manifest",
    ),
    path("packages/<str:owner>/<str:name>/files/<path:path>", views.file_detail, name="file"),
    path("packages/<str:owner>/<str:name>/diff", views.revision_diff, name="diff"),
    path("api/v1/reports", api.report_create, name="api_reports"),
    path("api/v1/reports/batch", api.report_batch, name="api_reports_batch"),
    path("api/v1/runs", api_telemetry.runs_register, name="api_runs"),
    path("v1/traces", api_telemetry.traces_export, name="otlp_traces"),
    path("api/v1/ping", api.ping, name="api_ping"),
    path("api/v1/openapi.json", api.openapi_json, name="api_openapi"),
    path("api/v1/hooks/hub", webhooks.hub_webhook, name="api_hook_hub"),
    path("api/v1/packages", api_read.packages_list, name="api_packages"),
    path("api/v1/packages/<str:owner>/<str:name>", api_read.package_detail, name="api_package"),
]
