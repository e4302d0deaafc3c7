"""Tests of app.local_api."""
