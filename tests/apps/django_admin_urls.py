"""The URLconf of the admin tests (``test_django_admin.py``): Django's admin and nothing else."""

from __future__ import annotations

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
