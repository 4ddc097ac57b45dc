"""The admin, where django-celery-beat's periodic tasks are edited."""

from django.contrib import admin
from django.urls import path

urlpatterns = [path("admin/", admin.site.urls)]
