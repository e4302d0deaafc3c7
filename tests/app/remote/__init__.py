"""Tests of app.remote."""
