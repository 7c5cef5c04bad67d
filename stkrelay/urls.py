from django.urls import path

from elections import views

urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    path("api/v1/leader", views.leader, name="api-leader"),
]
