"""Browser views: thin, they call selectors in queries.py and render templates."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from packages_app.models import Package


def catalog(request: HttpRequest) -> HttpResponse:
    packages = Package.objects.select_related("latest_revision")
    return render(request, "packages_app/catalog.html", {"packages": packages})
