"""Routes of the dashboard, its JSON API and the sign-in pages."""

from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.urls import path

from packages_app.web import (
    access,
    api,
    api_nodes,
    api_packages,
    api_telemetry,
    check_page,
    fleet_pages,
    operator_pages,
    package_pages,
    pages,
    webhooks,
)

app_name = "packages_app"

# Nodes and the Hub authenticate with their own tokens, so these stay open when reading is not public.
_NODE_ENDPOINTS = [
    path("api/v1/reports", login_not_required(api.report_create), name="api_reports"),
    path("api/v1/reports/batch", login_not_required(api.report_batch), name="api_reports_batch"),
    path("api/v1/runs", login_not_required(api_telemetry.runs_register), name="api_runs"),
    path("api/v1/baselines", login_not_required(api.baselines_create), name="api_baselines"),
    path("v1/traces", login_not_required(api_telemetry.traces_export), name="otlp_traces"),
    path("api/v1/ping", login_not_required(api.ping), name="api_ping"),
    # POST: a node hands in a models certify report (its token); GET: the reports a reader may see.
    path("api/v1/certify-reports", login_not_required(api.certify_reports_api), name="api_certify_reports"),
    path("api/v1/hooks/hub", login_not_required(webhooks.hub_webhook), name="api_hook_hub"),
]

urlpatterns = [
    path("", pages.catalog, name="catalog"),
    path("ingest/", operator_pages.ingest_status, name="ingest"),
    path("catalog.csv", fleet_pages.catalog_csv, name="catalog_csv"),
    path("nodes/", fleet_pages.nodes, name="nodes"),
    path("nodes/<path:name>/", fleet_pages.node_detail, name="node"),
    path("topologies/<path:topology_id>/", fleet_pages.topology_detail, name="topology"),
    path("glossary/", fleet_pages.glossary_page, name="glossary"),
    path("packages/<str:owner>/<str:name>/compare", fleet_pages.compare, name="compare"),
    path("packages/<str:owner>/<str:name>/reports.csv", fleet_pages.reports_csv, name="reports_csv"),
    path(
        "accounts/login/",
        auth_views.LoginView.as_view(authentication_form=access.ThrottledAuthenticationForm),
        name="login",
    ),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("packages/<str:owner>/<str:name>/", package_pages.package_detail, name="package"),
    path("packages/<str:owner>/<str:name>/untrack", operator_pages.package_untrack, name="package_untrack"),
    path("packages/<str:owner>/<str:name>/delete", operator_pages.package_delete, name="package_delete"),
    path(
        "packages/<str:owner>/<str:name>/reingest", operator_pages.package_reingest, name="package_reingest"
    ),
    path("packages/<str:owner>/<str:name>/sync", operator_pages.package_sync, name="package_sync"),
    path(
        "packages/<str:owner>/<str:name>/propose-fix",
        operator_pages.package_propose_fix,
        name="package_propose_fix",
    ),
    path(
        "packages/<str:owner>/<str:name>/manifest.patched.json",
        package_pages.patched_manifest,
        name="patched_manifest",
    ),
    path("packages/<str:owner>/<str:name>/files/<path:path>", package_pages.file_detail, name="file"),
    path("packages/<str:owner>/<str:name>/diff", package_pages.revision_diff, name="diff"),
    path("check/", check_page.check_manifest_page, name="check"),
    path("api/v1/check-manifest", api.check_manifest_api, name="api_check_manifest"),
    *_NODE_ENDPOINTS,
    path("api/v1/openapi.json", api.openapi_json, name="api_openapi"),
    path("api/v1/packages", api_packages.packages_list, name="api_packages"),
    path("api/v1/packages/<str:owner>/<str:name>", api_packages.package_detail, name="api_package"),
    path("api/v1/nodes/<path:name>", api_nodes.node_detail, name="api_node"),
]
