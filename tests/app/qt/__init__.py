"""Tests of app.qt's services."""
