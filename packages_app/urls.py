"""Routes of the dashboard and its JSON API."""

from django.urls import path

from packages_app import views

app_name = "packages_app"

urlpatterns = [
    path("", views.catalog, name="catalog"),
]
