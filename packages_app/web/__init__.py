"""The HTTP and gRPC edges of meshdash: everything that answers a request, and nothing else.

web/ owns the browser pages (``pages``, ``package_pages``, ``check_page``, ``operator_pages``,
``fleet_pages``), the JSON API (``api`` for node reports, the manifest check, the ping and the OpenAPI view;
``api_packages`` and ``api_nodes`` the read-only API, with ``api_read`` their shared parts and
``api_shapes`` their response shapes; ``api_telemetry``; ``openapi`` the document), the OTLP edges
(``api_telemetry`` for OTLP/HTTP, ``otlp_grpc`` the gRPC server), the Hub webhook (``webhooks``), the forms
that validate what a client sends (``forms``), the probes and ``/metrics`` (``health``, ``metrics_view``),
the routes (``urls``) and the helpers beside the views: who may act and the login throttle (``access``),
per-address limits (``ratelimit``) and the site-wide budget of manifest checks (``check_budget``). Edges
stay thin: validate the request, call a selector or a service, render or answer JSON.

Never imported here: the Hub client (``packages_app.hub``, ``huggingface_hub``) and the Celery tasks
(``packages_app.tasks``). Work a request starts goes through ``packages_app.queueing``, the edges' one door
to Celery (commands use it too, so it stays at the top), which imports the tasks only when work is queued;
``tests/test_import_rules.py`` checks both, in the source and in a started web process. Services,
selectors and the pure modules never import web/.

What stays at the top of packages_app although it is an edge, because Django finds it only there:
``admin.py`` (admin autodiscovery imports ``<app>.admin``), ``templatetags/`` (template tag libraries are
looked up only in an installed app's ``templatetags`` package), ``management/commands/`` (commands are
looked up only in an installed app's ``management.commands``) and ``apps.py``. Templates and static files
live in the project's ``templates/`` and ``static/`` directories.
"""
