"""Tests of app.storage."""
