"""Tests of app.library."""
